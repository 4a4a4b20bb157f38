"""Pluggable approval of side-effecting tool calls (book ch2 §3.8, Exp 2-5 "full" defence).

An :class:`Approver` decides whether one call may run. Shipped approvers:

- :class:`InteractiveApprover`: asks on the terminal (the CLI's choice when stdin is a TTY);
- :class:`DenyApprover`: refuses everything (non-interactive runs, the benchmark);
- :class:`AllowApprover`: approves everything (trusted automation, tests);
- :class:`CallbackApprover`: delegates to a sync or async function (an API endpoint later).

A denial is not an exception: the defences turn it into a clear error result for the model.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from kairos.security.terminal import safe_for_terminal

ApproverName: TypeAlias = Literal["auto", "interactive", "deny", "allow"]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What the approver is asked about: one concrete call with its arguments."""

    tool: str
    arguments: dict[str, Any]
    call_id: str
    session_id: str
    reason: str = "this tool has side effects"

    def describe(self) -> str:
        """The call as the user is asked about it, safe to print on a terminal.

        Arguments come from the model and may carry escape sequences (from a file it read, say)
        that could clear the screen or rewrite the prompt; they are shown, not obeyed.
        """
        args = json.dumps(self.arguments, ensure_ascii=False)
        if len(args) > 400:
            args = args[:399] + "…"
        return safe_for_terminal(f"{self.tool}({args})")


@dataclass(frozen=True, slots=True)
class Decision:
    """An approver's answer: yes or no, and why (the reason reaches the model on a no)."""

    approved: bool
    reason: str = ""
    by: str = ""
    """Which approver decided (for the security log)."""


class Approver(Protocol):
    """Decides one call. Must not raise for a "no": return ``Decision(False, reason)``."""

    async def decide(self, request: ApprovalRequest) -> Decision:
        """Approve or refuse ``request``."""
        ...


class DenyApprover:
    """Refuses every side-effecting call: nobody is there to confirm it."""

    def __init__(self, reason: str = "no one can confirm it in a non-interactive run") -> None:
        self.reason = reason

    async def decide(self, request: ApprovalRequest) -> Decision:
        """Always no, with :attr:`reason`."""
        return Decision(False, self.reason, by="deny")


class AllowApprover:
    """Approves every call (for trusted automation and tests)."""

    async def decide(self, request: ApprovalRequest) -> Decision:
        """Always yes."""
        return Decision(True, "auto-approved", by="allow")


Callback: TypeAlias = Callable[[ApprovalRequest], "bool | Decision | Awaitable[bool | Decision]"]


class CallbackApprover:
    """Delegates to ``fn`` (sync or async), e.g. a web UI or an HTTP endpoint; errors deny.

    Args:
        fn: answers a request with a ``bool`` or a :class:`Decision`, or an awaitable of one.
        name: who decided, as the security log records it.
    """

    def __init__(self, fn: Callback, *, name: str = "callback") -> None:
        self.fn = fn
        self.name = name

    async def decide(self, request: ApprovalRequest) -> Decision:
        """``fn``'s answer; a ``bool`` becomes a :class:`Decision`, an exception a no."""
        try:
            out = self.fn(request)
            if inspect.isawaitable(out):
                out = await out
        except Exception as e:  # a broken approver must fail closed, never approve
            return Decision(False, f"the approver failed ({type(e).__name__}: {e})", by=self.name)
        if isinstance(out, Decision):
            return out
        return Decision(bool(out), "approved" if out else "the approver said no", by=self.name)


AskFn: TypeAlias = Callable[[str], str]


def _terminal_ask(prompt: str) -> str:
    print(prompt, end="", file=sys.stderr, flush=True)
    return sys.stdin.readline()


@dataclass
class InteractiveApprover:
    """Asks the person at the terminal: ``y`` once, ``a`` always for this tool, anything else no.

    ``ask`` receives the prompt and returns the answer line (blocking; run in a thread). The
    CLI can pass its console's ``input``. Questions are serialised, so concurrent calls never
    interleave their prompts.
    """

    ask: AskFn = _terminal_ask
    always: set[str] = field(default_factory=set)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def decide(self, request: ApprovalRequest) -> Decision:
        """Ask, unless the tool was allowed for the run; no answer (EOF) is a no."""
        if request.tool in self.always:
            return Decision(True, f"always allowed for {request.tool} in this run", by="interactive")
        async with self._lock:
            reason = safe_for_terminal(request.reason)
            prompt = f"\nAllow {request.describe()}? ({reason}) [y]es / [n]o / [a]lways: "
            try:
                answer = await asyncio.to_thread(self.ask, prompt)
            except (EOFError, OSError) as e:
                return Decision(False, f"no answer from the terminal ({type(e).__name__})", by="interactive")
        choice = answer.strip().lower()
        if choice in ("a", "always"):
            self.always.add(request.tool)
            return Decision(True, "the user allowed it for this run", by="interactive")
        if choice in ("y", "yes"):
            return Decision(True, "the user approved it", by="interactive")
        return Decision(False, "the user declined it", by="interactive")


def make_approver(name: ApproverName, *, interactive: bool | None = None) -> Approver:
    """``auto``: ask on a terminal, deny when stdin is not a TTY (CI, pipes, benchmarks)."""
    if name == "allow":
        return AllowApprover()
    if name == "deny":
        return DenyApprover()
    if name == "interactive":
        return InteractiveApprover()
    tty = sys.stdin.isatty() if interactive is None else interactive
    return InteractiveApprover() if tty else DenyApprover()


__all__ = [
    "AllowApprover",
    "ApprovalRequest",
    "Approver",
    "ApproverName",
    "CallbackApprover",
    "Decision",
    "DenyApprover",
    "InteractiveApprover",
    "make_approver",
]
