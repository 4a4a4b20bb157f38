"""The event timeline beside the chat: every record that reached the session, filterable by kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from kairos.runtime import Event
from kairos.server import sign
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.function import tool
from tests.server.conftest import SECRET
from tests.ui.conftest import serve
from tests.ui.test_chat import open_chat, say


@tool
async def clock() -> str:
    """The time."""
    return "12:00"


async def test_a_signed_webhook_shows_in_the_timeline_with_its_source_and_strategy(tmp_path: Path, page: Any) -> None:
    model = ScriptedModel([reply("I saw the failed build.")])
    async with serve(tmp_path, model, webhook_secret=SECRET) as (rt, url):
        sid = rt.create_session("ops")
        await open_chat(page, url, sid)
        body = json.dumps({
            "type": "ci.build_failed", "content": "build 42 failed on main", "source": {"type": "github"},
            "session": sid,
        }).encode()  # fmt: skip
        async with httpx.AsyncClient() as client:
            sent = await client.post(url + "/v1/events", content=body, headers=sign(SECRET, body))
        assert sent.status_code == 202, sent.text
        row = page.locator(".tl-row[data-type='event.accepted']")
        await row.wait_for()
        summary = await row.locator(".tl-sum").text_content()
        assert summary == "ci.build_failed from github via webhook → queue (default for ci.build_failed)"
        await page.locator(".msg.event summary", has_text="ci.build_failed from github (webhook)").wait_for()
        await page.locator(".msg.assistant .body", has_text="I saw the failed build.").wait_for()
        await page.locator(".tl-row[data-type='run.ended']").wait_for()
        await row.locator("summary").click()
        await row.locator("pre.tl-data", has_text='"content": "build 42 failed on main"').wait_for()


async def test_the_timeline_filters_by_kind_and_shows_a_dropped_message_with_its_reason(
    tmp_path: Path, page: Any
) -> None:
    model = ScriptedModel([reply("", call("clock")), reply("It is noon.")])
    async with serve(tmp_path, model, [clock]) as (rt, url):
        sid = rt.create_session("kinds")
        await open_chat(page, url, sid)
        await say(page, "what time is it?")
        await page.locator(".tl-row[data-type='run.ended']").wait_for()
        forced = {"text": "ignore me", "strategy": "drop"}  # a message the user forces to be dropped
        async with httpx.AsyncClient() as client:
            dropped = await client.post(f"{url}/v1/sessions/{sid}/messages", json=forced)
        assert dropped.status_code == 202 and dropped.json()["strategy"] == "drop"
        await page.locator(".tl-row[data-type='event.dropped']").wait_for()
        await page.locator(".msg.user", has_text="ignore me").locator(".badge", has_text="dropped").wait_for()
        rows = page.locator(".tl-row")
        await page.select_option("#timeline-kind", "tool")
        assert set(await rows.evaluate_all("rs => rs.map(r => r.dataset.type)")) == {
            "agent.tool_started", "agent.tool_finished",
        }  # fmt: skip
        await page.select_option("#timeline-kind", "event")
        assert await rows.evaluate_all("rs => rs.map(r => r.dataset.type)") == ["event.accepted", "event.dropped"]
        assert "dropped: " in await page.locator(".tl-row[data-type='event.dropped'] .tl-sum").text_content()
        await page.select_option("#timeline-kind", "all")
        assert await rows.count() > 8


async def test_a_long_timeline_shows_its_newest_rows_and_earlier_ones_on_demand(tmp_path: Path, page: Any) -> None:
    model = ScriptedModel([reply(f"answer {i}") for i in range(60)])
    async with serve(tmp_path, model) as (rt, url):
        sid = rt.create_session("many records")
        for i in range(60):
            await rt.submit(Event("user.input", f"question {i}", {"type": "user"}, "test", session=sid))
            await rt.wait_idle(sid)
        total = len(rt.timeline(sid, 0, 5000))
        await open_chat(page, url, sid)
        rows = page.locator(".tl-row")
        assert await rows.count() == 300
        assert await rows.last.get_attribute("data-cursor") == str(rt.timeline(sid, 0, 5000)[-1].cursor)
        await page.get_by_role("button", name="Show earlier records").click()
        await page.get_by_role("button", name="Show earlier records").wait_for(state="hidden")
        assert await rows.count() == total  # each record a row (no text deltas here: one per answer)
        assert await rows.first.get_attribute("data-type") == "session.created"


async def test_the_session_s_async_tasks_and_timers_show_above_the_records(tmp_path: Path, page: Any) -> None:
    import asyncio

    from kairos.agent import Agent
    from kairos.context.session import SessionStore
    from kairos.runtime import Runtime
    from kairos.runtime.integrations.tasks import TaskManager
    from kairos.runtime.integrations.timers import Timers
    from kairos.server import create_app
    from tests.server.conftest import live

    manager, timers = TaskManager(), Timers()
    release = asyncio.Event()

    async def work() -> str:
        await release.wait()
        return "report ready"

    rt = Runtime(Agent(ScriptedModel([reply("ok")] * 4)), SessionStore(tmp_path), components=[manager, timers])
    async with rt, live(create_app(rt)) as (_, url):
        await manager.ready()
        await timers.wait_ready()
        sid = rt.create_session("ops")
        manager.spawn_coroutine(sid, "compile the weekly report", work)
        timers.add(sid, "check the build", every_s=3600)
        await open_chat(page, url, sid)
        work_box = page.locator(".tl-work")
        await work_box.get_by_text("compile the weekly report").wait_for()
        text = await work_box.text_content() or ""
        assert "Async tasks: 1 running" in text and "running" in text
        assert "every 3600 s" in text and "check the build" in text
        release.set()
        await page.locator(".tl-work .tl-task.s-done").wait_for()  # the task's result ran a turn: read again
