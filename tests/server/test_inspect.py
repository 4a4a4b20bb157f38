"""The context inspector's routes: each request's numbers, its parts laid out again, and its divergence."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import httpx

from kairos.agent import Agent, Plugin, RunContext, SafePoint
from kairos.context.session import SessionStore
from kairos.models.types import Message, Origin
from kairos.runtime import Runtime
from kairos.server import create_app
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.base import Tool, spec_digest
from kairos.tools.function import tool


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@tool
def fetch(url: str) -> str:
    """Fetch a page."""
    return "page"


class Registry:
    """A tool source whose list changes between turns (as an MCP server's may)."""

    refresh_mid_turn = False

    def __init__(self, *tools: Tool) -> None:
        self.tools = list(tools)

    def fingerprint(self) -> str:
        return spec_digest(self.tools)

    async def list_tools(self) -> Sequence[Tool]:
        return list(self.tools)


class Reminder(Plugin):
    """Adds a note at each turn's start (as the skills catalog or memory do)."""

    async def at_safe_point(self, ctx: RunContext, at: SafePoint) -> Sequence[Message]:
        return [Message.user("remember: be brief", Origin.of("harness", "reminder"))] if at == "turn_start" else []


async def test_a_request_whose_tool_set_changed_shows_the_divergence_and_why(tmp_path: Path) -> None:
    source = Registry()
    model = ScriptedModel([reply("", call("echo", {"text": "a"})), reply("one"), reply("two")])
    agent = Agent(model, tools=[source, echo], plugins=[Reminder()])
    async with Runtime(agent, SessionStore(tmp_path)) as rt:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(create_app(rt)), base_url="http://127.0.0.1:8765")
        sid = rt.create_session("inspect me")
        for text in ("first", "second"):
            await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
            await rt.wait_idle(sid)
            source.tools.append(fetch)  # the next turn's tools gain one
        listed = (await client.get(f"/v1/sessions/{sid}/requests")).json()["requests"]
        opened = [(await client.get(f"/v1/sessions/{sid}/requests/{i}")).json() for i in range(3)]
        missing = await client.get(f"/v1/sessions/{sid}/requests/7")
        await client.aclose()
    assert [r["index"] for r in listed] == [0, 1, 2] and all("layout" not in r for r in listed)
    assert listed[0]["tool_choice"] == "auto"
    first, second, third = opened
    assert first["divergence"] is None and second["divergence"] is None  # the tool result appended: prefix held
    kinds = [p["part"] for p in third["parts"]]
    assert kinds[0] == "system_static" and kinds[-1] == "status"
    assert [p["name"] for p in third["parts"] if p["part"] == "tool"] == ["echo", "fetch"]  # appended, in order
    div = third["divergence"]
    assert div["part"] == "tool" and div["item"] == 1 and div["reason"] == "tools: added fetch"
    assert div["previous"] == "" and '"fetch"' in div["current"]
    # which plugin added which message where: the reminder, at the second turn's start
    added = third["added"]
    assert added and added[0]["plugin"] == "Reminder" and added[0]["at"] == "turn_start"
    note = third["parts"][added[0]["parts"][0]]
    assert note["text"] == "remember: be brief" and note["origin"] == {"kind": "harness", "source": "reminder"}
    assert missing.status_code == 404 and "has no request 7" in missing.json()["error"]["message"]


async def test_the_compression_view_gives_each_replacement_with_its_original(tmp_path: Path) -> None:
    big = "line of a long build log\n" * 2000
    history = [
        Message.user("run the build"),
        Message.assistant("", (call("bash", {"cmd": "make"}),)),
        Message.tool("c1", big, "bash"),
    ]
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(create_app(rt)), base_url="http://127.0.0.1:8765")
        sid = rt.create_session("logs", history=history)
        empty = (await client.get(f"/v1/sessions/{sid}/compression")).json()
        rt.store.trajectories.freeze(sid, "kairos.compression/spill/2", "[spilled to .kairos/spill/2.txt] line of…")
        rt.store.trajectories.freeze(sid, "kairos.compression/round/0", "round 0: ran the build")
        rt.store.trajectories.freeze(sid, "kairos.compression/error/2", "bash")  # a mark, not a replacement
        view = (await client.get(f"/v1/sessions/{sid}/compression")).json()["replacements"]
        unknown = await client.get("/v1/sessions/nope/compression")
        await client.aclose()
    assert empty == {"replacements": []}
    assert [(r["seq"], r["layer"]) for r in view] == [(0, "round"), (2, "spill")]
    assert view[1]["original"] == big and view[1]["text"].startswith("[spilled")
    assert view[0]["original"] is None
    assert unknown.status_code == 404


async def test_a_session_is_renamed_and_an_unknown_one_is_a_404(tmp_path: Path) -> None:
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(create_app(rt)), base_url="http://127.0.0.1:8765")
        sid = rt.create_session("old")
        renamed = await client.patch(f"/v1/sessions/{sid}", json={"title": "Release notes"})
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        missing = await client.patch("/v1/sessions/nope", json={"title": "x"})
        too_long = await client.patch(f"/v1/sessions/{sid}", json={"title": "x" * 501})
        await client.aclose()
    assert renamed.status_code == 200 and renamed.json()["title"] == "Release notes"
    assert listed[0]["title"] == "Release notes"
    assert missing.status_code == 404 and too_long.status_code == 422


async def test_an_untitled_session_takes_the_start_of_its_first_message_as_title(tmp_path: Path) -> None:
    async with Runtime(Agent(ScriptedModel([reply("ok"), reply("ok")])), SessionStore(tmp_path)) as rt:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(create_app(rt)), base_url="http://127.0.0.1:8765")
        untitled, named = rt.create_session(), rt.create_session("kept")
        long = "Which files are in this folder, and what do the release notes say about the date?\nsecond line"
        await client.post(f"/v1/sessions/{untitled}/messages", json={"text": long})
        await client.post(f"/v1/sessions/{named}/messages", json={"text": "hello"})
        await client.aclose()
        titles = {s.id: s.title for s in rt.sessions()}
    assert titles[untitled] == "Which files are in this folder, and what do the release…"
    assert titles[named] == "kept"


async def test_the_background_route_lists_the_session_s_tasks_and_timers(tmp_path: Path) -> None:
    from kairos.runtime.integrations.tasks import TaskManager
    from kairos.runtime.integrations.timers import Timers

    manager, timers = TaskManager(), Timers()
    release = asyncio.Event()

    async def work() -> str:
        await release.wait()
        return "done"

    rt = Runtime(Agent(ScriptedModel([reply("ok")] * 3)), SessionStore(tmp_path), components=[manager, timers])
    async with rt:
        await manager.ready()
        await timers.wait_ready()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(create_app(rt)), base_url="http://127.0.0.1:8765")
        sid, other = rt.create_session("ops"), rt.create_session("other")
        task = manager.spawn_coroutine(sid, "compute the report", work)
        timers.add(sid, "check the build", every_s=3600)
        timers.add(other, "not this session's", after_s=600)
        seen = (await client.get(f"/v1/sessions/{sid}/background")).json()
        missing = await client.get("/v1/sessions/nope/background")
        release.set()
        await client.aclose()
    (t,) = seen["tasks"]
    assert t["id"] == task.id and t["title"] == "compute the report" and t["status"] == "running"
    (timer,) = seen["timers"]
    assert timer["message"] == "check the build" and timer["schedule"] == "every 3600 s"
    assert missing.status_code == 404
