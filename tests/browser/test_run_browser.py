"""``kairos run --browser`` on the scripted model and the demo shop: the loop, the tools offered, the approvals."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from kairos.browser.paths import screen_path
from kairos.cli import app
from kairos.models.types import ModelRequest, ModelResponse
from kairos.testing import ScriptedModel, call, reply

from .conftest import chromium_available

runner = CliRunner()


def number(request: ModelRequest, name: str) -> int:
    """The number the latest page gave the element called ``name`` (what a model reads off the page)."""
    page = next(m.content for m in reversed(request.messages) if m.role == "tool")
    found = re.search(r"\[(\d+)\] \w+ \"" + re.escape(name), page)
    assert found, page
    return int(found.group(1))


def test_run_browser_searches_the_shop_by_numbers_and_answers(
    scripted: ScriptedModel, workspace: Path, demo_site: str
) -> None:
    chromium_available()

    def search(r: ModelRequest) -> ModelResponse:
        index = number(r, "Search products")
        return reply("", call("type_text", {"index": index, "text": "kettle", "press_enter": True}))

    def open_cheapest(r: ModelRequest) -> ModelResponse:
        return reply("", call("click", {"index": number(r, "Compact Travel Kettle")}))

    scripted.extend([search, open_cheapest, reply("£24.99")])
    result = runner.invoke(
        app, ["run", "--browser", "--url", demo_site + "/", "-w", str(workspace), "Find the cheapest kettle."]
    )
    assert result.exit_code == 0, result.output
    first = scripted.requests[0]
    offered = {t.name for t in first.tools}
    assert {"open_url", "click", "type_text", "confirm_click"} <= offered
    assert not offered & {"read_file", "bash", "load_skill"}  # only the page's tools: a lean prompt
    # the harness opened the start page: its look is the first tool result, the request names no URL
    asked = next(i for i, m in enumerate(first.messages) if m.content.endswith("] Find the cheapest kettle."))
    opener, opened = first.messages[asked + 1], first.messages[asked + 2]
    assert opener.role == "assistant" and opener.tool_calls[0].name == "open_url"
    assert opened.role == "tool" and "Search products" in opened.content
    assert not any(demo_site in m.content for m in first.messages if m.role == "user")
    pages = [m.content for m in scripted.requests[-1].messages if m.role == "tool"]
    assert all("<external_content" in p for p in pages)  # page text is data for the injection defences
    assert "£24.99" in pages[1] and "Compact Travel Kettle 0.5 L" in pages[2]
    sid = re.findall(r"session ([0-9a-f]+)", result.output)[-1]
    assert screen_path(workspace / ".kairos", sid).exists()


def test_an_irreversible_click_needs_the_user_and_a_run_without_one_is_refused(
    scripted: ScriptedModel, workspace: Path, demo_site: str
) -> None:
    chromium_available()

    def delete(r: ModelRequest) -> ModelResponse:
        return reply("", call("confirm_click", {"index": number(r, "Delete account")}))

    def confirm(r: ModelRequest) -> ModelResponse:
        preview = next(m.content for m in reversed(r.messages) if m.role == "tool")
        token = re.search(r'"confirm_token": "([A-Za-z0-9_-]+)"', preview)
        assert token, preview
        index = number_from_call(r)
        return reply("", call("confirm_click", {"index": index, "confirm_token": token.group(1)}))

    def number_from_call(r: ModelRequest) -> int:
        last_call = next(m for m in reversed(r.messages) if m.role == "assistant" and m.tool_calls)
        return int(re.search(r'"index": (\d+)', last_call.tool_calls[0].arguments).group(1))  # type: ignore[union-attr]

    scripted.extend([delete, confirm, reply("No.")])
    result = runner.invoke(
        app, ["run", "--browser", "--url", demo_site + "/account.html", "-w", str(workspace), "Delete me."]
    )
    assert result.exit_code == 0, result.output
    results = [m.content for m in scripted.requests[-1].messages if m.role == "tool"]
    assert "confirm_token" in results[1]  # first a preview and a one-time token
    assert "no one can confirm it" in results[2] or "denied" in results[2].lower(), results[2]
    assert not any("Yes, delete my account" in r for r in results)  # the page never got the click


def test_browser_options_need_browser(workspace: Path) -> None:
    result = runner.invoke(app, ["run", "--url", "http://127.0.0.1/", "-w", str(workspace), "x"])
    assert result.exit_code != 0 and "go with --browser" in result.output
