"""The context inspector in a browser: what the model saw in each request and what it cost, on a real server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from kairos.agent import Agent, Plugin, RunContext, SafePoint
from kairos.context.compression import CompressionConfig
from kairos.context.compression.config import NoiseConfig, SpillConfig
from kairos.context.session import SessionStore
from kairos.models.base import estimate_request_tokens
from kairos.models.types import Message, ModelRequest, ModelResponse, Origin, SystemPrompt, ToolCall, Usage
from kairos.plugins.compression import CompressionPlugin
from kairos.runtime import Runtime
from kairos.server import create_app
from kairos.testing import ScriptedModel, call
from kairos.tools.base import Tool, spec_digest
from kairos.tools.function import tool
from tests.server.conftest import live
from tests.ui.conftest import SHOTS

SYSTEM = SystemPrompt(
    "You are kairos, a careful agent. Use the tools you are given; say when you are unsure.",
    "Deployment: the inspector's tests. Workspace rules: none.",
)


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@tool
def fetch(url: str) -> str:
    """Fetch a web page and return its text."""
    return f"the page at {url}"


@tool(max_output_chars=200_000)
def dump(rows: int) -> str:
    """Return a long table of ``rows`` rows."""
    return "\n".join(f"row {i}: value {i * 7} of the long table" for i in range(rows))


class Registry:
    """A tool source whose list changes between turns (as an MCP server's may): a deliberate prefix change."""

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


def step(text: str, *calls: ToolCall, reuse: float = 0.9) -> Any:
    """A scripted reply whose usage says how much of the prompt a cache served (for a chart worth looking at)."""

    def respond(request: ModelRequest) -> ModelResponse:
        prompt = estimate_request_tokens(request)
        usage = Usage(prompt, int(prompt * reuse), completion_tokens=12, ttft_s=0.08, total_s=0.4)
        return ModelResponse(Message.assistant(text, calls), usage)

    return respond


@asynccontextmanager
async def serve_agent(tmp_path: Path, agent: Agent) -> AsyncIterator[tuple[Runtime, str]]:
    """A runtime on ``agent`` with its app under uvicorn: ``(runtime, base_url)``."""
    async with Runtime(agent, SessionStore(tmp_path)) as rt, live(create_app(rt)) as (_, url):
        yield rt, url


async def say(rt: Runtime, url: str, sid: str, text: str) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        assert (await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})).status_code == 202
    await rt.wait_idle(sid)


@asynccontextmanager
async def tools_changed(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """A session of three requests whose third gained a tool (on purpose): ``(base_url, session id)``."""
    source = Registry()
    model = ScriptedModel([step("", call("echo", {"text": "a"}), reuse=0.0), step("one"), step("two", reuse=0.3)])
    agent = Agent(model, tools=[source, echo], plugins=[Reminder()], system=SYSTEM)
    async with serve_agent(tmp_path, agent) as (rt, url):
        sid = rt.create_session("tools that change")
        await say(rt, url, sid, "echo a for me")
        source.tools.append(fetch)  # the next turn's tools gain one
        await say(rt, url, sid, "now fetch something")
        yield url, sid


async def opened(page: Any, url: str) -> None:
    await page.goto(url)
    await page.wait_for_selector("main[data-ready]")


async def test_a_request_whose_tool_set_changed_shows_the_divergence_with_its_reason(tmp_path: Path, page: Any) -> None:
    async with tools_changed(tmp_path) as (url, sid):
        await opened(page, f"{url}/#/inspector/{sid}/2")
        audit = page.locator(".insp-audit")
        assert "changed on purpose: tools: added fetch" in await audit.inner_text()
        part = page.locator(".insp-part[data-diverging]")
        assert await part.get_attribute("open") is not None  # opened for the reader
        assert await part.locator("summary .insp-kind").inner_text() == "tool fetch"
        assert await part.is_visible()  # scrolled into view
        assert '"fetch"' in await part.locator(".insp-compare mark").inner_text()  # from the diverging byte on
        assert "not there: the item is new" in await part.locator(".insp-side").first.inner_text()
        # the prompt in its parts, in order, with the cache boundary and who added the reminder where
        kinds = await page.locator(".insp-parts > details").evaluate_all("ds => ds.map(d => d.dataset.kind)")
        assert kinds[0] == "system_static" and kinds[1] == "system_deployment" and kinds[-1] == "status"
        assert await page.locator(".insp-boundary").count() == 1
        tools = page.locator(".insp-part[data-kind=tool] summary .insp-kind")
        assert await tools.all_inner_texts() == ["tool echo", "tool fetch"]
        assert "Reminder @ turn_start" in await page.locator(".insp-added").all_inner_texts()
        await page.screenshot(path=str(SHOTS / "inspector.png"))
        # a part's text is put in the page only once it is opened
        system = page.locator(".insp-part[data-kind=system_static]")
        assert await system.locator("pre").count() == 0
        await system.locator("summary").click()
        assert "careful agent" in await system.locator("pre").inner_text()


async def test_a_request_whose_prefix_held_says_ok_and_j_k_move_between_requests(tmp_path: Path, page: Any) -> None:
    async with tools_changed(tmp_path) as (url, sid):
        await opened(page, f"{url}/#/inspector/{sid}/1")
        assert "prefix ok" in await page.locator(".insp-audit").inner_text()
        assert await page.locator(".insp-part[data-diverging]").count() == 0
        numbers = await page.locator(".insp-numbers").inner_text()
        assert "tool choice" in numbers and "auto" in numbers
        await page.keyboard.press("j")
        await page.wait_for_selector("main[data-ready='request-2'] .insp-part[data-diverging]")
        await page.keyboard.press("k")
        await page.wait_for_selector("main[data-ready='request-1']")
        await page.keyboard.press("ArrowLeft")
        await page.wait_for_selector("main[data-ready='request-0']")
        assert "first request" in await page.locator(".insp-audit").inner_text()
        await page.keyboard.press("Escape")  # back to the session's requests
        await page.wait_for_selector("main[data-ready='session'] .insp-chart")


async def test_the_session_has_a_table_and_a_chart_with_one_bar_per_request(tmp_path: Path, page: Any) -> None:
    async with tools_changed(tmp_path) as (url, sid):
        await opened(page, f"{url}/#/inspector")
        await page.click(f"a[href='#/inspector/{sid}']")
        await page.wait_for_selector(".insp-chart")
        assert await page.locator(".insp-chart g.insp-bar").count() == 3
        assert await page.locator(".insp-chart g.insp-bar.v-deliberate .insp-break").count() == 1
        rows = page.locator("table.insp-requests tbody tr")
        assert await rows.count() == 3
        verdicts = await page.locator("table.insp-requests .insp-verdict").all_inner_texts()
        assert verdicts == ["first", "ok", "changed on purpose (tools: added fetch)"]
        await page.locator(".insp-chart g.insp-bar[data-index='1']").click()
        await page.wait_for_selector("main[data-ready='request-1']")
        await page.go_back()  # the rows by keyboard: j/k move between them, Enter opens one
        await page.wait_for_selector("main[data-ready='session']")
        for key in ("j", "j", "j", "k"):
            await page.keyboard.press(key)
        await page.keyboard.press("Enter")
        await page.wait_for_selector("main[data-ready='request-1']")


async def test_an_unknown_request_says_so(tmp_path: Path, page: Any) -> None:
    async with tools_changed(tmp_path) as (url, sid):
        await page.goto(f"{url}/#/inspector/{sid}/9")
        await page.wait_for_selector(".insp[data-state=error]")
        assert "has no request 9" in await page.locator(".insp .error").inner_text()


async def test_on_a_phone_the_request_fits_the_screen(tmp_path: Path, browser: Any) -> None:
    async with tools_changed(tmp_path) as (url, sid):
        context = await browser.new_context(viewport={"width": 390, "height": 844})
        page = await context.new_page()
        try:
            await opened(page, f"{url}/#/inspector/{sid}/2")
            assert await page.locator(".insp-part[data-diverging] mark").is_visible()
            assert await page.evaluate("document.documentElement.scrollWidth") <= 390
        finally:
            await context.close()


async def test_compression_shows_a_spilled_result_with_its_original(tmp_path: Path, page: Any) -> None:
    cfg = CompressionConfig(
        strategy="none", spill=SpillConfig(max_chars=1000, head_lines=3, tail_lines=2), noise=NoiseConfig(enabled=False)
    )
    model = ScriptedModel([step("", call("dump", {"rows": 400})), step("a long table")])
    agent = Agent(model, tools=[dump], plugins=[CompressionPlugin(cfg)], system=SYSTEM)
    async with serve_agent(tmp_path, agent) as (rt, url):
        sid = rt.create_session("a big result")
        await say(rt, url, sid, "dump the table")
        await opened(page, f"{url}/#/inspector/{sid}/compression")
        card = page.locator(".insp-replacement").first
        assert "spilled to a file" in await card.inner_text()
        assert "[large output:" in await card.locator("pre").first.inner_text()
        original = card.locator("details.insp-original")
        assert await original.locator("pre").count() == 0  # built when opened
        await original.locator("summary").click()
        assert "row 399: value 2793" in await original.locator("pre").inner_text()
