r"""The page as the model reads it: numbered interactive elements in document order, with the text around them.

This is structured Set-of-Mark (book ch6 §3.5): the DOM says which elements are interactive and where they are
(``observe.js``), the accessibility tree from Chrome's DevTools protocol gives their roles and names as a screen
reader would read them, and each element gets a number the model acts by ("click [7]"). Numbers stay on the
elements while the document lives, so a second look can be sent as what changed instead of the whole page.
A screenshot with the same numbers drawn as boxes serves models (and people) that see.

Usage::

    obs = await observe(page)
    print(obs.render())            # Page: Checkout — http://…\n[1] textbox "Name" value=""\n…
    print(obs.changes_since(old))  # only the lines that changed, or the whole page after a navigation
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from kairos.errors import KairosError

_OBSERVE_JS = resources.files("kairos.browser").joinpath("observe.js").read_text(encoding="utf-8")
MAX_LINES = 400
"""An observation shows at most this many lines (elements and text); the rest is counted, not shown."""
MAX_HTML_CHARS = 12_000
"""Raw-HTML observations (the bench's baseline) are cut to this many characters."""
_WHOLE_PAGE_OVER = 0.6
"""A change touching more than this share of the lines is shown as the whole page."""


class BrowserError(KairosError):
    """The browser could not do what was asked; the message says what to do (it reaches the model)."""


@dataclass(frozen=True, slots=True)
class Element:
    """One interactive element: its number, what it is, what it holds, where it is."""

    index: int
    role: str
    name: str
    tag: str = ""
    value: str | None = None
    checked: bool | None = None
    expanded: bool | None = None
    disabled: bool = False
    focused: bool = False
    in_view: bool = True
    options: tuple[str, ...] = ()
    box: tuple[int, int, int, int] = (0, 0, 0, 0)
    """x, y, width, height in CSS pixels of the viewport."""

    def line(self) -> str:
        """``[7] checkbox "Remember me" checked`` — one line of the observation."""
        out = f"[{self.index}] {self.role}" + (" (multi-line)" if self.tag == "textarea" else "")
        if self.name:
            out += f' "{self.name}"'
        if self.value is not None:
            out += f' value="{self.value}"'
        if self.checked is not None:
            out += " checked" if self.checked else " unchecked"
        if self.expanded is not None:
            out += " expanded" if self.expanded else " collapsed"
        if self.options:
            out += " options: " + ", ".join(f'"{o}"' for o in self.options)
        if self.disabled:
            out += " disabled"
        if not self.in_view:
            out += " (off screen: scroll)"
        return out

    @property
    def centre(self) -> tuple[float, float]:
        """The middle of its box (where a coordinate click lands)."""
        x, y, w, h = self.box
        return x + w / 2, y + h / 2


@dataclass(frozen=True, slots=True)
class Observation:
    """What one look at the page saw."""

    url: str
    title: str
    items: tuple[Element | str, ...] = ()
    """Elements and text lines in document order."""
    dialog: str = ""
    """A dialog the page opened since the last look (already answered: see :mod:`.session`)."""
    document: str = ""
    """Which document this was (a new one after a navigation: element numbers start again)."""
    elements_by_index: dict[int, Element] = field(default_factory=dict, compare=False)

    @property
    def elements(self) -> list[Element]:
        """The interactive elements, in document order."""
        return [i for i in self.items if isinstance(i, Element)]

    def element(self, index: int) -> Element | None:
        """The element numbered ``index`` in this look, or None."""
        return self.elements_by_index.get(index)

    def lines(self) -> list[str]:
        """The body of the observation, one element or text per line."""
        out = [i.line() if isinstance(i, Element) else i for i in self.items]
        if len(out) > MAX_LINES:
            out = out[:MAX_LINES] + [f"(… {len(out) - MAX_LINES} more lines: scroll or ask for a part)"]
        return out

    def header(self) -> str:
        """``Page: <title> — <url>``."""
        return f"Page: {self.title or '(no title)'} — {self.url}"

    def render(self) -> str:
        """The whole page as the model reads it."""
        body = self.lines() or ["(no text and no interactive elements)"]
        dialog = [f"Dialog: {self.dialog}"] if self.dialog else []
        return "\n".join([self.header(), *dialog, *body])

    def changes_since(self, before: Observation | None) -> str:
        """What changed since ``before``: the lines added and removed, or the whole page when it is new."""
        if before is None or before.url != self.url or before.document != self.document:
            return self.render()
        old, new = before.lines(), self.lines()
        diff = [d for d in difflib.ndiff(old, new) if d[:2] in ("+ ", "- ")]
        if not diff and not self.dialog and before.title == self.title:
            return f"{self.header()}\n(nothing on the page changed)"
        if len(diff) > _WHOLE_PAGE_OVER * max(len(old), len(new), 1):
            return self.render()
        dialog = [f"Dialog: {self.dialog}"] if self.dialog else []
        now = {_number(d[2:]) for d in diff if d[0] == "+"} - {None}
        # an element whose line changed is shown once, as it is now
        shown = [
            ("now: " if d[0] == "+" else "gone: ") + d[2:] for d in diff if d[0] == "+" or _number(d[2:]) not in now
        ]
        return "\n".join([self.header(), *dialog, "Changed on the page:", *shown])


def _number(line: str) -> int | None:
    m = _INDEX.match(line)
    return int(m.group(1)) if m else None


_INDEX = re.compile(r"\[(\d+)\] ")


async def observe(page: Any, *, dialog: str = "") -> Observation:
    """Number the page's interactive elements and read them (with CDP's accessible names where it has them).

    Raises:
        BrowserError: the page cannot be read (closed, crashed, still navigating after a retry).
    """
    try:
        raw = await _evaluate(page)
    except BrowserError:
        raise
    except Exception as e:  # playwright's errors: the page closed or crashed
        raise BrowserError(f"cannot read the page: {_first_line(e)}") from e
    accessible = await _accessible_names(page)
    items: list[Element | str] = []
    by_index: dict[int, Element] = {}
    for it in raw.get("items", []):
        if it.get("kind") == "text":
            items.append(str(it["text"]))
            continue
        element = _element(it, accessible.get(int(it["index"])))
        items.append(element)
        by_index[element.index] = element
    title = ""
    try:
        title = await page.title()
    except Exception:
        pass
    return Observation(page.url, title, tuple(items), dialog, str(raw.get("doc") or ""), by_index)


async def _evaluate(page: Any) -> dict[str, Any]:
    for attempt in range(3):
        try:
            out: dict[str, Any] = await page.evaluate(_OBSERVE_JS)
            return out
        except Exception as e:
            if "navigat" not in str(e).lower() and "context was destroyed" not in str(e).lower() or attempt == 2:
                raise
            await page.wait_for_load_state("domcontentloaded")
    raise BrowserError("the page kept navigating")  # pragma: no cover - the loop returns or raises


async def _accessible_names(page: Any) -> dict[int, tuple[str, str]]:
    """``{index: (role, name)}`` from Chromium's accessibility tree, for the numbered elements.

    Read through CDP: the DOM's backend node ids of ``[data-kairos-index]`` elements, then the full AX tree.
    Empty when the browser has no CDP (not Chromium) or the page changed meanwhile: the DOM's guesses stand.
    """
    try:
        cdp = await page.context.new_cdp_session(page)
    except Exception:
        return {}
    try:
        doc = await cdp.send("DOM.getDocument", {"depth": -1, "pierce": True})
        backend: dict[int, int] = {}
        _collect(doc.get("root", {}), backend)
        if not backend:
            return {}
        tree = await cdp.send("Accessibility.getFullAXTree")
        out: dict[int, tuple[str, str]] = {}
        for node in tree.get("nodes", []):
            index = backend.get(node.get("backendDOMNodeId", -1))
            if index is None or node.get("ignored"):
                continue
            role = str((node.get("role") or {}).get("value") or "")
            name = str((node.get("name") or {}).get("value") or "")
            out[index] = (role, re.sub(r"\s+", " ", name).strip())
        return out
    except Exception:
        return {}
    finally:
        try:
            await cdp.detach()
        except Exception:
            pass


def _collect(node: dict[str, Any], out: dict[int, int]) -> None:
    attrs = node.get("attributes") or []
    for k, v in zip(attrs[::2], attrs[1::2], strict=False):
        if k == "data-kairos-index" and v.isdigit():
            out[node["backendNodeId"]] = int(v)
    for child in node.get("children") or []:
        _collect(child, out)
    for child in node.get("shadowRoots") or []:
        _collect(child, out)
    if node.get("contentDocument"):
        _collect(node["contentDocument"], out)


_GENERIC_ROLES = {"", "generic", "none", "presentation", "StaticText", "paragraph", "LabelText", "group", "cell"}


def _element(it: dict[str, Any], ax: tuple[str, str] | None) -> Element:
    role, name = str(it.get("role") or ""), str(it.get("name") or "")
    if ax is not None:
        ax_role, ax_name = ax
        if ax_role not in _GENERIC_ROLES and role in ("clickable", ""):
            role = ax_role
        if ax_name:
            name = ax_name if len(ax_name) <= 80 else ax_name[:79] + "…"
    box = it.get("box") or [0, 0, 0, 0]
    return Element(
        index=int(it["index"]),
        role=role or "clickable",
        name=name,
        tag=str(it.get("tag") or ""),
        value=it.get("value"),
        checked=it.get("checked"),
        expanded=it.get("expanded"),
        disabled=bool(it.get("disabled")),
        focused=bool(it.get("focused")),
        in_view=bool(it.get("inView", True)),
        options=tuple(str(o) for o in it.get("options") or ()),
        box=(int(box[0]), int(box[1]), int(box[2]), int(box[3])),
    )


_LIVE_HTML = """(() => {
  if (!document.body) return '';
  // outerHTML shows what the page was served with; the live state (typed text, ticks, choices) goes in first
  for (const e of document.body.querySelectorAll('input, textarea, option')) {
    if (e.tagName === 'OPTION') { e.toggleAttribute('selected', e.selected); continue; }
    if (e.type === 'checkbox' || e.type === 'radio') e.toggleAttribute('checked', e.checked);
    else if (e.tagName === 'TEXTAREA') e.textContent = e.value;
    else if (e.type !== 'password') e.setAttribute('value', e.value);
  }
  return document.body.outerHTML;
})()"""
_NUMBERS = re.compile(r' data-kairos-index="\d+"')
_STRIP = re.compile(r"<(script|style|noscript|svg)\b[^>]*>.*?</\1\s*>|<!--.*?-->", re.S | re.I)


async def raw_html(page: Any) -> str:
    """The body's HTML without scripts, styles and comments, cut to :data:`MAX_HTML_CHARS` (the baseline)."""
    try:
        html = str(await page.evaluate(_LIVE_HTML))
    except Exception as e:
        raise BrowserError(f"cannot read the page: {_first_line(e)}") from e
    html = re.sub(r"\s+", " ", _STRIP.sub("", _NUMBERS.sub("", html)))
    if len(html) > MAX_HTML_CHARS:
        html = html[:MAX_HTML_CHARS] + f" … ({len(html) - MAX_HTML_CHARS:,} more characters)"
    return f"Page: {page.url}\n{html}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


__all__ = ["BrowserError", "Element", "Observation", "observe", "raw_html"]
