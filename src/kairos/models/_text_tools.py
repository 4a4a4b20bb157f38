r"""Tool calls that a server left in the reply text, found while the text streams.

Many local servers (llama-cpp-python's own, Ollama with some templates, vLLM without a tool
parser) return a model's tool call as plain text instead of ``tool_calls``. Two shapes cover
nearly all of them:

* a fenced block, ```` ```json ```` or bare ```` ``` ````, holding ``{"name": N, "arguments": {...}}``
  (or ``"parameters"``; or a list of such objects; or several, one after the other);
* Hermes/Qwen tags: ``<tool_call>{"name": N, "arguments": {...}}</tool_call>``.

A block counts only when every call in it names one of the request's tools and has an
``arguments`` (or ``parameters``) object; anything else stays text, exactly as written.
Whitespace around a converted block goes with it (``"On it.\n\n<block>\n"`` leaves ``"On it."``),
except one gap where text goes on after it (``"A: <block> B"`` leaves ``"A: B"``).

``TextToolScanner`` does this incrementally and in linear time: it passes text through, holds
back only what could still open such a block, and decides each block once it is closed (or the
text ends). ``extract_tool_calls`` runs it over a complete text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

FENCE = "```"
TAG_OPEN = "<tool_call>"
TAG_CLOSE = "</tool_call>"
FENCE_LANGUAGES = frozenset({"", "json", "tool_call", "tool_calls"})
"""Info strings of a fence that may hold tool calls (case-insensitive); ```` ```python ```` never does."""
_MAX_FENCE_HEAD = 64
"""A fence's info string longer than this is not one of ours: stop holding the text back."""

_TEXT, _FENCE_HEAD, _FENCE_BODY, _FENCE_PLAIN, _TAG_BODY = range(5)


@dataclass(frozen=True, slots=True)
class TextToolCall:
    """A tool call found in text: a known tool's name and its arguments as a JSON object text."""

    name: str
    arguments: str


Piece = str | TextToolCall


def parse_tool_calls(body: str, tool_names: Iterable[str]) -> list[TextToolCall] | None:
    """The calls spelled by a block's body, or ``None`` if it is not only calls of known tools.

    The body holds one or more JSON values separated by whitespace; each is a call object or a
    list of them. A call object is ``{"name": N, "arguments": {...}}`` (``"parameters"`` also
    accepted; arguments may be a JSON string holding an object, as in the OpenAI wire form, and
    ``{"type": "function", "function": {...}}`` wrappers are unwrapped).
    """
    names = tool_names if isinstance(tool_names, frozenset) else frozenset(tool_names)
    decoder = json.JSONDecoder()
    values: list[Any] = []
    i = _skip_ws(body, 0)
    while i < len(body):
        try:
            value, i = decoder.raw_decode(body, i)
        except (ValueError, RecursionError):
            return None
        values.extend(value if isinstance(value, list) else [value])
        i = _skip_ws(body, i)
    calls = [_call(v, names) for v in values]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _call(value: Any, names: frozenset[str]) -> TextToolCall | None:
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict) and "name" not in value:
        value = value["function"]
    name = value.get("name")
    if not isinstance(name, str) or name not in names:
        return None
    if "arguments" in value:
        arguments = value["arguments"]
    elif "parameters" in value:
        arguments = value["parameters"]
    else:
        return None  # a bare {"name": ...} is too likely to be data, not a call
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return None
    if not isinstance(arguments, dict):
        return None
    return TextToolCall(name, json.dumps(arguments, ensure_ascii=False))


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _partial_suffix(text: str, start: int, markers: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text[start:]`` that is a proper prefix of a marker."""
    longest = max(len(m) for m in markers) - 1
    for k in range(min(longest, len(text) - start), 0, -1):
        tail = text[len(text) - k :]
        if any(m.startswith(tail) for m in markers):
            return k
    return 0


class _Finder:
    """``text.find`` for a few fixed markers over one text, each scanned at most once (linear time)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._next: dict[str, tuple[int, int]] = {}  # marker -> (searched from, found at or -1)

    def find(self, marker: str, start: int) -> int:
        cached = self._next.get(marker)
        if cached is not None and cached[0] <= start and (cached[1] == -1 or cached[1] >= start):
            return cached[1]
        found = self.text.find(marker, start)
        self._next[marker] = (start, found)
        return found


class TextToolScanner:
    """Splits streamed text into text pieces and ``TextToolCall``s (see the module docstring).

    ``feed`` returns what may be shown now; ``finish`` what remains once the text is over.
    Concatenating the text pieces gives the reply without its converted blocks.
    """

    def __init__(self, tool_names: Iterable[str]) -> None:
        self._names = frozenset(tool_names)
        self._state = _TEXT
        self._pending = ""
        """Input not yet consumed: a possible start of a marker, awaiting more text (at most 11 chars)."""
        self._block: list[str] = []
        """The raw text of the candidate block, opener included (shown as text if it is no call)."""
        self._body_at = 0
        """Where the block's body (the JSON) starts in the joined ``_block``."""
        self._body_seen = False
        """The body has shown its first non-blank character (it had to be ``{`` or ``[``)."""
        self._ws = ""
        """Trailing whitespace of the shown text, held back: dropped if a converted block follows."""
        self._skip_ws = False
        """Just after a converted block: the whitespace that follows it goes to ``_after``."""
        self._gap = ""
        """Whitespace dropped before a converted block: put back if more text follows."""
        self._after = ""
        self._shown = False
        self._out: list[Piece] = []

    def feed(self, text: str) -> list[Piece]:
        """Consume the next piece of text; returns the text pieces and calls now decided."""
        text, self._pending = self._pending + text, ""
        finder = _Finder(text)
        i = 0
        while i < len(text):
            i = self._step(text, i, finder)
        return self._take()

    def finish(self) -> list[Piece]:
        """The text is over: decide an unclosed block (a call if its JSON is complete) and flush."""
        rest, self._pending = self._pending, ""
        if self._state in (_FENCE_BODY, _TAG_BODY):
            self._block.append(rest)
            self._close_block()
        elif self._state == _FENCE_HEAD:
            self._block.append(rest)
            self._reject_block()
        else:
            self._show(rest)
        self._state = _TEXT
        if self._ws:
            self._out.append(self._ws)
            self._ws = ""
        return self._take()

    # ---- states ----------------------------------------------------------------------------

    def _step(self, text: str, i: int, finder: _Finder) -> int:
        """Consume ``text`` from ``i`` in the current state; returns where to go on."""
        if self._state == _TEXT:
            return self._in_text(text, i, finder)
        if self._state == _FENCE_HEAD:
            return self._in_fence_head(text, i)
        if self._state == _FENCE_PLAIN:
            return self._until(text, i, finder, FENCE, block=False)
        if self._state == _FENCE_BODY:
            return self._until(text, i, finder, FENCE, block=True)
        return self._until(text, i, finder, TAG_CLOSE, block=True)

    def _in_text(self, text: str, i: int, finder: _Finder) -> int:
        fence, tag = finder.find(FENCE, i), finder.find(TAG_OPEN, i)
        if fence < 0 and tag < 0:
            keep = _partial_suffix(text, i, (FENCE, TAG_OPEN))
            self._show(text[i : len(text) - keep])
            self._pending = text[len(text) - keep :]
            return len(text)
        at, marker = (fence, FENCE) if tag < 0 or 0 <= fence < tag else (tag, TAG_OPEN)
        self._show(text[i:at])
        self._block = [marker]
        self._body_at = len(marker)
        self._body_seen = False
        self._state = _FENCE_HEAD if marker == FENCE else _TAG_BODY
        return at + len(marker)

    def _in_fence_head(self, text: str, i: int) -> int:
        # The info string runs to the end of the line; `{` or `[` also ends it (```json{"name": ...}).
        head_len = sum(map(len, self._block)) - len(FENCE)
        j = i
        while j < len(text) and text[j] not in "\n{[" and head_len + j - i <= _MAX_FENCE_HEAD:
            j += 1
        self._block.append(text[i:j])
        if head_len + j - i > _MAX_FENCE_HEAD:
            self._reject_block(plain_fence=True)
            return j
        if j == len(text):
            return j
        language = "".join(self._block)[len(FENCE) :].strip().lower()
        if text[j] == "\n":
            self._block.append("\n")
            j += 1
        if language not in FENCE_LANGUAGES:
            self._reject_block(plain_fence=True)
            return j
        self._body_at = sum(map(len, self._block))
        self._state = _FENCE_BODY
        return j

    def _until(self, text: str, i: int, finder: _Finder, closer: str, *, block: bool) -> int:
        """Up to and including ``closer``: held in the block, or (a plain code fence) shown."""
        if block and not self._body_seen:
            start = _skip_ws(text, i)
            if start == len(text):
                self._block.append(text[i:])
                return start
            if text[start] not in "{[":
                # Not JSON, so no call: show it; a fence stays open until its closing ```.
                self._block.append(text[i:start])
                self._reject_block(plain_fence=self._state == _FENCE_BODY)
                return start
            self._body_seen = True
        at = finder.find(closer, i)
        if at < 0:
            keep = _partial_suffix(text, i, (closer,))
            piece, self._pending = text[i : len(text) - keep], text[len(text) - keep :]
            if block:
                self._block.append(piece)
            else:
                self._show(piece)
            return len(text)
        end = at + len(closer)
        if not block:
            self._show(text[i:end])
            self._state = _TEXT
            return end
        self._block.append(text[i:at])
        self._close_block(closer)
        return end

    # ---- decisions -----------------------------------------------------------------------

    def _close_block(self, closer: str = "") -> None:
        raw = "".join(self._block)
        calls = parse_tool_calls(raw[self._body_at :], self._names)
        if calls is None:
            self._block = [raw, closer]
            self._reject_block()
            return
        self._block = []
        if not self._skip_ws:  # the first of consecutive blocks: the gap is what preceded it
            self._gap = self._ws
        self._ws = ""
        self._skip_ws = True
        self._out.extend(calls)
        self._state = _TEXT

    def _reject_block(self, *, plain_fence: bool = False) -> None:
        raw, self._block = "".join(self._block), []
        self._show(raw)
        self._state = _FENCE_PLAIN if plain_fence else _TEXT

    def _show(self, text: str) -> None:
        """Text to show, less trailing whitespace (held in ``_ws`` until something follows it)."""
        if self._skip_ws:
            stripped = text.lstrip()
            self._after += text[: len(text) - len(stripped)]
            if not stripped:
                return
            # Text goes on after removed blocks: one gap where they were, none at the start.
            text = (self._gap or self._after) + stripped if self._shown else stripped
            self._skip_ws, self._gap, self._after = False, "", ""
        kept = text.rstrip()
        if not kept:
            self._ws += text
            return
        self._out.append(self._ws + kept)
        self._shown = True
        self._ws = text[len(kept) :]

    def _take(self) -> list[Piece]:
        out, self._out = self._out, []
        merged: list[Piece] = []
        for piece in out:
            if isinstance(piece, str) and merged and isinstance(merged[-1], str):
                merged[-1] += piece
            elif piece != "":
                merged.append(piece)
        return merged


def extract_tool_calls(text: str, tool_names: Iterable[str]) -> tuple[str, list[TextToolCall]]:
    """``text`` without its tool-call blocks, and the calls, for a complete reply text."""
    scanner = TextToolScanner(tool_names)
    pieces = scanner.feed(text) + scanner.finish()
    calls = [p for p in pieces if isinstance(p, TextToolCall)]
    return "".join(p for p in pieces if isinstance(p, str)), calls
