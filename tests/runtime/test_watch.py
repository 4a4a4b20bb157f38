"""File watches with real watchfiles on temporary folders: events, patterns, kairos's state, restore, errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.models.types import ModelRequest, ModelResponse
from kairos.runtime import RUNTIME_RESOURCE, Component, Runtime, RuntimeHandle, SqliteBus
from kairos.runtime.integrations.watch import FileWatch, unwatch_files, watch_files
from kairos.testing import ScriptedModel, reply
from kairos.tools.base import ToolContext, ToolResult
from tests.support import runtimes


def _ok(request: ModelRequest) -> ModelResponse:
    return reply("ok")


def _runtime(path: Path, watch: FileWatch | None) -> Runtime:
    components: list[Component] = [watch] if watch is not None else []
    return Runtime(Agent(ScriptedModel([_ok] * 500)), SessionStore(path), components=components)


def _ctx(rt: Runtime, sid: str) -> ToolContext:
    store = rt.store
    return ToolContext(
        workspace=store.workspace,
        session_id=sid,
        resources={RUNTIME_RESOURCE: RuntimeHandle(rt, sid)},
        state_dirs=(store.state_dir,),
    )


def _changes(rt: Runtime, sid: str) -> list[str]:
    assert isinstance(rt.bus, SqliteBus)
    return [
        str(e.data["content"])
        for e in rt.bus.history(sid, 0, limit=100_000)
        if e.type == "event.accepted" and e.data["type"] == "file.changed"
    ]


async def _until(cond: Callable[[], Any], timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if cond():
                return
            await asyncio.sleep(0.02)


def _write(file: Path, text: str) -> None:
    file.write_text(text)


async def _write_until_seen(rt: Runtime, sid: str, file: Path, line: str, timeout_s: float = 30.0) -> None:
    """Write ``file`` until an event names it (the watcher thread may start after the tool returns)."""
    async with asyncio.timeout(timeout_s):
        n = 0
        while not any(line in c for c in _changes(rt, sid)):
            n += 1
            _write(file, f"version {n}\n")
            for _ in range(25):
                if any(line in c for c in _changes(rt, sid)):
                    return
                await asyncio.sleep(0.02)


async def _watch(ctx: ToolContext, **args: Any) -> ToolResult:
    return await watch_files.call(args, ctx)


async def test_a_change_in_a_watched_folder_wakes_the_session(tmp_path: Path) -> None:
    (tmp_path / "inbox").mkdir()
    watch = FileWatch(debounce_ms=50, step_ms=10)
    async with _runtime(tmp_path, watch) as rt:
        await watch.wait_ready()
        sid = rt.create_session()
        result = await _watch(_ctx(rt, sid), path="inbox")
        assert not result.is_error, result.content
        record = json.loads(result.content)
        assert record["path"] == "inbox" and record["watch_id"].startswith("w-")
        await _write_until_seen(rt, sid, tmp_path / "inbox" / "order.csv", "inbox/order.csv: ")
        assert isinstance(rt.bus, SqliteBus)
        (first, *_) = [e.data for e in rt.bus.history(sid, 0) if e.type == "event.accepted"]
        assert first["type"] == "file.changed" and first["channel"] == "watch" and first["source"] == {"type": "file"}
        assert first["context"]["watch_id"] == record["watch_id"]
        assert any(
            line in ("inbox/order.csv: added", "inbox/order.csv: modified")
            for c in _changes(rt, sid)
            for line in c.splitlines()
        )


async def test_a_pattern_filters_and_kairos_state_is_never_reported(tmp_path: Path) -> None:
    watch = FileWatch(debounce_ms=50, step_ms=10)
    async with _runtime(tmp_path, watch) as rt:
        await watch.wait_ready()
        sid = rt.create_session()
        everything = await _watch(_ctx(rt, sid), path=".")
        assert not everything.is_error, everything.content
        other = rt.create_session()
        only_py = await _watch(_ctx(rt, other), path=".", pattern="*.py")
        assert not only_py.is_error
        (tmp_path / "notes.txt").write_text("x")
        await _write_until_seen(rt, other, tmp_path / "app.py", "app.py: ")
        await _write_until_seen(rt, sid, tmp_path / "notes.txt", "notes.txt: ")
        # every accepted event wrote kairos's databases under the watched folder: none of that is reported
        assert all(".kairos" not in c for c in _changes(rt, sid) + _changes(rt, other))
        assert all("notes.txt" not in c for c in _changes(rt, other))


async def test_watches_are_restored_after_a_restart_and_can_be_removed(tmp_path: Path) -> None:
    (tmp_path / "drop").mkdir()
    watch = FileWatch(debounce_ms=50, step_ms=10)
    async with _runtime(tmp_path, watch) as rt:
        await watch.wait_ready()
        sid = rt.create_session()
        wid = json.loads((await _watch(_ctx(rt, sid), path="drop")).content)["watch_id"]
    again = FileWatch(debounce_ms=50, step_ms=10)
    async with _runtime(tmp_path, again) as rt2:
        await again.wait_ready()
        assert [w.id for w in again.list(sid)] == [wid]
        await _write_until_seen(rt2, sid, tmp_path / "drop" / "a.txt", "drop/a.txt: ")
        other = rt2.create_session()
        denied = await unwatch_files.call({"watch_id": wid}, _ctx(rt2, other))
        assert denied.is_error and "No watch" in denied.content
        done = await unwatch_files.call({"watch_id": wid}, _ctx(rt2, sid))
        assert not done.is_error and again.list() == []
        assert rt2.db.read("SELECT COUNT(*) FROM watch_watches")[0][0] == 0


async def test_paths_outside_the_workspace_or_in_kairos_state_are_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    watch = FileWatch(debounce_ms=50, step_ms=10)
    async with _runtime(workspace, watch) as rt:
        await watch.wait_ready()
        ctx = _ctx(rt, rt.create_session())
        cases = [
            (str(tmp_path), "outside the workspace"),
            ("../", "outside the workspace"),
            (".kairos", "kairos's own state"),
            (".kairos/spill", "kairos's own state"),
            ("missing", "does not exist"),
        ]
        for path, expected in cases:
            result = await _watch(ctx, path=path)
            assert result.is_error and expected in result.content, (path, result.content)
        unknown = await unwatch_files.call({"watch_id": "w-nope"}, ctx)
        assert unknown.is_error and "No watch 'w-nope'" in unknown.content
        assert rt.db.read("SELECT COUNT(*) FROM watch_watches")[0][0] == 0
    bare = await _watch(ToolContext(workspace=workspace), path=".")
    assert bare.is_error and "needs the runtime" in bare.content


async def test_a_worker_that_is_not_the_leader_adds_and_removes_watches_the_leaders_watcher_runs(
    tmp_path: Path,
) -> None:
    """Two runtimes on one store (as workers share PostgreSQL): only the leader watches; both take watches."""
    (tmp_path / "drop").mkdir()
    leader_watch, follower_watch = FileWatch(debounce_ms=50, sync_s=0.05), FileWatch(sync_s=0.05)
    leader = _runtime(tmp_path, leader_watch)
    follower = runtimes.follower(tmp_path, follower_watch)
    async with leader, follower:
        await leader_watch.wait_ready()
        sid = follower.create_session("w")
        ctx = _ctx(follower, sid)
        added = await _watch(ctx, path="drop")
        assert not added.is_error, added.content
        watch_id = json.loads(added.content)["watch_id"]
        await _until(lambda: watch_id in {w.id for w in leader_watch.list()})  # the leader took it in
        await _write_until_seen(leader, sid, tmp_path / "drop" / "a.txt", "drop/a.txt")
        removed = await unwatch_files.call({"watch_id": watch_id}, ctx)
        assert removed.content == f"Watch {watch_id} removed."
        await _until(lambda: not leader_watch.list())  # and let it go
        assert follower_watch.list(caller=follower) == []
