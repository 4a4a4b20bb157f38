"""The ``computer`` tool in real Chromium: clicks, typing, keys, scrolls and drags at pixel coordinates, each
answered with a fresh PNG screenshot; off-screen coordinates refused; a scripted model that sees and clicks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kairos.browser.computer import computer_tools, vision_images
from kairos.browser.config import BrowserConfig
from kairos.browser.session import BrowserSession
from kairos.models.types import Image
from kairos.tools.base import ToolContext, ToolResult

from .conftest import chromium_available

PAGE = """<!doctype html><title>Pixels</title>
<style>body { margin: 0; font: 16px sans-serif } #tall { height: 3000px }
#box { position: absolute; left: 600px; top: 40px; width: 80px; height: 80px; background: #4363d8 }</style>
<label><input type="checkbox" id="agree" style="width: 30px; height: 30px"> I agree</label>
<p><input id="name" aria-label="Name" style="width: 300px; font-size: 20px"></p>
<p><input type="range" id="level" aria-label="Level" min="0" max="100" value="0" style="width: 400px"></p>
<div id="box"></div>
<button id="delete" style="position: absolute; left: 900px; top: 40px">Delete account</button>
<a id="buy" href="#basket" style="position: absolute; left: 900px; top: 120px">Buy now</a>
<div id="tall"></div>
<script>
  const box = document.getElementById('box');
  let grab = null;
  box.addEventListener('mousedown', e => { grab = [e.clientX - box.offsetLeft, e.clientY - box.offsetTop]; });
  document.addEventListener('mousemove', e => {
    if (grab) { box.style.left = (e.clientX - grab[0]) + 'px'; box.style.top = (e.clientY - grab[1]) + 'px'; }
  });
  document.addEventListener('mouseup', () => { grab = null; });
</script>
"""


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[BrowserSession]:
    chromium_available()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session = BrowserSession(
        BrowserConfig(allow_hosts=("127.0.0.1",), vision=True),
        workspace=workspace,
        state_dir=workspace / ".kairos",
        session_id="s1",
    )
    await session.start()
    await session.page.set_content(PAGE)
    await session.observe_text()  # numbers the page: the tests aim at the elements' centres
    yield session
    await session.aclose()


async def computer(session: BrowserSession, **arguments: Any) -> ToolResult:
    (tool,) = computer_tools(session)
    tool.validate(arguments)
    return await tool.call(arguments, ToolContext(workspace=session.workspace))


def centre(session: BrowserSession, name: str) -> list[int]:
    assert session.last is not None
    element = next(e for e in session.last.elements if e.name == name or e.name.startswith(name))
    x, y = element.centre
    return [round(x), round(y)]


def is_png(image: Image) -> bool:
    return image.media_type == "image/png" and image.raw().startswith(b"\x89PNG\r\n\x1a\n")


async def test_a_click_at_an_elements_centre_ticks_it_and_answers_with_a_screenshot(browser: BrowserSession) -> None:
    result = await computer(browser, action="left_click", coordinate=centre(browser, "I agree"))
    assert not result.is_error and result.metadata["browser.done"] is True
    assert await browser.page.is_checked("#agree")
    assert result.content.startswith("Left-clicked at (") and "Page: Pixels" in result.content
    (shot,) = result.images
    assert is_png(shot)


async def test_a_click_on_nothing_says_nothing_visible_changed(browser: BrowserSession) -> None:
    result = await computer(browser, action="left_click", coordinate=[1200, 700])
    assert result.metadata["browser.done"] is False and "nothing visible changed" in result.content
    assert browser.stats.reverify_catches == 1


async def test_typing_fills_the_clicked_field_key_by_key_and_ctrl_a_then_typing_replaces_it(
    browser: BrowserSession,
) -> None:
    await computer(browser, action="left_click", coordinate=centre(browser, "Name"))
    result = await computer(browser, action="type", text="Ada Lovelace")
    assert result.metadata["browser.done"] is True
    assert await browser.page.input_value("#name") == "Ada Lovelace"
    await computer(browser, action="key", text="ctrl+a")
    await computer(browser, action="type", text="Grace")
    assert await browser.page.input_value("#name") == "Grace"
    await computer(browser, action="key", text="BackSpace Return")
    assert await browser.page.input_value("#name") == "Grac"


async def test_scroll_moves_the_page_by_wheel_notches(browser: BrowserSession) -> None:
    result = await computer(browser, action="scroll", coordinate=[640, 400], scroll_direction="down", scroll_amount=3)
    assert result.metadata["browser.done"] is True
    assert await browser.page.evaluate("window.scrollY") == 300
    up = await computer(browser, action="scroll", coordinate=[640, 400], scroll_direction="up", scroll_amount=5)
    assert await browser.page.evaluate("window.scrollY") == 0 and "Scrolled up 5 notches" in up.content


async def test_drag_moves_a_slider_and_a_draggable_box(browser: BrowserSession) -> None:
    x, y = centre(browser, "Level")
    left = x - 195  # the thumb sits at the slider's left end
    await computer(browser, action="left_click_drag", start_coordinate=[left, y], coordinate=[x + 190, y])
    assert int(await browser.page.input_value("#level")) > 90
    result = await computer(browser, action="left_click_drag", start_coordinate=[640, 80], coordinate=[740, 280])
    assert result.metadata["browser.done"] is True
    assert await browser.page.evaluate("[box.offsetLeft, box.offsetTop]") == [700, 240]
    position = await computer(browser, action="cursor_position")
    assert "X=740, Y=280" in position.content


async def test_coordinates_off_the_screen_and_bad_arguments_are_refused(browser: BrowserSession) -> None:
    off = await computer(browser, action="left_click", coordinate=[1280, 10])
    assert off.is_error and "off the screen" in off.content and "0 to 1279" in off.content and not off.images
    negative = await computer(browser, action="mouse_move", coordinate=[-1, 5])
    assert negative.is_error and "off the screen" in negative.content
    assert (await computer(browser, action="type")).is_error
    assert "unknown key" in (await computer(browser, action="key", text="NoSuchKey")).content


async def test_a_click_on_an_irreversible_control_is_refused(browser: BrowserSession) -> None:
    await browser.page.evaluate("() => { window.hit = 0; document.getElementById('delete').onclick = () => hit++; }")
    result = await computer(browser, action="left_click", coordinate=centre(browser, "Delete account"))
    assert "Not clicked" in result.content and "confirm_click" in result.content
    assert await browser.page.evaluate("window.hit") == 0
    # a link is navigation, judged by the same rule as the numbered click: "Buy now" opens the basket
    followed = await computer(browser, action="left_click", coordinate=centre(browser, "Buy now"))
    assert "Not clicked" not in followed.content and browser.page.url.endswith("#basket")


async def test_screenshot_wait_and_the_numbered_screenshot_for_the_numbered_tools(browser: BrowserSession) -> None:
    shot = await computer(browser, action="screenshot")
    assert shot.content.startswith("Screenshot taken.") and is_png(shot.images[0])
    assert "Waited 0.1 s" in (await computer(browser, action="wait", duration=0.1)).content
    (numbered,) = await vision_images(browser)  # what a numbered tool's result carries with [browser] vision
    assert is_png(numbered) and numbered != shot.images[0]  # the boxes and numbers are drawn on it
    plain = BrowserSession(BrowserConfig(), workspace=browser.workspace, state_dir=browser.state_dir)
    assert await vision_images(plain) == ()


async def test_a_scripted_model_sees_the_screenshot_and_clicks_by_coordinates(browser: BrowserSession) -> None:
    from kairos.agent import Agent
    from kairos.context.session import SessionStore
    from kairos.models.types import ModelRequest, ModelResponse, SystemPrompt
    from kairos.testing import ScriptedModel, call, reply

    target = centre(browser, "I agree")

    def click_what_it_sees(request: ModelRequest) -> ModelResponse:
        result = request.messages[-1] if request.messages[-1].role == "tool" else request.messages[-2]
        assert result.role == "tool" and len(result.images) == 1 and is_png(result.images[0])
        return reply("", call("computer", {"action": "left_click", "coordinate": target}))

    model = ScriptedModel([reply("", call("computer", {"action": "screenshot"})), click_what_it_sees, reply("Agreed.")])
    store = SessionStore(browser.workspace)
    session = store.open(None)
    agent = Agent(model, tools=computer_tools(browser), system=SystemPrompt("Test agent.", ""))
    _ = [e async for e in agent.run(session, "tick the box")]
    assert await browser.page.is_checked("#agree")
    last = [m for m in model.requests[-1].messages if m.role == "tool"]
    assert len(last) == 2 and all(len(m.images) == 1 for m in last) and "Left-clicked" in last[1].content
    await session.aclose()
    store.close()
