"""Timers: one-shot, interval, cron and heartbeat on a manual clock; restore after a restart; tool errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.models.types import ModelRequest, ModelResponse
from kairos.runtime import RUNTIME_RESOURCE, Component, Runtime, RuntimeHandle, SqliteBus
from kairos.runtime.integrations._timers_tools import cancel_timer, list_timers, set_timer
from kairos.runtime.integrations.timers import Timers
from kairos.testing import ScriptedModel, reply
from kairos.testing.clock import ManualClock
from kairos.tools.base import InvalidArguments, ToolContext, ToolResult
from tests.support import runtimes

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _ok(request: ModelRequest) -> ModelResponse:
    return reply("noted")


def _runtime(path: Path, timers: Timers | None) -> Runtime:
    components: list[Component] = [timers] if timers is not None else []
    return Runtime(Agent(ScriptedModel([_ok] * 200)), SessionStore(path), components=components)


@contextlib.asynccontextmanager
async def _started(path: Path, **options: Any) -> AsyncIterator[tuple[ManualClock, Timers, Runtime]]:
    """A runtime with Timers on a manual clock at ``T0``, its timers restored and running."""
    clock = ManualClock(T0)
    timers = Timers(now=clock.now, sleep=clock.sleep, **options)
    async with _runtime(path, timers) as rt:
        await timers.wait_ready()
        yield clock, timers, rt


def _ctx(rt: Runtime, sid: str, workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace, session_id=sid, resources={RUNTIME_RESOURCE: RuntimeHandle(rt, sid)})


async def _until(cond: Callable[[], bool], timeout_s: float = 20.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if cond():
                return
            await asyncio.sleep(0.01)


async def _settle(rt: Runtime) -> None:
    """Let the scheduler run what is due now (no timing: a bounded number of loop turns)."""
    for _ in range(30):
        await asyncio.sleep(0)
    for sid in rt.active_sessions():
        await rt.wait_idle(sid)


def _fires(rt: Runtime, sid: str | None, kind: str = "timer.trigger") -> list[dict[str, Any]]:
    assert isinstance(rt.bus, SqliteBus)
    return [e.data for e in rt.bus.history(sid, 0) if e.type == "event.accepted" and e.data["type"] == kind]


async def _set(ctx: ToolContext, **args: Any) -> ToolResult:
    return await set_timer.call({"message": "check the build", **args}, ctx)


async def test_a_one_shot_timer_fires_once_when_due(tmp_path: Path) -> None:
    async with _started(tmp_path) as (clock, timers, rt):
        sid = rt.create_session("t")
        ctx = _ctx(rt, sid, tmp_path)
        result = await _set(ctx, after_s=60)
        assert not result.is_error, result.content
        record = json.loads(result.content)
        tid = record["timer_id"]
        assert record["next_due"] == "2026-01-01T00:01:00.000+00:00"
        clock.advance(59)
        await _settle(rt)
        assert _fires(rt, sid) == []
        clock.advance(1)
        await _until(lambda: len(_fires(rt, sid)) == 1)
        await _settle(rt)
        fire = _fires(rt, sid)
        assert len(fire) == 1
        assert fire[0]["id"] == f"timer:{tid}:2026-01-01T00:01:00.000+00:00"
        assert fire[0]["source"] == {"type": "timer", "timer_id": tid} and fire[0]["channel"] == "timer"
        assert fire[0]["content"] == "check the build"
        assert json.loads((await list_timers.call({}, ctx)).content) == []
        assert rt.db.read("SELECT COUNT(*) FROM timers_timers")[0][0] == 0
        messages = rt.store.trajectories.load_messages(sid)
        assert f'<timer name="{tid}">\ncheck the build\n</timer>' in [m.content for m in messages]


async def test_an_at_time_without_an_offset_is_read_in_the_timezone(tmp_path: Path) -> None:
    async with _started(tmp_path) as (clock, timers, rt):
        sid = rt.create_session()
        result = await _set(_ctx(rt, sid, tmp_path), at="2026-01-01T09:30:00", timezone="Asia/Tokyo")
        assert json.loads(result.content)["next_due"] == "2026-01-01T00:30:00.000+00:00"


async def test_an_interval_timer_fires_once_for_missed_runs_then_keeps_its_rhythm(tmp_path: Path) -> None:
    async with _started(tmp_path) as (clock, timers, rt):
        sid = rt.create_session()
        ctx = _ctx(rt, sid, tmp_path)
        tid = json.loads((await _set(ctx, every_s=10)).content)["timer_id"]
        clock.advance(10)
        await _until(lambda: len(_fires(rt, sid)) == 1)
        clock.advance(35)  # due at 20, 30, 40: one fire, not three
        await _until(lambda: len(_fires(rt, sid)) == 2)
        await _settle(rt)
        assert len(_fires(rt, sid)) == 2
        (listed,) = json.loads((await list_timers.call({}, ctx)).content)
        assert listed["timer_id"] == tid and listed["next_due"] == "2026-01-01T00:00:50.000+00:00"
        assert listed["fired"] == 2
        clock.advance(5)
        await _until(lambda: len(_fires(rt, sid)) == 3)


async def test_a_cron_timer_follows_its_time_zone(tmp_path: Path) -> None:
    async with _started(tmp_path) as (clock, timers, rt):
        sid = rt.create_session()
        ctx = _ctx(rt, sid, tmp_path)
        record = json.loads((await _set(ctx, cron="0 9 * * *", timezone="Europe/Paris")).content)
        assert record["next_due"] == "2026-01-01T08:00:00.000+00:00"  # 09:00 in Paris is 08:00 UTC in winter
        assert record["schedule"] == "cron '0 9 * * *' (Europe/Paris)"
        clock.advance(8 * 3600)
        await _until(lambda: len(_fires(rt, sid)) == 1)
        (listed,) = json.loads((await list_timers.call({}, ctx)).content)
        assert listed["next_due"] == "2026-01-02T08:00:00.000+00:00"


async def test_bad_arguments_get_clear_errors_naming_the_field(tmp_path: Path) -> None:
    async with _started(tmp_path) as (clock, timers, rt):
        sid = rt.create_session()
        ctx = _ctx(rt, sid, tmp_path)
        cases: list[tuple[dict[str, Any], str]] = [
            ({}, "exactly one of"),
            ({"after_s": 5, "every_s": 5}, "got: after_s, every_s"),
            ({"cron": "every friday"}, "cron 'every friday' is not a valid cron expression"),
            ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone 'Mars/Olympus'"),
            ({"at": "tomorrow"}, "at must be an ISO 8601 time"),
            ({"at": "2025-12-31T23:00:00"}, "is in the past"),
            ({"every_s": 0.5}, "every_s must be at least 1 s"),
            ({"after_s": -3}, "after_s must be a positive number"),
            ({"message": "  ", "after_s": 5}, "message must say"),
        ]
        for args, expected in cases:
            result = await _set(ctx, **args)
            assert result.is_error and expected in result.content, (args, result.content)
        with pytest.raises(InvalidArguments, match="after_s"):  # the schema check the executor runs first
            await set_timer.call({"message": "x", "after_s": "soon"}, ctx)
        assert rt.db.read("SELECT COUNT(*) FROM timers_timers")[0][0] == 0


async def test_a_session_sees_and_cancels_only_its_own_timers(tmp_path: Path) -> None:
    async with _started(tmp_path) as (clock, timers, rt):
        a, b = rt.create_session("a"), rt.create_session("b")
        ctx_a, ctx_b = _ctx(rt, a, tmp_path), _ctx(rt, b, tmp_path)
        tid = json.loads((await _set(ctx_a, after_s=100)).content)["timer_id"]
        assert json.loads((await list_timers.call({}, ctx_b)).content) == []
        denied = await cancel_timer.call({"timer_id": tid}, ctx_b)
        assert denied.is_error and "No timer" in denied.content
        unknown = await cancel_timer.call({"timer_id": "tm-nope"}, ctx_a)
        assert unknown.is_error and "No timer 'tm-nope'" in unknown.content
        assert len(json.loads((await list_timers.call({}, ctx_a)).content)) == 1
        done = await cancel_timer.call({"timer_id": tid}, ctx_a)
        assert not done.is_error and tid in done.content
        clock.advance(200)
        await _settle(rt)
        assert _fires(rt, a) == [] and rt.db.read("SELECT COUNT(*) FROM timers_timers")[0][0] == 0


async def test_the_tools_say_when_the_runtime_or_the_service_is_missing(tmp_path: Path) -> None:
    bare = await list_timers.call({}, ToolContext(workspace=tmp_path))
    assert bare.is_error and "needs the runtime" in bare.content
    async with _runtime(tmp_path, None) as rt:
        sid = rt.create_session()
        missing = await _set(_ctx(rt, sid, tmp_path), after_s=5)
        assert missing.is_error and "not enabled" in missing.content


async def test_timers_are_restored_after_a_restart_and_missed_ones_fire_once_marked_late(tmp_path: Path) -> None:
    async with _started(tmp_path) as (clock, timers, rt):
        sid = rt.create_session()
        ctx = _ctx(rt, sid, tmp_path)
        once = json.loads((await _set(ctx, message="call back", after_s=60)).content)["timer_id"]
        every = json.loads((await _set(ctx, message="poll", every_s=30)).content)["timer_id"]
        cron = json.loads((await _set(ctx, message="report", cron="*/5 * * * *")).content)["timer_id"]
        later = json.loads((await _set(ctx, message="tomorrow", after_s=86400)).content)["timer_id"]
    # down for an hour
    clock2 = ManualClock(T0 + timedelta(hours=1))
    timers2 = Timers(now=clock2.now, sleep=clock2.sleep)
    async with _runtime(tmp_path, timers2) as rt:
        await timers2.wait_ready()
        await _until(lambda: len(_fires(rt, sid)) == 3)
        await _settle(rt)
        fires = {f["source"]["timer_id"]: f for f in _fires(rt, sid)}
        assert set(fires) == {once, every, cron}  # one fire each, not one per missed run
        assert all(f["context"]["late"] for f in fires.values())
        assert "(late: this timer was due at 2026-01-01T00:01:00.000+00:00" in fires[once]["content"]
        assert "fires once for all the runs it missed" in fires[every]["content"]
        left = {t.id: t for t in timers2.list(sid)}
        assert set(left) == {every, cron, later}
        assert left[every].next_due > clock2.now().timestamp() and left[cron].next_due > clock2.now().timestamp()
        assert not left[later].late


async def test_a_fire_repeated_after_a_crash_is_delivered_once(tmp_path: Path) -> None:
    async with _started(tmp_path) as (clock, timers, rt):
        sid = rt.create_session()
        tid = json.loads((await _set(_ctx(rt, sid, tmp_path), every_s=60)).content)["timer_id"]
        clock.advance(60)
        await _until(lambda: len(_fires(rt, sid)) == 1)
        await _settle(rt)
    # the crash came after the event was accepted but before the next due time was saved
    rt.db.write("UPDATE timers_timers SET next_due = ? WHERE id = ?", ((T0 + timedelta(seconds=60)).timestamp(), tid))
    clock2 = ManualClock(T0 + timedelta(seconds=61))
    timers2 = Timers(now=clock2.now, sleep=clock2.sleep)
    async with _runtime(tmp_path, timers2) as rt2:
        await timers2.wait_ready()
        await _until(lambda: timers2.list(sid)[0].fired == 2)  # fired again, same event id
        await _settle(rt2)
        assert len(_fires(rt2, sid)) == 1


async def test_ten_thousand_timers_share_one_scheduler_task(tmp_path: Path) -> None:
    async with _started(tmp_path, max_per_session=20_000) as (clock, timers, rt):
        sid = rt.create_session()
        first = timers.add(sid, "first", after_s=10)
        await _settle(rt)
        before = len(asyncio.all_tasks())  # the test, the runtime's, the scheduler and its two waits
        for i in range(10_000):
            timers.add(sid, f"t{i}", after_s=3600 + i)
        await _settle(rt)
        assert len(asyncio.all_tasks()) == before
        assert len(timers.list(sid)) == 10_001
        clock.advance(10)
        await _until(lambda: len(_fires(rt, sid)) == 1)
        assert _fires(rt, sid)[0]["source"]["timer_id"] == first.id


async def test_the_heartbeat_goes_to_the_default_session_only_when_configured(tmp_path: Path) -> None:
    async with _started(tmp_path, heartbeat_s=300) as (clock, timers, rt):
        main = rt.default_session()
        assert timers.list() == []  # the heartbeat is not a timer anyone can cancel
        clock.advance(300)
        await _until(lambda: len(_fires(rt, main, "heartbeat")) == 1)
        beat = _fires(rt, main, "heartbeat")[0]
        assert beat["strategy"] == "queue" and beat["source"] == {"type": "heartbeat"}
    off = tmp_path / "off"
    off.mkdir()
    clock2 = ManualClock(T0)
    plain = Timers(now=clock2.now, sleep=clock2.sleep)
    async with _runtime(off, plain) as rt:
        await plain.wait_ready()
        clock2.advance(3600)
        await _settle(rt)
        assert _fires(rt, None, "heartbeat") == []


async def test_a_worker_that_is_not_the_leader_sets_and_cancels_timers_the_leaders_scheduler_fires(
    tmp_path: Path,
) -> None:
    """Two runtimes on one store (as workers share PostgreSQL): only the leader schedules; both take timers."""
    leader_timers = Timers(sync_s=0.05)
    follower_timers = Timers(sync_s=0.05)
    leader = _runtime(tmp_path, leader_timers)
    follower = runtimes.follower(tmp_path, follower_timers)
    async with leader, follower:
        await leader_timers.wait_ready()
        sid = follower.create_session("t")
        ctx = _ctx(follower, sid, tmp_path)
        kept = await _set(ctx, after_s=1)
        doomed = await _set(ctx, after_s=1, message="never")
        assert not kept.is_error and not doomed.is_error, (kept.content, doomed.content)
        listed = await list_timers.call({}, ctx)
        assert len(json.loads(listed.content)) == 2
        doomed_id = json.loads(doomed.content)["timer_id"]
        assert (await cancel_timer.call({"timer_id": doomed_id}, ctx)).content == f"Timer {doomed_id} cancelled."
        await _until(lambda: bool(_fires(leader, sid)))  # the leader's scheduler took it in and fired it
        await _settle(leader)
        fired = _fires(leader, sid)
        assert [f["content"] for f in fired] == ["check the build"]  # once, and never the cancelled one
        assert json.loads((await list_timers.call({}, ctx)).content) == []
