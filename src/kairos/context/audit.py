"""Prefix audit: is request k a byte-exact prefix of request k+1?

Each request is serialised as a list of canonical strings (system, each tool, each stable
message); the trailing status message is excluded. Only new messages are serialised per
request (see ``MessageMemo``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kairos.models._memo import MessageMemo
from kairos.models.types import Message, ModelRequest


@dataclass(frozen=True, slots=True)
class PrefixAudit:
    """Result of comparing the previous request with the current one."""

    ok: bool
    """True when the previous request (minus its status) is a byte-exact prefix of this one."""
    first_request: bool = False
    diverged_at: str | None = None
    """Where they first differ: ``system``, ``tools[i]`` or ``messages[i]`` (with byte offset)."""
    stable_items: int = 0
    """How many serialised items (system + tools + messages) the previous request had."""
    deliberate: str | None = None
    """Why the prefix was changed on purpose (e.g. ``tools: added fetch``); None for an accident."""

    def describe(self) -> str:
        """One line for the trace."""
        if self.first_request:
            return "first request"
        if self.ok:
            return f"prefix ok ({self.stable_items} items reused)"
        if self.deliberate:
            return f"prefix changed at {self.diverged_at} on purpose ({self.deliberate})"
        return f"PREFIX BROKEN at {self.diverged_at}"


class PrefixAuditor:
    """Remembers the previous request of one session and audits the next."""

    def __init__(self) -> None:
        self._prev_head: list[str] | None = None
        self._head_of: tuple[str, tuple[object, ...], list[str]] | None = None
        """The serialised head of the last (system, tools) seen: the same objects are not serialised again."""
        self._memo: MessageMemo[str] = MessageMemo(Message.serialized)

    def audit(self, request: ModelRequest, deliberate: str | None = None) -> PrefixAudit:
        """Compare ``request`` with the previous one; ``deliberate`` names a change made on purpose."""
        found = self._audit(request)
        if not found.ok and deliberate:
            return PrefixAudit(
                False, diverged_at=found.diverged_at, stable_items=found.stable_items, deliberate=deliberate
            )
        return found

    def _audit(self, request: ModelRequest) -> PrefixAudit:
        cached = self._head_of
        if cached is not None and cached[0] == request.system and cached[1] is request.tools:
            head = cached[2]
        else:
            head = [request.system, *(t.serialized() for t in request.tools)]
            self._head_of = (request.system, request.tools, head)
        prev_head, self._prev_head = self._prev_head, head
        prev_msgs = list(self._memo.values)
        reused = self._memo.update(request.messages[: request.stable_prefix_len])
        if prev_head is None:
            return PrefixAudit(ok=True, first_request=True)
        n_prev = len(prev_head) + len(prev_msgs)
        for i, (a, b) in enumerate(zip(prev_head, head, strict=False)):
            if a != b:
                where = "system" if i == 0 else f"tools[{i - 1}]"
                return PrefixAudit(False, diverged_at=f"{where} byte {_first_diff(a, b)}", stable_items=n_prev)
        if len(prev_head) != len(head):
            return PrefixAudit(False, diverged_at=f"tools[{min(len(prev_head), len(head)) - 1}]", stable_items=n_prev)
        cur_msgs = self._memo.values
        # identical objects serialise identically; compare bytes only past the shared objects
        for i in range(reused, min(len(prev_msgs), len(cur_msgs))):
            if prev_msgs[i] != cur_msgs[i]:
                at = _first_diff(prev_msgs[i], cur_msgs[i])
                return PrefixAudit(False, diverged_at=f"messages[{i}] byte {at}", stable_items=n_prev)
        if len(prev_msgs) > len(cur_msgs):
            return PrefixAudit(False, diverged_at=f"messages[{len(cur_msgs)}] (history shrank)", stable_items=n_prev)
        return PrefixAudit(True, stable_items=n_prev)


def _first_diff(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
