"""File watches: changes under a workspace path wake the session that asked (issue 9 §3, book ch6 §1.3).

``watch_files(path, pattern)`` registers a watch (a row of ``watch_watches``, restored after a
restart); :mod:`watchfiles` reports changes, debounced, and each batch becomes one
``file.changed`` event (``"src/app.py: modified"`` lines) for the owner's session. Only paths
inside the session's workspace can be watched, never kairos's own state (whose database changes
with every event: reporting it would wake the agent forever).

In a deployment of several workers the watcher runs on the leader (:mod:`kairos.runtime.leader`);
the tools work on every worker, writing rows the leader takes in within ``sync_s``.
"""

from __future__ import annotations

import asyncio
import builtins
import fnmatch
import json
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchfiles import Change, DefaultFilter, awatch

from kairos.errors import KairosError, SessionNotFoundError
from kairos.runtime.db import RecordDB
from kairos.runtime.events import Event
from kairos.runtime.handle import RuntimeContext, caller_of
from kairos.runtime.leader import ChangeCounter
from kairos.runtime.outbound import WatchFailed
from kairos.runtime.runtime import runtime_service
from kairos.storage import Migration
from kairos.tools.base import Tool, ToolContext, ToolResult
from kairos.tools.function import tool

log = logging.getLogger("kairos.runtime.integrations.watch")

SCHEMA = """
CREATE TABLE IF NOT EXISTS watch_watches (
    id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    path TEXT NOT NULL,
    root TEXT NOT NULL,
    pattern TEXT NOT NULL DEFAULT '',
    ignore TEXT NOT NULL DEFAULT '[]',
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS watch_by_session ON watch_watches (session);
"""
MIGRATIONS: tuple[Migration, ...] = (SCHEMA, ChangeCounter("watch").migration())
"""The ``watch`` tables' versions in ``runtime.db``; 1 is the schema from before versions (kairos.storage),
2 the change counter of workers that do not run the watcher."""
_COLUMNS = "id, session, path, root, pattern, ignore"
MAX_LINES = 50
_VERBS = {Change.added: "added", Change.modified: "modified", Change.deleted: "deleted"}

_MISSING = "file watching is not enabled in this runtime; ask the user to enable it"


@dataclass(frozen=True, slots=True)
class Watch:
    """One watch as stored."""

    id: str
    session: str
    path: str
    """Absolute, resolved."""
    root: str
    """The workspace: event lines name paths relative to it."""
    pattern: str = ""
    """A glob on the relative path or the file name (``*.py``); empty: everything."""
    ignore: tuple[str, ...] = ()
    """kairos's state folders, never reported."""

    def to_record(self) -> dict[str, Any]:
        """The JSON form."""
        return {"watch_id": self.id, "path": _rel(self.path, self.root), "pattern": self.pattern}


def _rel(path: str, root: str) -> str:
    try:
        return str(Path(path).relative_to(root)) or "."
    except ValueError:
        return path


class _Filter(DefaultFilter):
    """watchfiles' default ignores (.git, caches …), kairos's state, then the watch's pattern."""

    def __init__(self, w: Watch) -> None:
        super().__init__(ignore_paths=list(w.ignore))
        self.watch = w

    def __call__(self, change: Change, path: str) -> bool:
        if not super().__call__(change, path):
            return False
        if not self.watch.pattern:
            return True
        rel = _rel(path, self.watch.root)
        return fnmatch.fnmatch(rel, self.watch.pattern) or fnmatch.fnmatch(Path(path).name, self.watch.pattern)


def describe(changes: set[tuple[Change, str]], root: str) -> str:
    """One ``path: added/modified/deleted`` line per path (sorted, at most :data:`MAX_LINES`)."""
    lines = sorted(f"{_rel(p, root)}: {_VERBS.get(c, c.name)}" for c, p in changes)
    more = len(lines) - MAX_LINES
    return "\n".join(lines[:MAX_LINES]) + (f"\n… and {more} more changes" if more > 0 else "")


class FileWatch:
    """The file-watch component (``name = "watch"``) and the service its tools use.

    Args:
        debounce_ms: changes within this window are reported together (one event).
        step_ms: how often watchfiles looks for the end of a window.
        max_per_session: a session may hold at most this many watches.
    """

    name = "watch"
    leader_only = True  # one watcher per deployment (a leader lease)

    def __init__(
        self, *, debounce_ms: int = 1600, step_ms: int = 50, max_per_session: int = 20, sync_s: float = 2.0
    ) -> None:
        self.debounce_ms = debounce_ms
        self.sync_s = sync_s
        self._changes = ChangeCounter("watch")
        self.step_ms = step_ms
        self.max_per_session = max_per_session
        self._runtime: RuntimeContext | None = None
        self._group: asyncio.TaskGroup | None = None
        self._watches: dict[str, Watch] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._ready = asyncio.Event()

    async def run(self, runtime: RuntimeContext) -> None:
        """Restore the stored watches and report their changes until cancelled."""
        runtime.db.ensure("watch", MIGRATIONS)
        self._watches.clear()
        self._tasks.clear()
        try:
            async with asyncio.TaskGroup() as group:
                self._runtime, self._group = runtime, group
                self._changes.read(runtime.db)
                self._restore(runtime)
                self._ready.set()
                while True:
                    await asyncio.sleep(self.sync_s)
                    if self._changes.changed(runtime.db):
                        self._sync(runtime)
        finally:
            self._ready.clear()
            self._runtime = self._group = None

    def _restore(self, runtime: RuntimeContext) -> None:
        for w in _rows(runtime.db):
            if Path(w.path).exists():
                self._start(w)
            else:
                log.warning("watch %s: %s no longer exists; removed", w.id, w.path)
                self._forget(w.id)

    def _sync(self, runtime: RuntimeContext) -> None:
        """Take in the watches other workers added or removed (their rows are the truth)."""
        stored = {w.id: w for w in _rows(runtime.db)}
        for wid in [wid for wid in self._watches if wid not in stored]:
            self._watches.pop(wid, None)
            task = self._tasks.pop(wid, None)
            if task is not None:
                task.cancel()
        for wid, w in stored.items():
            if wid not in self._watches and Path(w.path).exists():
                self._start(w)

    async def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Until :meth:`run` has restored the watches (tests; tools run later anyway)."""
        async with asyncio.timeout(timeout_s):
            await self._ready.wait()

    def _start(self, w: Watch) -> None:
        assert self._group is not None
        self._watches[w.id] = w
        self._tasks[w.id] = self._group.create_task(self._watch(w), name=f"watch:{w.id}")

    async def _watch(self, w: Watch) -> None:
        rt = self._runtime
        assert rt is not None
        context = {"watch_id": w.id, "path": _rel(w.path, w.root), "pattern": w.pattern}
        try:
            async for changes in awatch(
                w.path, watch_filter=_Filter(w), debounce=self.debounce_ms, step=self.step_ms, recursive=True
            ):
                if changes:
                    event = Event("file.changed", describe(changes, w.root), {"type": "file"}, "watch", context,
                                  w.session)  # fmt: skip
                    await rt.submit(event)
        except asyncio.CancelledError:
            raise
        except SessionNotFoundError:
            log.warning("watch %s: its session %s no longer exists; removed", w.id, w.session)
            self._forget(w.id)
        except KairosError as e:  # the runtime stops
            log.info("watch %s ended: %s", w.id, e)
        except Exception as e:  # the path vanished, too many inotify watches …: this watch ends, not the others
            log.exception("watch %s failed", w.id)
            rt.publish(w.session, WatchFailed(watch_id=w.id, message=str(e)))
            self._forget(w.id)
        finally:
            self._tasks.pop(w.id, None)

    def _forget(self, watch_id: str) -> None:
        self._watches.pop(watch_id, None)
        if self._runtime is not None:
            self._runtime.db.write("DELETE FROM watch_watches WHERE id = ?", (watch_id,))

    # -- the service ----------------------------------------------------------------------------

    def _here_or(self, caller: RuntimeContext | None) -> RuntimeContext:
        """The runtime this watcher runs in, else the caller's (a worker that is not the leader)."""
        rt = self._runtime if self._group is not None else caller
        if rt is None:
            raise KairosError("the file-watch component is not running (add it to the runtime's components)")
        return rt

    def add(
        self, session: str, path: Path, root: Path, pattern: str = "", ignore: tuple[Path, ...] = (),
        caller: RuntimeContext | None = None,
    ) -> Watch:  # fmt: skip
        """Watch ``path`` (already checked to be inside the workspace ``root``) for ``session``.

        ``caller``: the calling session's runtime, whose records are used where the watcher runs in
        another process (the deployment's leader).

        Raises:
            ValueError: the path does not exist, or the session has too many watches.
            KairosError: the component is not running.
        """
        rt = self._here_or(caller)
        if not path.exists():
            raise ValueError(f"{_rel(str(path), str(root))!r} does not exist; watch an existing file or folder")
        mine = self.list(session, caller)
        if len(mine) >= self.max_per_session:
            raise ValueError(f"this session already has {len(mine)} watches; remove some first (unwatch_files)")
        state = {str(p) for p in ignore} | {str(rt.state_dir.resolve())}
        w = Watch(f"w-{uuid.uuid4().hex[:10]}", session, str(path), str(root), pattern.strip(), tuple(sorted(state)))
        rt.db.write(
            "INSERT INTO watch_watches (id, session, path, root, pattern, ignore, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (w.id, session, w.path, w.root, w.pattern, json.dumps(list(w.ignore)), time.time()),
        )
        if rt is self._runtime:
            self._start(w)
        else:
            self._changes.bump(rt.db)  # the leader's watcher takes it in at its next look
        return w

    def remove(self, watch_id: str, session: str | None = None, caller: RuntimeContext | None = None) -> bool:
        """Stop a watch (only ``session``'s own when given); False when there is no such watch."""
        rt = self._here_or(caller)
        if rt is not self._runtime:
            where = "id = ?" + ("" if session is None else " AND session = ?")
            gone = rt.db.write(
                f"DELETE FROM watch_watches WHERE {where}", (watch_id,) + (() if session is None else (session,))
            )
            if gone:
                self._changes.bump(rt.db)
            return bool(gone)
        w = self._watches.get(watch_id)
        if w is None or (session is not None and w.session != session):
            return False
        task = self._tasks.pop(watch_id, None)
        if task is not None:
            task.cancel()
        self._forget(watch_id)
        return True

    def list(self, session: str | None = None, caller: RuntimeContext | None = None) -> builtins.list[Watch]:
        """The watches of ``session`` (all when None)."""
        watches = self._watches.values() if self._group is not None or caller is None else _rows(caller.db)
        return [w for w in watches if session in (None, w.session)]


def _rows(db: RecordDB) -> builtins.list[Watch]:
    db.ensure("watch", MIGRATIONS)
    return [
        Watch(str(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), tuple(json.loads(r[5])))
        for r in db.read(f"SELECT {_COLUMNS} FROM watch_watches")
    ]


@tool(side_effects=True)
async def watch_files(path: str, ctx: ToolContext, pattern: str = "") -> dict[str, Any] | ToolResult:
    """Watch a file or folder of the workspace: you get a file.changed event when something in it changes.

    Use it to react to new or edited files (a build output, a drop folder) instead of polling.

    Args:
        path: a file or folder in the workspace.
        pattern: only report names matching this glob, e.g. "*.csv" (empty: everything).
        ctx: injected by the harness (not shown to the model).
    """
    found = runtime_service(ctx, FileWatch, _MISSING)
    if isinstance(found, ToolResult):
        return found
    watcher, session = found
    try:
        resolved = ctx.resolve_path(path, write=True)  # write: kairos's state is never watched, not even spill/
        w = watcher.add(session, resolved, ctx.workspace, pattern, ctx.state_dirs, caller_of(ctx))
    except (PermissionError, ValueError, KairosError) as e:
        return ToolResult(f"Not watched: {e}", is_error=True)
    return w.to_record()


@tool(side_effects=True)
async def unwatch_files(watch_id: str, ctx: ToolContext) -> str | ToolResult:
    """Stop one of your file watches.

    Args:
        watch_id: the id watch_files returned.
        ctx: injected by the harness (not shown to the model).
    """
    found = runtime_service(ctx, FileWatch, _MISSING)
    if isinstance(found, ToolResult):
        return found
    watcher, session = found
    try:
        removed = watcher.remove(watch_id, session, caller_of(ctx))
    except KairosError as e:
        return ToolResult(str(e), is_error=True)
    if removed:
        return f"Watch {watch_id} removed."
    return ToolResult(f"No watch {watch_id!r} in this session.", is_error=True)


def tools() -> builtins.list[Tool]:
    """The file-watch tools: watch_files, unwatch_files."""
    return [watch_files, unwatch_files]


__all__ = ["SCHEMA", "FileWatch", "Watch", "describe", "tools"]
