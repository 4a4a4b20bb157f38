"""Async tools: long-running work the runtime owns, reported back as events (book ch6 §3.3, Exp 6-2).

A tool that takes more than a few seconds must not hold the agent: ``start_command`` returns a
task id at once (the placeholder result) and the command's real result arrives later as an
``async.result`` event, which the session takes up at its next safe point (a
``<task_result>`` message). Meanwhile the agent answers other things, asks ``task_status`` (with
progress: the last ``NN%`` the command printed, else its last line) or ``cancel_task``.
``monitor_shell`` watches a command's output and posts a ``shell.match`` event when a line
matches (coalesced to at most one event per ``match_interval_s``), so the agent does not poll.

The :class:`TaskManager` component keeps every task in ``runtime.db`` (table ``tasks_tasks``) and
its output in ``<state>/tasks/<id>.log``, so both survive a crash. Commands run detached (see
:mod:`kairos.runtime.integrations._tasks_proc`) in the session's workspace with the tool environment (no
secrets). After a restart a task whose process still runs (same pid *and* start time) is watched
again; one whose process is gone is reported by its exit code if the wrapper wrote one, else as
lost in the restart. Any async function can run as a task too (:meth:`TaskManager.spawn_coroutine`);
those cannot outlive the process and are reported lost after a crash.

Several workers (records on PostgreSQL) share ``tasks_tasks``, but a pid means something on one
machine only: each row names its ``owner``, the runtime process that started it (host, pid, start
time). A runtime restores only its own host's tasks whose owner is gone (its previous run, or a
worker on the same host that died), taking each over with a compare-and-set so that one process
does; it never signals, re-attaches to or marks dead a task owned by a live process or by another
host. A dead worker's tasks therefore wait, still ``running``, for a runtime on their host: their
commands go on there (detached), and only that machine can read their exit codes and logs.
The owner copies the end of a task's output into its row (``shared_tail``, at most every
:data:`SHARE_S`), so ``task_status`` on any worker shows it; ``cancel_task`` on another worker asks the
owner through the row (``cancel_asked``, read every :data:`SHARE_S`) and waits for it to stop the task.
An ``effect_key`` is claimed with the row before the command starts, so a tool call redelivered
to another worker returns the first task instead of starting the command twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kairos.errors import KairosError
from kairos.runtime.events import Event, inbox_event
from kairos.runtime.handle import RuntimeContext
from kairos.runtime.integrations import _tasks_proc as proc
from kairos.runtime.integrations._tasks_records import COLUMNS, ENDED, MIGRATIONS, PERCENT, SCHEMA, TaskInfo
from kairos.tools.base import Tool

log = logging.getLogger("kairos.runtime.integrations.tasks")

SHARE_S = 1.0
"""How often a running task's owner copies its output's end to the row and looks for a cancel asked elsewhere."""


@dataclass
class _Live:
    """A task watched by this process."""

    info: TaskInfo
    pgid: int = 0
    start: str = ""
    runner: asyncio.Task[None] | None = None
    cancel_requested: bool = False
    waiters: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    summary: str = ""


class TaskManager:
    """The runtime component that owns async tasks (see the module docstring).

    Args:
        poll_s: how often running tasks are checked (exit, new output).
        match_interval_s: ``shell.match`` events of one task are coalesced to one per interval.
        kill_grace_s: between SIGTERM and SIGKILL when a task is cancelled.
        tail_chars: how much of the output the summaries quote.
        stop_on_exit: kill running commands when the runtime stops (default: leave them, re-attach).
    """

    name = "tasks"
    leader_only = False  # a task runs where it was started

    def __init__(
        self,
        *,
        poll_s: float = 0.2,
        match_interval_s: float = 1.0,
        kill_grace_s: float = 3.0,
        tail_chars: int = 1500,
        stop_on_exit: bool = False,
    ) -> None:
        self.poll_s = poll_s
        self.match_interval_s = match_interval_s
        self.kill_grace_s = kill_grace_s
        self.tail_chars = tail_chars
        self.stop_on_exit = stop_on_exit
        self._runtime: RuntimeContext | None = None
        self._dir: Path | None = None
        self._live: dict[str, _Live] = {}
        self._cancels: set[asyncio.Task[TaskInfo]] = set()
        """Cancels asked by other workers, running here."""
        self._ready = asyncio.Event()

    # -- the component ------------------------------------------------------------------------

    async def run(self, runtime: RuntimeContext) -> None:
        """Restore running tasks (re-attach or report them lost), then serve until cancelled."""
        self._runtime = runtime
        runtime.db.ensure("tasks", MIGRATIONS)
        self._dir = runtime.state_dir / "tasks"
        self._dir.mkdir(parents=True, exist_ok=True)
        me = proc.owner_id()
        for info in self._rows("status = 'running'", ()):
            if info.id not in self._live and self._take_over(info.id, me):
                await self._restore(info)
        self._ready.set()
        try:
            await asyncio.Event().wait()
        finally:
            self._ready.clear()
            await self._shutdown()

    def _take_over(self, task_id: str, me: str) -> bool:
        """Whether this process may judge the task: its owner is this process, or a gone one of this host."""
        rows = self._db().read("SELECT owner FROM tasks_tasks WHERE id = ?", (task_id,))
        owner = str(rows[0][0]) if rows else me
        if owner == me:
            return True
        if not proc.owner_gone(owner):
            return False  # a live worker's, or another host's: never ours to judge
        changed = self._db().write("UPDATE tasks_tasks SET owner = ? WHERE id = ? AND owner = ?", (me, task_id, owner))
        return bool(changed)

    async def _restore(self, info: TaskInfo) -> None:
        rows = self._db().read("SELECT pgid, pid_start FROM tasks_tasks WHERE id = ?", (info.id,))
        pgid, start = (int(rows[0][0] or 0), str(rows[0][1])) if rows else (0, "")
        live = _Live(info, pgid, start)
        if info.kind == "coroutine" or info.pid is None:
            await self._finish(live, "failed", None, "lost in a restart: the runtime stopped while it ran")
            return
        if proc.alive(info.pid, start):
            live.info = self._update(info.id, note="re-attached after a restart")
            self._watch(live, reattached=True)
        else:
            await self._finish_process(live, reattached=True)

    async def _shutdown(self) -> None:
        for live in list(self._live.values()):
            if live.runner is not None:
                live.runner.cancel()
        for live in list(self._live.values()):
            if live.runner is not None:
                with contextlib.suppress(BaseException):
                    await live.runner
            kill = self.stop_on_exit or live.info.kind == "coroutine"
            if kill and live.info.pid is not None:
                await proc.kill_group(live.pgid, live.info.pid, live.start, self.kill_grace_s)
            if kill:
                await self._finish(live, "cancelled", None, "stopped with the runtime")
        self._live.clear()

    # -- starting -----------------------------------------------------------------------------

    async def start_command(
        self,
        session: str,
        command: str,
        *,
        title: str = "",
        cwd: Path,
        env: dict[str, str],
        pattern: str = "",
        effect_key: str | None = None,
    ) -> TaskInfo:
        """Run ``command`` as a task of ``session``; ``pattern`` makes it a monitor (``shell.match``).

        ``effect_key``: the idempotency key of the tool call; a second start with it returns the first task.

        Raises:
            KairosError: the manager is not running, the pattern is not a valid regex, or the command failed to start.
        """
        self._need_running()
        if pattern:
            try:
                re.compile(pattern)
            except re.error as e:
                raise KairosError(f"the pattern {pattern!r} is not a valid regular expression: {e}") from e
        tid, dirpath = self._new_id(), self._dir
        assert dirpath is not None
        log_file = dirpath / f"{tid}.log"
        kind = "monitor" if pattern else "command"
        title = title.strip() or command.strip().splitlines()[0][:60]
        # the row (and its effect key) first: a second start with the key, here or on another worker, finds it
        claimed = self._db().write(
            "INSERT INTO tasks_tasks (id, session, kind, title, command, pattern, effect_key, status, started, output, "
            "owner) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?) ON CONFLICT DO NOTHING",
            (tid, session, kind, title, command, pattern, effect_key or None, time.time(), str(log_file),
             proc.owner_id()),
        )  # fmt: skip
        if not claimed:
            found = self._rows("effect_key = ?", (effect_key,)) if effect_key else []
            if found:
                return found[0]
            raise KairosError(f"task id {tid} is taken; start the command again")
        try:
            launched = await proc.launch(command, cwd, env, dirpath / f"{tid}.exit", log_file)
        except BaseException as e:
            self._db().write("DELETE FROM tasks_tasks WHERE id = ?", (tid,))
            if isinstance(e, OSError):
                raise KairosError(f"could not start the command: {e}") from e
            raise
        self._db().write(
            "UPDATE tasks_tasks SET pid = ?, pgid = ?, pid_start = ? WHERE id = ?",
            (launched.pid, launched.pgid, launched.start, tid),
        )
        live = _Live(self._get(tid), launched.pgid, launched.start)
        self._watch(live, reattached=False)
        return live.info

    def spawn_coroutine(self, session: str, title: str, coro_factory: Callable[[], Awaitable[str]]) -> TaskInfo:
        """Run an async function as a task of ``session``: its return value is the result event.

        Raises:
            KairosError: the manager is not running.
        """
        self._need_running()
        tid = self._new_id()
        self._db().write(
            "INSERT INTO tasks_tasks (id, session, kind, title, status, started, owner) VALUES (?, ?, 'coroutine', ?, "
            "'running', ?, ?)",
            (tid, session, title or "task", time.time(), proc.owner_id()),
        )
        live = _Live(self._get(tid))
        self._live[tid] = live
        live.runner = asyncio.get_running_loop().create_task(self._run_coroutine(live, coro_factory), name=tid)
        return live.info

    async def _run_coroutine(self, live: _Live, factory: Callable[[], Awaitable[str]]) -> None:
        try:
            text = await factory()
        except asyncio.CancelledError:
            if live.cancel_requested:
                await self._finish(live, "cancelled", None, "cancelled", summary="")
                return
            raise
        except Exception as e:
            await self._finish(live, "failed", None, "", summary=f"{type(e).__name__}: {e}")
            return
        await self._finish(live, "done", None, "", summary=str(text))

    # -- watching -----------------------------------------------------------------------------

    def _watch(self, live: _Live, *, reattached: bool) -> None:
        self._live[live.info.id] = live
        name = f"task:{live.info.id}"
        live.runner = asyncio.get_running_loop().create_task(self._follow(live, reattached), name=name)

    async def _follow(self, live: _Live, reattached: bool) -> None:
        """Poll the process and its log: progress, pattern matches, the end."""
        info = live.info
        assert info.pid is not None
        path = Path(info.output)
        regex = re.compile(info.pattern) if info.pattern else None
        # a re-attached monitor goes on after the output it already reported
        row = self._db().read("SELECT log_offset, matches FROM tasks_tasks WHERE id = ?", (info.id,))
        offset, count = (int(row[0][0]), int(row[0][1])) if row and regex is not None else (0, 0)
        partial = b""
        last_pct, last_line = ("", "") if info.percent is None else (info.progress, "")
        matches: list[str] = []
        sent_at = shared_at = 0.0
        shared_offset = -1
        loop = asyncio.get_running_loop()
        while True:
            running = proc.alive(info.pid, live.start)
            data = proc.read_from(path, offset)
            offset += len(data)
            chunk = partial + data
            lines = chunk.split(b"\n")
            partial = lines.pop() if running else b""
            for raw in lines:
                text = raw.decode(errors="replace").rstrip("\r")
                if not text.strip():
                    continue
                last_line = text.strip()[:200]
                pct = PERCENT.findall(text)
                if pct:
                    last_pct = pct[-1] + "%"
                if regex is not None and regex.search(text):
                    matches.append(text[:500])
            progress = last_pct or last_line
            if progress and progress != live.info.progress:
                live.info = self._update(info.id, progress=progress)
            if matches and (not running or loop.time() - sent_at >= self.match_interval_s):
                count += 1
                sent_at = loop.time()
                await self._post_matches(live, matches, count)
                self._db().write(
                    "UPDATE tasks_tasks SET log_offset = ?, matches = ? WHERE id = ?",
                    (offset - len(partial), count, info.id),
                )
                matches = []
            if not running:
                break
            if loop.time() - shared_at >= SHARE_S:
                shared_at = loop.time()
                self._share(live, grew=offset != shared_offset)
                shared_offset = offset
            await asyncio.sleep(self.poll_s)
        await self._finish_process(live, reattached=reattached)

    def _share(self, live: _Live, *, grew: bool) -> None:
        """Copy the output's end to the row when it grew; start a cancel another worker asked for."""
        task_id = live.info.id
        if grew:
            self._db().write(
                "UPDATE tasks_tasks SET shared_tail = ? WHERE id = ?", (self._file_tail(live.info), task_id)
            )
        asked = self._db().read("SELECT cancel_asked FROM tasks_tasks WHERE id = ?", (task_id,))
        if asked and asked[0][0] is not None and not live.cancel_requested:
            log.info("task %s: cancelled from another worker", task_id)
            cancel = asyncio.get_running_loop().create_task(self.cancel(task_id), name=f"cancel:{task_id}")
            self._cancels.add(cancel)
            cancel.add_done_callback(self._cancels.discard)

    async def _post_matches(self, live: _Live, lines: list[str], n: int) -> None:
        info = live.info
        shown = lines[-20:]
        head = f"{len(lines)} new line(s) of task {info.id} ({info.title}) matched /{info.pattern}/"
        if len(lines) > len(shown):
            head += f" (the last {len(shown)} shown)"
        event = Event(
            "shell.match",
            head + ":\n" + "\n".join(shown),
            source={"type": "task", "task_id": info.id, "name": info.title},
            channel="shell",
            context={"task_id": info.id, "pattern": info.pattern},
            session=info.session,
            id=f"task:{info.id}:match:{n}",
        )
        await self._submit(event)

    async def _finish_process(self, live: _Live, *, reattached: bool) -> None:
        info = live.info
        code = proc.read_exit_code(Path(info.output).with_suffix(".exit")) if info.output else None
        if live.cancel_requested:
            await self._finish(live, "cancelled", code, "cancelled")
        elif code is None:
            why = "its process is gone and left no exit code"
            why += " (it ended while the runtime was down)" if reattached else " (killed?)"
            await self._finish(live, "failed", None, why)
        else:
            await self._finish(live, "done" if code == 0 else "failed", code, "")

    async def _finish(self, live: _Live, status: str, code: int | None, note: str, summary: str | None = None) -> None:
        """Record the end; post the ``async.result`` event (not for a cancel the agent asked for)."""
        tail = self._file_tail(live.info)
        info = self._update(live.info.id, status=status, exit_code=code, ended=time.time(), note=note, shared_tail=tail)
        live.info = info
        if summary is None:
            summary = f"last output:\n{tail}" if tail else "(no output)"
        live.summary = f"Task {info.line()}.\n{summary}".rstrip()
        self._live.pop(info.id, None)
        live.ended.set()
        if live.cancel_requested or live.waiters:
            return  # the canceller or wait_task hands the result over itself
        await self.post_result(live.info, live.summary)

    async def post_result(self, info: TaskInfo, summary: str) -> None:
        """Submit the ``async.result`` event of an ended task (idempotent: keyed by the task id)."""
        event = Event(
            "async.result",
            summary,
            source={"type": "task", "task_id": info.id, "name": info.title},
            channel="task",
            context={"task_id": info.id, "status": "completed" if info.status == "done" else info.status},
            session=info.session,
            id=f"task:{info.id}:end",
        )
        await self._submit(event)

    async def _submit(self, event: Event) -> None:
        rt = self._runtime
        assert rt is not None and event.session is not None
        try:
            await rt.submit(event)
        except KairosError as e:
            try:  # stopping: keep it in the session for the next start
                rt.post(event.session, inbox_event(event, "queue"), key=event.id or None)
            except Exception:
                log.warning("task event %s lost: %s", event.id, e)
        except Exception:
            log.exception("posting task event %s failed", event.id)

    # -- queries and control ------------------------------------------------------------------

    def get(self, task_id: str) -> TaskInfo | None:
        """A task by id (any session)."""
        rows = self._rows("id = ?", (task_id,))
        return rows[0] if rows else None

    def tasks_of(self, session: str) -> list[TaskInfo]:
        """The session's tasks, oldest first."""
        return self._rows("session = ? ORDER BY started", (session,))

    def tail(self, task_id: str, chars: int | None = None) -> str:
        """The end of the task's output ('' when it has none): its log here, else the owner's copy in the row."""
        info = self.get(task_id)
        if info is None or not info.output:
            return ""
        if Path(info.output).exists():
            return self._file_tail(info, chars)
        rows = self._db().read("SELECT shared_tail FROM tasks_tasks WHERE id = ?", (task_id,))
        text = str(rows[0][0]) if rows else ""
        n = chars or self.tail_chars
        return text if len(text) <= n else "…" + text[-n:]

    def _file_tail(self, info: TaskInfo, chars: int | None = None) -> str:
        if not info.output:
            return ""
        n = chars or self.tail_chars
        data = proc.read_tail(Path(info.output), n * 4)
        text = data.decode(errors="replace").strip()
        return text if len(text) <= n else "…" + text[-n:]

    async def cancel(self, task_id: str, *, notify: bool = False) -> TaskInfo:
        """Stop a task: SIGTERM to its process group, SIGKILL after the grace time; waits for it.

        ``notify`` also posts its ``async.result`` (for a cancel the agent did not ask for).

        Raises:
            KairosError: no such task, or it already ended.
        """
        info = self.get(task_id)
        if info is None:
            raise KairosError(f"no task {task_id!r}")
        live = self._live.get(task_id)
        if info.status == "running" and live is None:
            return await self._cancel_elsewhere(info, notify=notify)
        if info.status != "running" or live is None:
            raise KairosError(f"task {task_id} already ended: {info.line()}")
        live.cancel_requested = True
        if info.pid is not None:
            await proc.kill_group(live.pgid, info.pid, live.start, self.kill_grace_s)
        elif live.runner is not None:
            live.runner.cancel()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.kill_grace_s + 5 * self.poll_s + 5):
                await live.ended.wait()
        if notify:
            await self.post_result(live.info, live.summary)
        return self.get(task_id) or info

    async def _cancel_elsewhere(self, info: TaskInfo, *, notify: bool) -> TaskInfo:
        """Ask the worker that runs the task to cancel it (through its row) and wait until it did."""
        self._db().write("UPDATE tasks_tasks SET cancel_asked = ? WHERE id = ?", (time.time(), info.id))
        deadline = time.monotonic() + SHARE_S + self.kill_grace_s + 10 * self.poll_s + 5
        while time.monotonic() < deadline:
            now = self.get(info.id) or info
            if now.status != "running":
                if notify:
                    await self.post_result(now, f"Task {now.line()}.\nlast output:\n{self.tail(now.id)}".rstrip())
                return now
            await asyncio.sleep(max(self.poll_s, 0.1))
        rows = self._db().read("SELECT owner FROM tasks_tasks WHERE id = ?", (info.id,))
        owner = str(rows[0][0]) if rows else ""
        raise KairosError(
            f"task {info.id} runs in another kairos process ({owner or 'unknown'}), which did not stop it in time "
            "(it stops it once it runs again)"
        )

    async def wait(self, task_id: str, timeout_s: float) -> tuple[TaskInfo, str, bool]:
        """Until the task ends or ``timeout_s`` passes: (info, summary, ended).

        An end seen here is not also posted as an event (the caller reports it); a waiter
        cancelled after the end posts it after all, so the result is never lost.

        Raises:
            KairosError: no such task.
        """
        info = self.get(task_id)
        if info is None:
            raise KairosError(f"no task {task_id!r}")
        live = self._live.get(task_id)
        if live is None:
            return info, f"Task {info.line()}.", True
        live.waiters += 1
        try:
            async with asyncio.timeout(timeout_s):
                await live.ended.wait()
        except TimeoutError:
            return self.get(task_id) or info, "", False
        except asyncio.CancelledError:
            if live.ended.is_set() and not live.cancel_requested:
                asyncio.get_running_loop().create_task(self.post_result(live.info, live.summary))
            raise
        finally:
            live.waiters -= 1
        return live.info, live.summary, True

    async def ready(self, timeout_s: float = 10.0) -> None:
        """Until :meth:`run` restored its tasks (tests, tools called right at start)."""
        async with asyncio.timeout(timeout_s):
            await self._ready.wait()

    # -- storage ------------------------------------------------------------------------------

    def _need_running(self) -> None:
        if self._runtime is None or self._dir is None or not self._ready.is_set():
            raise KairosError("the task manager is not running (add it to the runtime's components)")

    def _db(self) -> Any:
        assert self._runtime is not None
        return self._runtime.db

    def _new_id(self) -> str:
        return "t-" + secrets.token_hex(4)

    def _rows(self, where: str, args: tuple[Any, ...]) -> list[TaskInfo]:
        rows = self._db().read(f"SELECT {COLUMNS} FROM tasks_tasks WHERE {where}", args)
        return [TaskInfo(*row) for row in rows]

    def _get(self, task_id: str) -> TaskInfo:
        info = self.get(task_id)
        assert info is not None
        return info

    def _update(self, task_id: str, **values: Any) -> TaskInfo:
        sets = ", ".join(f"{k} = ?" for k in values)
        self._db().write(f"UPDATE tasks_tasks SET {sets} WHERE id = ?", (*values.values(), task_id))
        return self._get(task_id)


def tools() -> list[Tool]:
    """The tools for the model: start_command, monitor_shell, task_status, cancel_task, wait_task."""
    from kairos.runtime.integrations._tasks_tools import task_tools  # the tools import this module

    return task_tools()


__all__ = ["ENDED", "MIGRATIONS", "SCHEMA", "TaskInfo", "TaskManager", "tools"]
