"""The ``browser`` toolset: the agent acts on a page by element number, and every result re-checks the page.

The agent loop does the rest, as for every tool: safe points between actions (an interrupt or a new message
takes effect before the next one), approvals (``confirm_click`` asks the user; ``click`` refuses controls that
look irreversible), and the injection defences (results are external content: a page's text is data, never
instructions). Results are appended, never rewritten: after the first full page each result shows only what
changed, so old observations are not sent again whole and the cached prefix stays.

Usage::

    tools = browser_tools(BrowserConfig())          # a browser per session, started on first use
    tools = browser_tools(session)                  # bound to one BrowserSession (the bench)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kairos.browser import act
from kairos.browser.act import Target
from kairos.browser.computer import computer_tools, vision_images
from kairos.browser.page import BrowserError
from kairos.browser.session import SESSION_RESOURCE, BrowserConfig, BrowserSession, Provider, session_provider
from kairos.tools.base import NEWS_PENDING, Tool, ToolContext, ToolResult
from kairos.tools.function import make_tool


def browser_tools(source: BrowserSession | BrowserConfig, *, start_url: str = "") -> list[Tool]:
    """The browser tools: on ``source`` itself, or on a browser per session made from ``source`` (a config).

    ``start_url``: a URL the user gave (its host is allowed).
    """
    provide = session_provider(source, start_url)
    config = source.config if isinstance(source, BrowserSession) else source
    tools = _raw_tools(provide) if config.mode == "raw_html" else _indexed_tools(provide)
    return tools + computer_tools(provide) if config.vision else tools


def toolset_tools(config: Any) -> list[Tool]:
    """The registry's factory: ``[browser]`` of the loaded config."""
    return browser_tools(config.browser)


async def _run(
    provide: Provider, ctx: ToolContext, step: Callable[[BrowserSession], Awaitable[act.Report]]
) -> ToolResult:
    session = provide(ctx)
    try:
        async with session.turn(ctx.get(NEWS_PENDING)) as refusal:
            if refusal:
                return ToolResult(refusal, is_error=True)
            report = await step(session)
            images = await vision_images(session)
    except BrowserError as e:
        return ToolResult(f"Not done: {e}", is_error=True)
    return ToolResult(report.text, is_error=False, metadata={"browser.done": report.done}, images=images)


def _common(provide: Provider) -> list[Tool]:
    async def open_url(url: str, ctx: ToolContext) -> ToolResult:
        """Open a web page in the browser and show it.

        Args:
            url: the address, e.g. http://127.0.0.1:8000/ (only hosts the user allowed can be opened).
        """
        return await _run(provide, ctx, lambda s: act.open_url(s, url))

    async def press_key(key: str, ctx: ToolContext) -> ToolResult:
        """Press a key on the focused element, e.g. Enter, Tab, Escape, ArrowDown, Control+A.

        Args:
            key: the key or combination.
        """
        return await _run(provide, ctx, lambda s: act.press_key(s, key))

    async def go_back(ctx: ToolContext) -> ToolResult:
        """Go back to the previous page."""
        return await _run(provide, ctx, act.go_back)

    async def wait(seconds: float, ctx: ToolContext) -> ToolResult:
        """Wait for the page to finish something (loading, an animation), then show what changed.

        Args:
            seconds: how long, at most 10.
        """
        return await _run(provide, ctx, lambda s: act.wait(s, seconds))

    async def look_at_page(ctx: ToolContext) -> ToolResult:
        """Show the whole current page again (its numbered elements and text)."""

        async def whole(s: BrowserSession) -> act.Report:
            return act.Report(await s.observe_text())

        return await _run(provide, ctx, whole)

    return [
        make_tool(open_url, side_effects=True, external=True, timeout_s=act.TOOL_TIMEOUT_S),
        make_tool(press_key, side_effects=True, external=True, timeout_s=act.TOOL_TIMEOUT_S),
        make_tool(go_back, side_effects=True, external=True, timeout_s=act.TOOL_TIMEOUT_S),
        make_tool(wait, read_only=True, external=True, volatile=True, timeout_s=act.TOOL_TIMEOUT_S),
        make_tool(look_at_page, read_only=True, external=True, volatile=True, timeout_s=act.TOOL_TIMEOUT_S),
    ]


def _indexed_tools(provide: Provider) -> list[Tool]:
    async def click(index: int, ctx: ToolContext) -> ToolResult:
        """Click the page element with this number (a button, link, checkbox, tab…).

        Args:
            index: the element's number from the page, e.g. 7 for [7].
        """
        return await _run(provide, ctx, lambda s: act.click(s, Target(index=index)))

    async def type_text(index: int, text: str, ctx: ToolContext, press_enter: bool = False) -> ToolResult:
        """Type text into the text field with this number (replacing what it held).

        Args:
            index: the field's number from the page.
            text: what to type.
            press_enter: press Enter afterwards (to submit a search, say).
        """
        return await _run(provide, ctx, lambda s: act.type_text(s, Target(index=index), text, press_enter=press_enter))

    async def select_option(index: int, option: str, ctx: ToolContext) -> ToolResult:
        """Choose an option in the list box (combobox) with this number.

        Args:
            index: the list box's number from the page.
            option: the option's text, as listed after "options:".
        """
        return await _run(provide, ctx, lambda s: act.select_option(s, Target(index=index), option))

    async def scroll(ctx: ToolContext, direction: str = "down", index: int | None = None) -> ToolResult:
        """Scroll the page, or bring the element with this number into view.

        Args:
            direction: down, up, left or right.
            index: an element to scroll to (instead of a direction).
        """
        target = Target(index=index) if index is not None else None
        return await _run(provide, ctx, lambda s: act.scroll(s, direction, target))

    async def confirm_click(index: int, ctx: ToolContext) -> ToolResult:
        """Click a control that cannot be undone (pay, order, send, delete) after the user approves it.

        Args:
            index: the element's number from the page.
        """
        return await _run(provide, ctx, lambda s: act.click(s, Target(index=index), approved=True))

    common = _common(provide)
    return [
        common[0],
        make_tool(click, side_effects=True, external=True, timeout_s=act.TOOL_TIMEOUT_S),
        make_tool(type_text, side_effects=True, external=True, timeout_s=act.TOOL_TIMEOUT_S),
        make_tool(select_option, side_effects=True, external=True, timeout_s=act.TOOL_TIMEOUT_S),
        *common[1:],
        make_tool(scroll, side_effects=True, external=True, timeout_s=act.TOOL_TIMEOUT_S),
        make_tool(
            confirm_click,
            side_effects=True,
            external=True,
            irreversible=True,
            asks="it clicks a control that cannot be undone",
            explain=lambda args, ctx: act.what_is(provide(ctx), args.get("index")),
            timeout_s=act.TOOL_TIMEOUT_S,
        ),
    ]


def _raw_tools(provide: Provider) -> list[Tool]:
    async def click(selector: str, ctx: ToolContext) -> ToolResult:
        """Click the page element this CSS selector matches.

        Args:
            selector: a CSS selector matching exactly one element, e.g. #submit or button.primary.
        """
        return await _run(provide, ctx, lambda s: act.click(s, Target(selector=selector)))

    async def type_text(selector: str, text: str, ctx: ToolContext, press_enter: bool = False) -> ToolResult:
        """Type text into the text field this CSS selector matches (replacing what it held).

        Args:
            selector: a CSS selector matching exactly one field.
            text: what to type.
            press_enter: press Enter afterwards.
        """
        return await _run(
            provide, ctx, lambda s: act.type_text(s, Target(selector=selector), text, press_enter=press_enter)
        )

    async def select_option(selector: str, option: str, ctx: ToolContext) -> ToolResult:
        """Choose an option in the <select> this CSS selector matches.

        Args:
            selector: a CSS selector matching exactly one <select>.
            option: the option's text.
        """
        return await _run(provide, ctx, lambda s: act.select_option(s, Target(selector=selector), option))

    common = _common(provide)
    return [
        common[0],
        make_tool(click, side_effects=True, external=True, timeout_s=act.TOOL_TIMEOUT_S),
        make_tool(type_text, side_effects=True, external=True, timeout_s=act.TOOL_TIMEOUT_S),
        make_tool(select_option, side_effects=True, external=True, timeout_s=act.TOOL_TIMEOUT_S),
        *common[1:],
    ]


__all__ = ["SESSION_RESOURCE", "browser_tools", "toolset_tools"]
