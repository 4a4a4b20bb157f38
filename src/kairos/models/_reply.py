"""Streaming parser for the local model's grammar-shaped JSON replies.

Turns the reply, as it is generated, into deltas: the final answer's text without JSON syntax,
and tool calls as soon as their name (then their arguments) are complete.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from kairos.models.types import TextDelta, ToolCall, ToolCallDelta

FINAL_ANSWER = "final_answer"

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


@dataclass(slots=True)
class _Frame:
    kind: str  # "{" or "["
    is_call: bool = False
    is_args: bool = False
    expect_key: bool = True
    key: str | None = None
    name: str | None = None
    index: int = -1
    args_start: int = -1
    args_text: str = ""


class ReplyScanner:
    """Follows the (grammar-shaped) JSON reply as it is generated, to stream deltas.

    Emits the final answer's text as decoded ``TextDelta``s (no JSON syntax), a ``ToolCallDelta``
    with id and name as soon as a call's name is complete, and one with the exact arguments text
    when the call closes. ``calls`` keeps (id, name, arguments) for the final message;
    ``answer`` the final answer's text so far (what is left of a reply cut off by ``max_tokens``).
    """

    def __init__(self) -> None:
        self.buf: list[str] = []
        self.stack: list[_Frame] = []
        self.calls: list[tuple[str, str, str]] = []
        self.answering = False  # the reply is a final answer (its name has been read)
        self._answer: list[str] = []
        self._str: list[str] | None = None  # decoded chars of the open string
        self._str_is_key = False
        self._stream_text = False
        self._esc: str | None = None  # "" after a backslash, hex digits after \u
        self._high: int | None = None  # pending high surrogate

    def feed(self, text: str) -> list[TextDelta | ToolCallDelta]:
        out: list[TextDelta | ToolCallDelta] = []
        deltas: list[str] = []
        for ch in text:
            pos = len(self.buf)
            self.buf.append(ch)
            if self._str is not None:
                self._string_char(ch, deltas, out)
            else:
                self._struct_char(ch, pos, out)
        if deltas:
            self._answer.extend(deltas)
            out.insert(0, TextDelta("".join(deltas)))
        return out

    @property
    def answer(self) -> str:
        """The final answer's decoded text read so far."""
        return "".join(self._answer)

    def _emit(self, s: str, deltas: list[str]) -> None:
        assert self._str is not None
        self._str.append(s)
        if self._stream_text:
            deltas.append(s)

    def _string_char(self, ch: str, deltas: list[str], out: list[TextDelta | ToolCallDelta]) -> None:
        if self._esc is None:
            if ch == "\\":
                self._esc = ""
            elif ch == '"':
                self._close_string(out)
            else:
                self._emit(ch, deltas)
        elif self._esc == "":
            if ch == "u":
                self._esc = "u"
            else:
                self._esc = None
                self._emit(_ESCAPES.get(ch, ch), deltas)
        else:
            self._esc += ch
            if len(self._esc) == 5:
                code = int(self._esc[1:], 16)
                self._esc = None
                if 0xD800 <= code < 0xDC00:
                    self._high = code
                elif 0xDC00 <= code < 0xE000 and self._high is not None:
                    self._emit(chr(0x10000 + ((self._high - 0xD800) << 10) + (code - 0xDC00)), deltas)
                    self._high = None
                else:
                    self._emit(chr(code), deltas)

    def _close_string(self, out: list[TextDelta | ToolCallDelta]) -> None:
        assert self._str is not None
        value = "".join(self._str)
        self._str = None
        frame = self.stack[-1] if self.stack else None
        if frame is None or frame.kind != "{":
            return
        if self._str_is_key:
            frame.key = value
        elif frame.is_call and frame.key == "name":
            frame.name = value
            self.answering = self.answering or (value == FINAL_ANSWER and len(self.stack) == 1)
            if value != FINAL_ANSWER:
                frame.index = len(self.calls)
                self.calls.append((f"call_{secrets.token_hex(6)}", value, ""))
                out.append(ToolCallDelta(frame.index, id=self.calls[-1][0], name=value))

    def _struct_char(self, ch: str, pos: int, out: list[TextDelta | ToolCallDelta]) -> None:
        parent = self.stack[-1] if self.stack else None
        if ch in "{[":
            frame = _Frame(ch)
            wrapper = self.stack[0] if len(self.stack) == 2 else None
            if ch == "{" and (parent is None or (wrapper is not None and wrapper.key == "tool_calls")):
                frame.is_call = True  # the root object (final answer or wrapper) or an entry of tool_calls
            if parent is not None and parent.is_call and parent.key == "arguments":
                frame.is_args = True
                parent.args_start = pos
            self.stack.append(frame)
        elif ch in "}]" and parent is not None:
            self.stack.pop()
            if parent.is_args and self.stack:
                call = self.stack[-1]
                call.args_text = "".join(self.buf[call.args_start : pos + 1])
            if parent.is_call and parent.index >= 0:
                cid, name, _ = self.calls[parent.index]
                self.calls[parent.index] = (cid, name, parent.args_text)
                out.append(ToolCallDelta(parent.index, arguments=parent.args_text))
        elif ch == '"':
            self._str = []
            self._str_is_key = parent is not None and parent.kind == "{" and parent.expect_key
            in_args = parent is not None and parent.is_args and len(self.stack) > 1
            final = in_args and self.stack[-2].name == FINAL_ANSWER
            self._stream_text = final and not self._str_is_key and parent is not None and parent.key == "text"
        elif ch == ":" and parent is not None:
            parent.expect_key = False
        elif ch == "," and parent is not None and parent.kind == "{":
            parent.expect_key = True


def parse_reply(raw: str, scanner: ReplyScanner) -> tuple[str, tuple[ToolCall, ...]] | None:
    """(final text, tool calls) of a complete reply, or None when ``raw`` is not a reply."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if value.get("name") == FINAL_ANSWER and isinstance(value.get("arguments"), dict):
        return str(value["arguments"].get("text", "")), ()
    items = value.get("tool_calls")
    if not isinstance(items, list) or not all(isinstance(it, dict) for it in items):
        return None
    if [c[1] for c in scanner.calls] == [it.get("name") for it in items] and all(c[2] for c in scanner.calls):
        return "", tuple(ToolCall(i, n, a) for i, n, a in scanner.calls)  # same ids as the stream deltas
    calls = (
        ToolCall(f"call_{secrets.token_hex(6)}", str(it.get("name")), json.dumps(it.get("arguments", {})))
        for it in items
    )
    return "", tuple(calls)


LOOP_SPAN = 96
"""Tokens a reply must repeat back to back (at least three times over) before :func:`repeating` says so."""


def repeating(ids: list[int], span: int = LOOP_SPAN, max_period: int = 200) -> bool:
    """Whether the reply ends in a loop: its last ``max(span, 3 × period)`` tokens are one run repeated.

    Measured with the bundled model on memory-eval: one extraction wrote "tetanus booster, flu shot, "
    until the 1,500-token limit (four minutes of a 2-core CPU), another the same 150-token operation four
    times. Stopping there is what ``max_tokens`` would do minutes later, with the same text.
    """
    n, last = len(ids), ids[-1] if ids else None
    for period in range(1, min(max_period, n // 3) + 1):
        if ids[-1 - period] != last:
            continue
        window = max(span, 3 * period)
        if window > n:
            return False  # longer periods need even longer windows
        if ids[n - window + period :] == ids[n - window : n - period]:
            return True
    return False
