"""What each model request sent, kept so that the context inspector can lay any request out again.

A request is system (static part, deployment part), tools and messages, most of it identical to the
request before (that is the point of a stable prefix). :class:`PromptLayout` records each request as a
delta of the previous one: content digests of its parts, the number of leading messages it shares with
the previous request, and the texts of parts this session has not stored before. The record rides in the
request's trace row (one transaction with the reply), so storage grows with new content, not with
requests × prompt length. :func:`expand` replays the deltas to rebuild request ``i`` and ``i - 1``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kairos.models.types import AllBut, ModelRequest

LAYOUT_KEY = "layout"
"""The key of the layout delta in a request's trace record."""


def digest(text: str) -> str:
    """The short content key of a part (also how plugins' added messages are named)."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def describe_tool_choice(choice: object) -> str:
    """``auto``, ``none``, ``required``, ``only: a, b`` or ``all but: x`` (for the trace and the inspector)."""
    if isinstance(choice, tuple):
        return "only: " + ", ".join(map(str, choice))
    if isinstance(choice, AllBut):
        return "all but: " + ", ".join(sorted(choice.names))
    return str(choice)


class PromptLayout:
    """One session's previous request, remembered to record the next as a delta."""

    def __init__(self) -> None:
        self._known: set[str] = set()
        self._tools: list[str] | None = None
        self._messages: list[str] = []

    def _ref(self, text: str, new: dict[str, str]) -> str:
        d = digest(text)
        if d not in self._known:
            self._known.add(d)
            new[d] = text
        return d

    def record(self, request: ModelRequest, added: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        """The delta record of ``request``; ``added``: what plugins appended at safe points since the last one.

        A process that resumes a session starts with nothing remembered: its first record stores every
        text again (correct, a little larger), never a reference to a text it cannot prove was stored.
        """
        new: dict[str, str] = {}
        system = [self._ref(request.system_static, new), self._ref(request.system_deployment, new)]
        tools = [self._ref(t.serialized(), new) for t in request.tools]
        messages = [self._ref(m.serialized(), new) for m in request.messages]
        keep = 0
        for a, b in zip(self._messages, messages, strict=False):
            if a != b:
                break
            keep += 1
        out: dict[str, Any] = {
            "system": system,
            "tools": None if tools == self._tools else tools,
            "keep": keep,
            "add": messages[keep:],
            "stable": len(request.messages) if request.stable_prefix_len is None else request.stable_prefix_len,
            "texts": new,
        }
        if added:
            out["added"] = list(added)
        self._tools, self._messages = tools, messages
        return out


@dataclass(frozen=True, slots=True)
class Prompt:
    """A request laid out again: texts in order (messages as their canonical JSON records)."""

    system_static: str
    system_deployment: str
    tools: tuple[str, ...]
    messages: tuple[str, ...]
    stable: int
    """How many of ``messages`` are the stable prefix (the rest is the trailing status)."""
    added: tuple[dict[str, Any], ...] = ()


class LayoutMissingError(LookupError):
    """The request was recorded before layouts were kept (or its record is damaged)."""


def expand(records: Sequence[dict[str, Any]], index: int) -> tuple[Prompt, Prompt | None]:
    """Request ``index`` of a session and the one before it, from the session's request records.

    Raises:
        LayoutMissingError: a record up to ``index`` has no layout, or refers to a text never stored.
        IndexError: no request ``index``.
    """
    if not 0 <= index < len(records):
        raise IndexError(index)
    texts: dict[str, str] = {}
    tools: list[str] = []
    messages: list[str] = []
    previous: Prompt | None = None
    current: Prompt | None = None
    for i in range(index + 1):  # replayed from the first: dictionary updates per request, cheap
        layout = records[i].get(LAYOUT_KEY)
        if not isinstance(layout, dict):  # recorded by an older release: the next process stores it all again
            tools, messages, current = [], [], None
            continue
        texts.update(layout.get("texts") or {})
        if layout.get("tools") is not None:
            tools = list(layout["tools"])
        messages = messages[: int(layout.get("keep", 0))] + list(layout.get("add") or [])
        try:
            prompt = Prompt(
                texts[layout["system"][0]], texts[layout["system"][1]], tuple(texts[d] for d in tools),
                tuple(texts[d] for d in messages), int(layout.get("stable", len(messages))),
                tuple(layout.get("added") or ()),
            )  # fmt: skip
        except (KeyError, IndexError, TypeError):  # a damaged record: this request cannot be laid out
            previous, current = current, None
            continue
        previous, current = current, prompt
    if current is None:
        raise LayoutMissingError(f"request {index} was recorded without its layout (an older release made it)")
    return current, previous


_WHERE = re.compile(r"^(system|tools\[(\d+)\]|messages\[(\d+)\])(?: byte (\d+))?")


def divergence_point(diverged_at: str | None) -> tuple[str, int, int] | None:
    """``("system"|"tool"|"message", item, byte)`` parsed from a prefix audit's ``diverged_at``."""
    if not diverged_at:
        return None
    m = _WHERE.match(diverged_at)
    if m is None:
        return None
    byte = int(m.group(4) or 0)
    if m.group(1) == "system":
        return "system", 0, byte
    if m.group(2) is not None:
        return "tool", int(m.group(2)), byte
    return "message", int(m.group(3)), byte


__all__ = [
    "LAYOUT_KEY",
    "LayoutMissingError",
    "Prompt",
    "PromptLayout",
    "describe_tool_choice",
    "digest",
    "divergence_point",
    "expand",
]
