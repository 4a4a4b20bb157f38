"""The ``computer`` tool: Anthropic's computer-use action set on the session's browser, for models that see.

The same loop as the numbered tools (book ch6 §3.5: perceive, act, re-verify), driven by pixels: the model reads
a screenshot, acts at a coordinate of it, and every action answers with a short report and a fresh screenshot,
so the next step is planned on what the page shows now. A click, drag, scroll, key or typing whose screenshot
and address are byte-identical before and after is reported as "nothing visible changed".

- Coordinates are pixels of the screenshot, which is the viewport (``[browser] viewport``, 1280×800 by default);
  one outside it is refused with the allowed range.
- The screenshot is a plain one, not the numbered one the indexed tools record: the model aims at pixels,
  and the numbered boxes and labels would cover the very pixels it aims at (and are not what a click hits).
- ``type`` types key by key, 12 ms apart (``keyboard.type(text, delay=12)``); ``key`` takes xdotool names
  (``ctrl+a``, ``Return``, ``Page_Down``, several separated by spaces) and maps them to Playwright's.
- A click on a control that looks irreversible (pay, order, delete, send…) is refused as the numbered ``click``
  refuses it, when ``[browser] confirm_irreversible`` is on: ``confirm_click`` asks the user.
- The tool has no navigation of its own: it is offered with the browser toolset (``open_url``, ``go_back``).

Usage::

    tools = browser_tools(BrowserConfig(vision=True))          # the numbered tools and computer, one browser
    images = await vision_images(session)                      # the numbered screenshot for a numbered tool
"""

from __future__ import annotations

import asyncio
import weakref
from pathlib import Path
from typing import Literal, get_args

from kairos.browser.act import TOOL_TIMEOUT_S, irreversible_label, settle
from kairos.browser.config import BrowserConfig
from kairos.browser.page import BrowserError
from kairos.browser.paths import screen_path
from kairos.browser.session import BrowserSession, Provider, session_provider
from kairos.models.types import Image
from kairos.tools.base import NEWS_PENDING, Tool, ToolContext, ToolResult
from kairos.tools.function import make_tool

Action = Literal[
    "screenshot", "left_click", "right_click", "middle_click", "double_click", "triple_click", "mouse_move",
    "left_click_drag", "left_mouse_down", "left_mouse_up", "scroll", "type", "key", "hold_key",
    "cursor_position", "wait",
]  # fmt: skip
"""Anthropic's computer-use actions (``computer_20250124``), less ``zoom``."""
Direction = Literal["up", "down", "left", "right"]
NOTCH_PX = 100
"""One wheel notch of ``scroll_amount``, in pixels (Chromium's step for a mouse wheel)."""
TYPE_DELAY_MS = 12
"""Between typed characters (as a person's fast typing: pages that react per key see every key)."""
MAX_WAIT_S = 10.0
"""The longest ``wait`` or ``hold_key``."""
_CLICKS: dict[str, tuple[str, int]] = {
    "left_click": ("left", 1),
    "right_click": ("right", 1),
    "middle_click": ("middle", 1),
    "double_click": ("left", 2),
    "triple_click": ("left", 3),
}
_RECHECKED = frozenset({*_CLICKS, "left_click_drag", "scroll", "type", "key"})
"""Actions that should change what the page shows: the report says when nothing visible changed."""
_KEYS = {
    "return": "Enter", "enter": "Enter", "kp_enter": "Enter", "tab": "Tab", "escape": "Escape", "esc": "Escape",
    "backspace": "Backspace", "delete": "Delete", "del": "Delete", "insert": "Insert", "space": "Space",
    "page_down": "PageDown", "pagedown": "PageDown", "next": "PageDown", "page_up": "PageUp", "pageup": "PageUp",
    "prior": "PageUp", "home": "Home", "end": "End", "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft",
    "right": "ArrowRight", "ctrl": "Control", "control": "Control", "control_l": "Control", "control_r": "Control",
    "alt": "Alt", "alt_l": "Alt", "alt_r": "Alt", "shift": "Shift", "shift_l": "Shift", "shift_r": "Shift",
    "super": "Meta", "super_l": "Meta", "meta": "Meta", "cmd": "Meta", "win": "Meta", "caps_lock": "CapsLock",
    "minus": "-", "plus": "+", "equal": "=", "comma": ",", "period": ".", "slash": "/", "backslash": "\\",
    "semicolon": ";", "apostrophe": "'", "grave": "`", "bracketleft": "[", "bracketright": "]",
    **{f"f{n}": f"F{n}" for n in range(1, 13)},
}  # fmt: skip
"""xdotool key names (lower-cased) → Playwright's; a single character stays itself."""
_cursors: weakref.WeakKeyDictionary[BrowserSession, tuple[int, int]] = weakref.WeakKeyDictionary()
"""Where each session's mouse is (Playwright does not say): set by every action that moves it."""
_LABEL_AT = """([x, y]) => {
  const hit = document.elementFromPoint(x, y);
  const el = hit && (hit.closest('button, a, input, select, textarea, summary, [role], [onclick]') || hit);
  if (!el) return ['', ''];
  const link = el.tagName === 'A' && el.hasAttribute('href');
  const role = el.getAttribute('role') || (link ? 'link' : el.tagName.toLowerCase());
  const label = el.getAttribute('aria-label') || el.value || el.innerText || el.textContent || '';
  return [role, label.trim().slice(0, 200)];
}"""
"""The role (ARIA, or ``link`` for ``<a href>``, else the tag) and label of the control at a point."""


def computer_tools(source: BrowserSession | BrowserConfig | Provider, *, start_url: str = "") -> list[Tool]:
    """The ``computer`` tool on ``source``: a session, a config, or the browser toolset's provider of a session.

    With a config, each agent session gets the browser the browser toolset of that config gives it (one Chromium).
    """
    provide = session_provider(source, start_url)

    async def computer(  # noqa: D417 (ctx is injected, not the model's to pass)
        action: Action,
        ctx: ToolContext,
        coordinate: tuple[int, int] | None = None,
        text: str | None = None,
        scroll_direction: Direction | None = None,
        scroll_amount: int | None = None,
        duration: float | None = None,
        start_coordinate: tuple[int, int] | None = None,
    ) -> ToolResult:
        """Use the browser's screen, mouse and keyboard as a person would: every action answers with a screenshot.

        Coordinates are pixels [x, y] of the screenshot (0,0 is its top-left corner). Open pages with open_url.

        Args:
            action: screenshot; left_click, right_click, middle_click, double_click, triple_click (at coordinate,
                or where the mouse is; text: modifier keys to hold, e.g. shift); mouse_move; left_click_drag (from
                start_coordinate to coordinate); left_mouse_down, left_mouse_up; scroll (scroll_direction and
                scroll_amount at coordinate); type (text); key (text: a key or combination in xdotool names, e.g.
                Return, ctrl+a, Page_Down); hold_key (text, for duration seconds); cursor_position; wait (duration).
            coordinate: [x, y] in the screenshot's pixels.
            text: what to type, the key for key/hold_key, or the modifier keys held during a click or scroll.
            scroll_direction: up, down, left or right.
            scroll_amount: how many wheel notches to scroll (default 3).
            duration: seconds to wait or hold a key (at most 10).
            start_coordinate: where left_click_drag starts (default: where the mouse is).
        """
        session = provide(ctx)
        try:
            async with session.turn(ctx.get(NEWS_PENDING)) as refusal:  # as the numbered tools take turns
                if refusal:
                    return ToolResult(refusal, is_error=True)
                report, done = await run_action(
                    session,
                    action,
                    coordinate=coordinate,
                    text=text,
                    scroll_direction=scroll_direction,
                    scroll_amount=scroll_amount,
                    duration=duration,
                    start_coordinate=start_coordinate,
                )
                shot = await screenshot(session)
        except BrowserError as e:
            return ToolResult(f"Not done: {e}", is_error=True)
        return ToolResult(report, metadata={"browser.done": done}, images=(shot,))

    return [make_tool(computer, side_effects=True, external=True, timeout_s=TOOL_TIMEOUT_S)]


async def screenshot(session: BrowserSession) -> Image:
    """A plain PNG screenshot of the viewport now (the pixel space the model's coordinates are in).

    Raises:
        BrowserError: the page could not be captured.
    """
    try:
        return Image.from_bytes(await session.page.screenshot(type="png", timeout=10_000))
    except BrowserError:
        raise
    except Exception as e:
        raise BrowserError(f"no screenshot: {str(e).splitlines()[0][:200]}") from e


async def vision_images(session: BrowserSession) -> tuple[Image, ...]:
    """The images a numbered tool's result carries: with ``[browser] vision``, the latest look's numbered screenshot.

    A plain screenshot when none was written; without ``vision``, none. Never raises: a result reads without one.
    """
    if not session.config.vision or not session.started:
        return ()
    path = screen_path(session.state_dir, session.session_id)
    if session.config.screenshots:
        raw = await asyncio.to_thread(_read, path)
        if raw:
            return (Image.from_bytes(raw),)
    try:
        return (await screenshot(session),)
    except BrowserError:
        return ()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


async def run_action(
    session: BrowserSession,
    action: str,
    *,
    coordinate: tuple[int, int] | list[int] | None = None,
    text: str | None = None,
    scroll_direction: str | None = None,
    scroll_amount: int | None = None,
    duration: float | None = None,
    start_coordinate: tuple[int, int] | list[int] | None = None,
) -> tuple[str, bool]:
    """Do one computer-use action; the report (what was done, the re-check, the page) and whether it took effect.

    Raises:
        BrowserError: invalid arguments (a coordinate off the screen, a missing text, an unknown key), said
            so the model can correct the call.
    """
    page = session.page
    session.stats.actions += 1
    point = _point(session, coordinate, "coordinate") if coordinate is not None else None
    start = _point(session, start_coordinate, "start_coordinate") if start_coordinate is not None else None
    before = (await _capture(session), page.url) if action in _RECHECKED else None
    lines: list[str] = []
    mouse = page.mouse
    if action == "screenshot":
        lines.append("Screenshot taken.")
    elif action in _CLICKS:
        button, count = _CLICKS[action]
        x, y = point or _cursor(session)
        if button == "left" and session.config.confirm_irreversible:
            role, label = await _label_at(session, x, y)
            if irreversible_label(role, label):
                return (
                    f'Not clicked: the control at ({x}, {y}) "{label[:80]}" looks irreversible (it may pay, order, '
                    "send or delete). If the user asked for exactly this, call look_at_page and confirm_click on its "
                    "number: it asks the user first.",
                    False,
                )
        async with _held(session, text):
            await mouse.click(x, y, button=button, click_count=count)
        _cursors[session] = (x, y)
        lines.append(f"{action.replace('_', '-').capitalize()}ed at ({x}, {y})" + _holding(text) + ".")
    elif action == "mouse_move":
        x, y = _need(point, action, "coordinate")
        await mouse.move(x, y)
        _cursors[session] = (x, y)
        lines.append(f"Moved the mouse to ({x}, {y}).")
    elif action == "left_click_drag":
        x, y = _need(point, action, "coordinate")
        x0, y0 = start or _cursor(session)
        await mouse.move(x0, y0)
        await mouse.down()
        await mouse.move(x, y, steps=12)  # in steps: pages follow a drag by its mousemove events
        await mouse.up()
        _cursors[session] = (x, y)
        lines.append(f"Dragged from ({x0}, {y0}) to ({x}, {y}).")
    elif action in ("left_mouse_down", "left_mouse_up"):
        if point is not None:
            await mouse.move(*point)
            _cursors[session] = point
        await (mouse.down() if action == "left_mouse_down" else mouse.up())
        x, y = _cursor(session)
        lines.append(f"Left mouse button {'down' if action == 'left_mouse_down' else 'up'} at ({x}, {y}).")
    elif action == "scroll":
        direction = (scroll_direction or "").lower()
        steps = {"down": (0, 1), "up": (0, -1), "right": (1, 0), "left": (-1, 0)}.get(direction)
        if steps is None:
            raise BrowserError("scroll needs scroll_direction: up, down, left or right")
        amount = 3 if scroll_amount is None else int(scroll_amount)
        if not 1 <= amount <= 50:
            raise BrowserError("scroll_amount is a number of wheel notches from 1 to 50")
        x, y = point or _cursor(session)
        await mouse.move(x, y)
        _cursors[session] = (x, y)
        async with _held(session, text):
            await mouse.wheel(steps[0] * amount * NOTCH_PX, steps[1] * amount * NOTCH_PX)
        lines.append(f"Scrolled {direction} {amount} notch{'es' if amount != 1 else ''} at ({x}, {y}){_holding(text)}.")
    elif action == "type":
        if not text:
            raise BrowserError("type needs text: what to type")
        await page.keyboard.type(text, delay=TYPE_DELAY_MS)
        lines.append(f"Typed {text!r}.")
    elif action == "key":
        if not text or not text.strip():
            raise BrowserError("key needs text: a key or combination, e.g. Return, ctrl+a, Page_Down")
        for combo in text.split():
            await _press(session, combo)
        lines.append(f"Pressed {text.strip()}.")
    elif action == "hold_key":
        if not text or not text.strip():
            raise BrowserError("hold_key needs text (the key) and duration (seconds)")
        key = _key(text.strip())
        seconds = _seconds(duration, 1.0)
        await page.keyboard.down(key)
        try:
            await asyncio.sleep(seconds)
        finally:
            await page.keyboard.up(key)
        lines.append(f"Held {text.strip()} for {seconds:g} s.")
    elif action == "cursor_position":
        x, y = _cursor(session)
        lines.append(f"The mouse is at X={x}, Y={y}.")
    elif action == "wait":
        seconds = _seconds(duration, 1.0)
        await asyncio.sleep(seconds)
        lines.append(f"Waited {seconds:g} s.")
    else:
        raise BrowserError(f"unknown action {action!r}: use one of {', '.join(get_args(Action))}")
    done = True
    if action != "screenshot":
        await settle(session)
    if before is not None and before == (await _capture(session), session.page.url):
        session.stats.reverify_catches += 1
        done = False
        lines.append(
            "Re-check: nothing visible changed (the same screenshot and address): look at the screenshot; aim at "
            "the control's middle, or click a field before typing."
        )
    return "\n".join([*lines, *_news(session), await _header(session)]), done


def _point(session: BrowserSession, value: tuple[int, int] | list[int] | None, name: str) -> tuple[int, int]:
    width, height = session.config.viewport
    try:
        x, y = (int(v) for v in value or ())
    except (TypeError, ValueError):
        raise BrowserError(f"{name} is [x, y]: two whole numbers of pixels") from None
    if not (0 <= x < width and 0 <= y < height):
        raise BrowserError(
            f"{name} ({x}, {y}) is off the screen: x must be 0 to {width - 1} and y 0 to {height - 1} (the "
            f"screenshot is {width}×{height} pixels); scroll to reach what is further"
        )
    return x, y


def _need(point: tuple[int, int] | None, action: str, name: str) -> tuple[int, int]:
    if point is None:
        raise BrowserError(f"{action} needs {name}: [x, y] in the screenshot's pixels")
    return point


def _cursor(session: BrowserSession) -> tuple[int, int]:
    return _cursors.get(session, (0, 0))


def _seconds(duration: float | None, default: float) -> float:
    seconds = default if duration is None else float(duration)
    if not 0 <= seconds <= MAX_WAIT_S:
        raise BrowserError(f"duration is seconds from 0 to {MAX_WAIT_S:g}")
    return seconds


def _key(name: str) -> str:
    """One xdotool key name as Playwright's (``Return`` → ``Enter``, ``ctrl`` → ``Control``)."""
    return name if len(name) == 1 else _KEYS.get(name.lower(), name)


async def _press(session: BrowserSession, combo: str) -> None:
    keys = "+".join(_key(k) for k in combo.split("+") if k) if combo != "+" else "+"
    try:
        await session.page.keyboard.press(keys)
    except Exception as e:
        raise BrowserError(
            f"unknown key {combo!r}: use xdotool names like Return, Tab, Escape, BackSpace, Page_Down, Up, ctrl+a"
        ) from e


class _held:
    """Modifier keys (``shift``, ``ctrl+alt``) held down around a click or a scroll."""

    def __init__(self, session: BrowserSession, text: str | None) -> None:
        self.keyboard = session.page.keyboard
        self.keys = [_key(k) for k in (text or "").replace(" ", "+").split("+") if k]

    async def __aenter__(self) -> None:
        for key in self.keys:
            try:
                await self.keyboard.down(key)
            except Exception as e:
                raise BrowserError(f"unknown modifier key {key!r}: use shift, ctrl, alt or super") from e

    async def __aexit__(self, *exc: object) -> None:
        for key in reversed(self.keys):
            try:
                await self.keyboard.up(key)
            except Exception:
                pass


def _holding(text: str | None) -> str:
    return f" holding {text.strip()}" if text and text.strip() else ""


async def _label_at(session: BrowserSession, x: int, y: int) -> tuple[str, str]:
    try:
        role, label = await session.page.evaluate(_LABEL_AT, [x, y])
        return str(role or ""), str(label or "")
    except Exception:
        return "", ""


async def _capture(session: BrowserSession) -> bytes:
    try:
        return bytes(await session.page.screenshot(type="png", timeout=10_000))
    except Exception:
        return b""


def _news(session: BrowserSession) -> list[str]:
    """Dialogs answered and downloads saved since the last look, and requests blocked."""
    out = []
    if dialogs := session.take_dialogs():
        out.append("Dialog: " + dialogs)
    if blocked := session.blocked_note():
        out.append(blocked)
    return out


async def _header(session: BrowserSession) -> str:
    page = session.page
    try:
        title = await page.title()
    except Exception:
        title = ""
    width, height = session.config.viewport
    return f"Page: {title or '(no title)'} — {page.url}\n(screenshot: {width}×{height} pixels)"


__all__ = ["NOTCH_PX", "TYPE_DELAY_MS", "computer_tools", "run_action", "screenshot", "vision_images"]
