"""One browser action, then a re-check that reality matches the plan (book ch6 §3.5: "re-verify after every step").

Each action knows what it should change: a typed value must read back, a checkbox must flip, a selected option
must show, a click must change something (a navigation, the page's text, a dialog), a scroll must move. When it
did not, the action is retried once another way (``fill`` instead of key presses, a DOM click when the element
is covered) and the report says so; a catch the retry did not fix is reported as not done. Every report ends
with what changed on the page (or the whole page after a navigation): the model never acts on a stale picture.

Usage::

    report = await click(session, Target(index=7))
    report.text   # "Clicked [7] button "Next". Page: … Changed on the page: …"
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from kairos.browser.page import BrowserError, Element, Observation, raw_html
from kairos.browser.session import ALLOW_HINT, BrowserSession, host_of

SETTLE_S = 0.25
"""A page's scripts usually react within this; the re-check waits for it (and for a started navigation)."""
TOOL_TIMEOUT_S = 90.0
"""A browser tool call, its waits and re-check included, is stopped after this."""
IRREVERSIBLE = re.compile(
    r"\b(pay|payment|purchase|buy|place (the |my )?order|order now|delete|remove|erase|"
    r"destroy|send|transfer|publish|unsubscribe|close (my )?account|cancel (my )?(subscription|account|order)|"
    r"confirm (purchase|payment|order|deletion)|sign and submit)\b",
    re.I,
)
"""Labels of controls whose effect cannot be undone: ``click`` refuses them; ``confirm_click`` asks the user.

"Checkout" is not one: on every shop it opens the checkout page, where "Place order" or "Pay" is the step."""
DESTRUCTIVE_LINK = re.compile(
    r"\b(delete|remove|erase|destroy|unsubscribe|close (my )?account|cancel (my )?(subscription|account|order))\b",
    re.I,
)
"""A link is navigation ("Buy now", "Send a parcel" open a form): only these labels make one irreversible."""


@dataclass(frozen=True, slots=True)
class Target:
    """An element by its number (``indexed`` mode) or by a CSS selector (``raw_html`` mode)."""

    index: int | None = None
    selector: str = ""

    def describe(self, element: Element | None = None) -> str:
        """``[7] button "Next"`` or the selector."""
        if element is not None:
            return f"[{element.index}] {element.role}" + (f' "{element.name}"' if element.name else "")
        return f"[{self.index}]" if self.index is not None else repr(self.selector)


@dataclass(frozen=True, slots=True)
class Report:
    """What an action did, its re-check and the page after it."""

    text: str
    done: bool = True
    """False: the action did not happen (or its effect could not be confirmed); the text says what to do."""


def irreversible_label(role: str, label: str) -> bool:
    """Whether clicking a control with this role and label may pay, send, delete or order."""
    return bool((DESTRUCTIVE_LINK if role == "link" else IRREVERSIBLE).search(label))


def looks_irreversible(element: Element | None) -> bool:
    """Whether clicking ``element`` may pay, send, delete or order (by its role and label)."""
    return element is not None and irreversible_label(element.role, element.name)


def what_is(session: BrowserSession, index: object) -> str:
    """Element ``index`` of the last look and the page it is on, for the user's approval; "" when unknown.

    The label is the page's own text: the approval question shows it as data, never as the question itself.
    """
    look = session.last
    element = look.element(index) if look is not None and isinstance(index, int) else None
    if look is None or element is None:
        return ""
    return f"{Target(element.index).describe(element)} on the page {look.title!r} ({look.url})"


async def _locate(session: BrowserSession, target: Target) -> tuple[Any, Element | None]:
    """The Playwright locator of ``target`` and its element in the last look.

    Raises:
        BrowserError: no such element now (the message says to look again), or a selector that is not unique.
    """
    page = session.page
    if target.index is not None:
        loc = page.locator(f'[data-kairos-index="{int(target.index)}"]')
        if await loc.count() == 0:
            raise BrowserError(
                f"there is no element [{target.index}] on the page now: use the numbers of the latest page"
            )
        element = session.last.element(target.index) if session.last is not None else None
        return loc.first, element
    if not target.selector.strip():
        raise BrowserError("give the element: index (a number from the page) or selector (CSS)")
    try:
        loc = page.locator(target.selector)
        n = await loc.count()
    except Exception as e:
        raise BrowserError(f"invalid selector {target.selector!r}: {str(e).splitlines()[0][:200]}") from e
    if n == 0:
        raise BrowserError(
            f"no element matches {target.selector!r}: use an id or class the HTML shows, or the element's text, "
            'e.g. button:has-text("OK")'
        )
    if n > 1:
        raise BrowserError(f"{n} elements match {target.selector!r}: make the selector match one")
    return loc, None


async def _before(session: BrowserSession) -> Observation:
    session.last = await session.look(record=False)  # the screenshot is taken after the action
    return session.last


async def settle(session: BrowserSession) -> None:
    """Let the page react to an action (a navigation it started included) before the re-check looks."""
    await asyncio.sleep(SETTLE_S)
    try:
        await session.page.wait_for_load_state("domcontentloaded", timeout=session.config.navigation_timeout_s * 1000)
    except Exception:
        pass  # a slow page: what is there now is what the model sees


async def _after(session: BrowserSession) -> Observation:
    await settle(session)
    return await session.look()


def _changed(before: Observation, after: Observation) -> bool:
    return (
        before.url != after.url or before.lines() != after.lines() or bool(after.dialog) or before.title != after.title
    )


async def _finish(session: BrowserSession, before: Observation | None, after: Observation, lines: list[str]) -> str:
    session.last = after
    blocked = session.blocked_note()
    page = await session_text(session, before, after)
    return "\n".join([*lines, *([blocked] if blocked else []), page])


async def session_text(session: BrowserSession, before: Observation | None, after: Observation) -> str:
    """The page after an action as the model reads it: changes (indexed) or the HTML (raw_html)."""
    if session.config.mode == "raw_html":
        dialog = f"Dialog: {after.dialog}\n" if after.dialog else ""
        return dialog + await raw_html(session.page)
    return after.changes_since(before)


def _catch(session: BrowserSession) -> None:
    session.stats.reverify_catches += 1


async def click(session: BrowserSession, target: Target, *, approved: bool = False) -> Report:
    """Click ``target``; the re-check wants a change (a checkbox must flip)."""
    session.stats.actions += 1
    before = await _before(session)
    loc, element = await _locate(session, target)
    what = target.describe(element)
    if session.config.confirm_irreversible and not approved and looks_irreversible(element):
        return Report(
            f"Not clicked: {what} looks irreversible (it may pay, order, send or delete). If the user asked for "
            f"exactly this, call confirm_click(index={target.index}): it asks the user first.",
            done=False,
        )
    if approved:
        session.accept_next_dialog()
    note: list[str] = []
    failed = False
    try:
        await loc.click(timeout=session.config.action_timeout_s * 1000)
    except Exception as e:
        if "intercept" not in str(e) and "not visible" not in str(e) and "Timeout" not in str(e):
            raise BrowserError(f"could not click {what}: {str(e).splitlines()[0][:200]}") from e
        _catch(session)
        session.stats.retries += 1
        await loc.dispatch_event("click")
        note.append(f"{what} was covered or not ready: clicked it through the page's DOM instead.")
    after = await _after(session)
    if element is not None and element.checked is not None and after.url == before.url:
        now = after.element(element.index)
        if now is not None and now.checked == element.checked and element.role in ("checkbox", "radio", "switch"):
            if element.role == "radio" and element.checked:
                note.append(f"{what} was already selected.")
            else:
                _catch(session)
                session.stats.retries += 1
                await loc.dispatch_event("click")
                after = await _after(session)
                now = after.element(element.index)
                ok = now is not None and now.checked != element.checked
                failed = not ok
                note.append(
                    f"Re-check: {what} did not change on the first click; "
                    + ("clicked again: it changed." if ok else "it still did not change.")
                )
    if not failed and not _changed(before, after):  # often fine (a step of a sequence): said, not a failure
        note.append(f"Nothing visible changed after clicking {what}; if the page should have reacted, look again.")
    return Report(await _finish(session, before, after, [f"Clicked {what}.", *note]), done=not failed)


async def type_text(session: BrowserSession, target: Target, text: str, *, press_enter: bool = False) -> Report:
    """Replace the field's text with ``text`` (key by key, 12 ms apart); the re-check reads the value back."""
    session.stats.actions += 1
    before = await _before(session)
    loc, element = await _locate(session, target)
    what = target.describe(element)
    note: list[str] = []
    if await _value(loc) is None:
        raise BrowserError(f"{what} is not a text field; {_fields(session)}")
    try:
        await loc.fill("", timeout=session.config.action_timeout_s * 1000)
        await loc.press_sequentially(text, delay=12)
    except Exception as e:
        raise BrowserError(f"cannot type into {what}: {str(e).splitlines()[0][:200]} (is it a text field?)") from e
    value = await _value(loc)
    if value is not None and value != text:
        _catch(session)
        session.stats.retries += 1
        await loc.fill(text)
        value = await _value(loc)
        note.append(
            f"Re-check: the field read {value!r} after typing; set it directly: "
            + ("now it reads the text." if value == text else f"it still reads {value!r} (the page changes it).")
        )
    if press_enter:
        typed = await session.look(record=False)
        await loc.press("Enter")
    after = await _after(session)
    if press_enter and not _changed(typed, after):
        note.append("Enter changed nothing on the page: if a button sends the form, click it.")
    done = value is None or value == text
    return Report(
        await _finish(
            session,
            before,
            after,
            [f"Typed {text!r} into {what}" + (" and pressed Enter." if press_enter else "."), *note],
        ),
        done=done,
    )


_TEXT_ROLES = ("textbox", "searchbox", "combobox", "spinbutton")


def _fields(session: BrowserSession) -> str:
    """The text fields of the last look, for an error that says where typing works."""
    elements = session.last.elements if session.last else []
    found = [e for e in elements if e.role in _TEXT_ROLES and e.value is not None and e.tag != "select"]
    if not found:
        return "this page has no text field"
    return "the text fields on this page: " + ", ".join(Target(e.index).describe(e) for e in found[:8])


def _named(session: BrowserSession, name: str) -> Element | None:
    """The one element of the last look whose name is ``name`` (case aside), or that alone contains it."""
    wanted = name.strip().lower()
    elements = session.last.elements if session.last and wanted else []
    exact = [e for e in elements if e.name.strip().lower() == wanted]
    near = exact or [e for e in elements if wanted in e.name.lower()]
    return near[0] if len(near) == 1 else None


_VALUE_JS = "e => ['INPUT', 'TEXTAREA'].includes(e.tagName) ? e.value : (e.isContentEditable ? e.innerText : null)"


async def _value(loc: Any) -> str | None:
    try:
        out = await loc.evaluate(_VALUE_JS)
    except Exception:
        return None
    return None if out is None else str(out)


async def select_option(session: BrowserSession, target: Target, option: str) -> Report:
    """Choose ``option`` (its text, or its value) in a ``<select>``; the re-check reads the choice back."""
    session.stats.actions += 1
    before = await _before(session)
    loc, element = await _locate(session, target)
    what = target.describe(element)
    options: list[dict[str, str]] | None = await loc.evaluate(
        "e => e.tagName === 'SELECT' ? Array.from(e.options).map(o => ({text: o.text.trim(), value: o.value})) : null"
    )
    if options is None:
        if (named := _named(session, option)) is not None and (element is None or named.index != element.index):
            # a small model often means "choose the thing called option": name its number, not the wrong one's
            raise BrowserError(
                f"{what} is not a list box. The element called {option!r} is "
                f"{Target(named.index).describe(named)}: to choose it, click({named.index})"
            )
        if element is not None and element.role in ("checkbox", "radio", "switch", "button", "link", "option", "tab"):
            raise BrowserError(f"{what} is a {element.role}, not a list box: to choose it, click({element.index})")
        raise BrowserError(f"{what} is not a list box (<select>): click it to open it, then click the option")
    wanted = option.strip().lower()
    match = next((o for o in options if o["text"].lower() == wanted or o["value"].lower() == wanted), None)
    match = match or next((o for o in options if wanted and wanted in o["text"].lower()), None)
    if match is None:
        shown = ", ".join(repr(o["text"]) for o in options[:20])
        raise BrowserError(f"{what} has no option {option!r}; its options: {shown}")
    await loc.select_option(value=match["value"])
    chosen = await loc.evaluate("e => e.selectedOptions[0] ? e.selectedOptions[0].text.trim() : ''")
    note = []
    if chosen != match["text"]:
        _catch(session)
        note.append(f"Re-check: {what} shows {chosen!r}, not {match['text']!r} (the page changed it back).")
    after = await _after(session)
    return Report(
        await _finish(session, before, after, [f"Selected {match['text']!r} in {what}.", *note]), done=not note
    )


async def press_key(session: BrowserSession, key: str) -> Report:
    """Press ``key`` (``Enter``, ``Tab``, ``Control+A``…) on the focused element."""
    session.stats.actions += 1
    before = await _before(session)
    try:
        await session.page.keyboard.press(key)
    except Exception as e:
        raise BrowserError(f"unknown key {key!r}: use names like Enter, Tab, Escape, ArrowDown, Control+A") from e
    after = await _after(session)
    return Report(await _finish(session, before, after, [f"Pressed {key}."]))


async def scroll(session: BrowserSession, direction: str, target: Target | None = None) -> Report:
    """Scroll the page (``down``/``up``/``left``/``right``), or bring ``target`` into view; re-check it moved."""
    session.stats.actions += 1
    before = await _before(session)
    page = session.page
    if target is not None and (target.index is not None or target.selector):
        loc, element = await _locate(session, target)
        await loc.scroll_into_view_if_needed()
        after = await _after(session)
        return Report(await _finish(session, before, after, [f"Scrolled {target.describe(element)} into view."]))
    dx, dy = {"down": (0, 600), "up": (0, -600), "right": (600, 0), "left": (-600, 0)}.get(direction.lower(), (0, 0))
    if (dx, dy) == (0, 0):
        raise BrowserError(f"unknown direction {direction!r}: use down, up, left or right")
    where = "() => [window.scrollX, window.scrollY]"
    start = await page.evaluate(where)
    await page.mouse.wheel(dx, dy)
    after = await _after(session)
    moved = await page.evaluate(where) != start
    if not moved:
        _catch(session)
        return Report(
            await _finish(
                session, before, after, [f"Re-check: the page did not scroll {direction} (already at the end?)."]
            ),
            done=False,
        )
    return Report(await _finish(session, before, after, [f"Scrolled {direction}."]))


async def open_url(session: BrowserSession, url: str) -> Report:
    """Go to ``url`` (if the network rule allows its host); re-check it loaded."""
    session.stats.actions += 1
    url = url.strip()
    if url and "://" not in url:
        url = "https://" + url
    await session.start()
    if not session.allows(url):
        return Report(f"Not opened: {host_of(url)} is not an allowed host. Tell the user. {ALLOW_HINT}", done=False)
    if session.last is not None and _same_address(session.page.url, url):
        # a small model re-opens the page it is on (copying its last call) and loses what it typed: not reloaded
        return Report(
            f"Already open: {url} (not reloaded). Its numbered elements are in the results above: act on them "
            "(click, type_text), or look_at_page to see it whole again."
        )
    try:
        response = await session.page.goto(url, wait_until="domcontentloaded")
    except Exception as e:
        _catch(session)
        return Report(f"Could not open {url}: {str(e).splitlines()[0][:200]}", done=False)
    after = await session.look()
    lines = [f"Opened {url}."]
    if response is not None and response.status >= 400:
        _catch(session)
        lines.append(f"Re-check: the server answered {response.status}.")
    # a page opened on purpose is shown whole (the model asked for it)
    return Report(await _finish(session, None, after, lines))


def _same_address(current: str, wanted: str) -> bool:
    return current.rstrip("/") == wanted.rstrip("/")


async def go_back(session: BrowserSession) -> Report:
    """The previous page in the tab's history; re-check the address changed."""
    session.stats.actions += 1
    before = await _before(session)
    response = await session.page.go_back(wait_until="domcontentloaded")
    after = await session.look()
    if response is None and after.url == before.url:
        _catch(session)
        return Report(await _finish(session, before, after, ["There is no earlier page in this tab."]), done=False)
    return Report(await _finish(session, before, after, ["Went back."]))


async def wait(session: BrowserSession, seconds: float) -> Report:
    """Let the page work (a slow load, an animation) for up to 10 s, then show what changed."""
    before = await _before(session)
    await asyncio.sleep(max(0.0, min(float(seconds), 10.0)))
    after = await _after(session)
    return Report(await _finish(session, before, after, [f"Waited {min(float(seconds), 10.0):g} s."]))


__all__ = [
    "IRREVERSIBLE",
    "Report",
    "Target",
    "click",
    "go_back",
    "irreversible_label",
    "looks_irreversible",
    "open_url",
    "press_key",
    "scroll",
    "select_option",
    "session_text",
    "type_text",
    "wait",
    "what_is",
]
