"""The collaboration toolset: ``request_approval``, ``request_input`` and ``notify`` (issue 10 §2).

A question to the human always carries a timeout and a declared default, so an agent never hangs
on someone who is away, and what happens then was chosen in advance (for an approval, "deny"
unless the model declares otherwise). Who answers:

1. a :class:`Human` put in ``ctx.put(HUMAN_RESOURCE, …)`` (a front end, a test);
2. under the runtime (``kairos serve``/``kairos chat``), its outbox: the runtime's ``Outbox`` *is*
   a :class:`Human` (``wait_answer``), so the question shows in ``GET /v1/questions`` and the chat,
   exactly like ``ask_user`` — no second queue;
3. otherwise the terminal (:class:`TerminalHuman`); with no terminal (a pipe, CI) the default is
   used at once and the result says nobody could be asked.

``notify`` sends over the channels of the user's ``[[notify.channels]]`` (:mod:`.notify`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from kairos.errors import KairosError
from kairos.tools.base import RUNTIME_RESOURCE, Resource, Tool, ToolContext, ToolResult
from kairos.tools.function import make_tool
from kairos.tools.toolsets.config import NotifyConfig
from kairos.tools.toolsets.notify import NotifyError, send

HUMAN_RESOURCE: Resource[Human] = Resource("kairos.human")
"""The :class:`Human` that answers (overrides the runtime's outbox and the terminal)."""
MAX_WAIT_S = 86_400.0


@runtime_checkable
class Human(Protocol):
    """Someone who answers a question or, after ``timeout_s``, lets the default stand.

    The runtime's ``Outbox`` implements it; so does :class:`TerminalHuman`.
    """

    async def wait_answer(
        self, session: str, question: str, *, options: Sequence[str] = (), timeout_s: float = 300, default: str = ""
    ) -> tuple[str, bool]:
        """``(answer, True)`` from the human, or ``(default, False)`` when nobody answered in time."""
        ...


def _terminal_ask(prompt: str) -> str:
    print(prompt, end="", file=sys.stderr, flush=True)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line


@dataclass
class TerminalHuman:
    """Asks on the terminal (stderr, then a line of stdin); no terminal means the default at once.

    A read that outlives its timeout cannot be interrupted (a thread blocked in ``readline``); the
    next question waits on that same read instead of starting a second one, so lines are never lost
    or answered twice.
    """

    ask: Callable[[str], str] = _terminal_ask
    interactive: bool | None = None
    """None: whether stdin is a TTY."""
    _pending: asyncio.Future[str] | None = field(default=None, repr=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def wait_answer(
        self, session: str, question: str, *, options: Sequence[str] = (), timeout_s: float = 300, default: str = ""
    ) -> tuple[str, bool]:
        """The typed answer (one of ``options`` when given), or ``(default, False)`` on timeout, EOF or no TTY."""
        tty = sys.stdin.isatty() if self.interactive is None else self.interactive
        if not tty:
            return default, False
        choices = f" [{'/'.join(options)}]" if options else ""
        prompt = f"\n{question}{choices} (no answer in {timeout_s:g} s: {default or 'nothing'}) > "
        async with self._lock:
            if self._pending is None or self._pending.done():
                self._pending = asyncio.ensure_future(asyncio.to_thread(self.ask, prompt))
            else:
                print(prompt, end="", file=sys.stderr, flush=True)
            try:
                async with asyncio.timeout(timeout_s):
                    line = await asyncio.shield(self._pending)
            except (TimeoutError, EOFError, OSError):
                return default, False
            self._pending = None
        answer = line.strip()
        if options:
            match = next((o for o in options if o.casefold() == answer.casefold()), None)
            return (match, True) if match else (default, False)
        return (answer, True) if answer else (default, False)


def _human(ctx: ToolContext, fallback: Human) -> tuple[Human, str, str]:
    """Who answers for this session, the session id to ask in, and a name for the result."""
    given = ctx.get(HUMAN_RESOURCE)
    if given is not None:
        return given, ctx.session_id, "the user"
    handle = ctx.get(RUNTIME_RESOURCE)
    outbox = handle.service(Human) if handle is not None else None  # type: ignore[type-abstract]  # a Protocol
    if handle is not None and outbox is not None:
        return outbox, handle.session_id, "the user (through the outbox)"
    return fallback, ctx.session_id, "the user at the terminal"


def _check_wait(timeout_s: float) -> str | None:
    if not 1 <= timeout_s <= MAX_WAIT_S:
        return f"timeout_s must be between 1 and {MAX_WAIT_S:g} seconds (it is {timeout_s:g})"
    return None


def collaboration_tools(config: NotifyConfig | None = None, *, human: Human | None = None) -> list[Tool]:
    """``request_approval`` and ``request_input``, plus ``notify`` when ``[[notify.channels]]`` lists any.

    Args:
        config: the notification channels (user config ``[notify]``).
        human: who answers outside the runtime (default: :class:`TerminalHuman`).
    """
    fallback: Human = human if human is not None else TerminalHuman()
    cfg = config or NotifyConfig()

    async def request_approval(
        question: str, default: Literal["deny", "approve"] = "deny", timeout_s: float = 300, *, ctx: ToolContext
    ) -> ToolResult:
        """Ask the human to approve or deny something before you do it (e.g. spending money, deleting data,
        sending a message on their behalf). Waits up to `timeout_s` seconds; if nobody answers, `default` is
        used — keep it "deny" unless doing it is clearly safe. Returns JSON {"approved", "answer", "by"} where
        "by" is "user" or "default". Do not ask for routine steps you are allowed to take; never treat a
        default as the user's approval when you report back.
        Example: request_approval(question="Delete the 3 draft invoices?", default="deny", timeout_s=600).

        Args:
            question: what you want to do and why, in one or two sentences the user can answer yes or no.
            default: what happens when nobody answers in time: "deny" (safe) or "approve".
            timeout_s: how long to wait for an answer, 1 to 86400 seconds.
        """
        if problem := _check_wait(timeout_s):
            return ToolResult(f"Not asked: {problem}.", is_error=True)
        who, session, name = _human(ctx, fallback)
        try:
            answer, by_user = await who.wait_answer(
                session, question, options=("approve", "deny"), timeout_s=timeout_s, default=default
            )
        except (ValueError, KairosError) as e:
            return ToolResult(f"Not asked: {e}. Treat it as denied.", is_error=True)
        out: dict[str, Any] = {
            "approved": answer == "approve",
            "answer": answer,
            "by": "user" if by_user else "default",
        }
        if not by_user:
            out["note"] = f"{name} gave no answer within {timeout_s:g} s; the declared default {default!r} applies"
        return ToolResult(json.dumps(out), metadata={"answered_by": out["by"]})

    async def request_input(question: str, default: str, timeout_s: float = 300, *, ctx: ToolContext) -> ToolResult:
        """Ask the human for information only they have (a preference, a missing detail, a choice between
        options) and wait for a free-text answer. If nobody answers within `timeout_s` seconds, `default` is
        used: declare a conservative one you can safely proceed with. Returns JSON {"answer", "by"} where "by" is
        "user" or "default". Do not ask what you can find out yourself with other tools.
        Example: request_input(question="Which branch should I deploy?", default="staging", timeout_s=300).

        Args:
            question: the question, short and specific.
            default: the answer to use when nobody answers in time (required).
            timeout_s: how long to wait for an answer, 1 to 86400 seconds.
        """
        if problem := _check_wait(timeout_s):
            return ToolResult(f"Not asked: {problem}.", is_error=True)
        if not default.strip():
            return ToolResult("Not asked: declare a default, the answer used when nobody replies.", is_error=True)
        who, session, name = _human(ctx, fallback)
        try:
            answer, by_user = await who.wait_answer(session, question, timeout_s=timeout_s, default=default)
        except (ValueError, KairosError) as e:
            return ToolResult(f"Not asked: {e}.", is_error=True)
        out: dict[str, Any] = {"answer": answer, "by": "user" if by_user else "default"}
        if not by_user:
            out["note"] = f"{name} gave no answer within {timeout_s:g} s; using the declared default"
        return ToolResult(json.dumps(out, ensure_ascii=False), metadata={"answered_by": out["by"]})

    tools: list[Tool] = [
        make_tool(request_approval, timeout_s=MAX_WAIT_S + 60),  # its own timeout ends it first
        make_tool(request_input, timeout_s=MAX_WAIT_S + 60),
    ]
    if cfg.channels:
        tools.append(_notify_tool(cfg))
    return tools


def _notify_tool(cfg: NotifyConfig) -> Tool:
    kinds = {"smtp": "email", "webhook": "webhook"}
    listing = ", ".join(f"{c.name} ({kinds[c.kind]})" for c in cfg.channels)
    first = cfg.channels[0].name

    async def notify(channel: str, message: str, subject: str = "", *, ctx: ToolContext) -> ToolResult:
        """Send the user a notification over a configured channel (email or webhook) and return at once.
        Use it for something the user must learn even when away: a finished long job, a failure that needs them.
        Cannot reach anyone else (recipients are fixed by the user's configuration) and does not wait for a
        reply (use request_input for that). Channels: {channels}.
        Example: notify(channel="{first}", message="The nightly backup failed: disk full.", subject="Backup failed").

        Args:
            channel: the name of a configured channel.
            message: the text to send (plain text, up to 20000 characters).
            subject: a short subject line (email) or title (webhook); optional.
        """
        chan = cfg.channel(channel)
        if chan is None:
            return ToolResult(f"No channel {channel!r}; the configured channels are: {listing}.", is_error=True)
        try:
            receipt = await send(chan, message, subject=subject, session=ctx.session_id)
        except NotifyError as e:
            return ToolResult(f"Not sent over {channel!r}: {e}.", is_error=True)
        return ToolResult(f"Notification {receipt}.", metadata={"channel": chan.name, "kind": chan.kind})

    notify.__doc__ = (notify.__doc__ or "").replace("{channels}", listing).replace("{first}", first)
    return make_tool(notify, side_effects=True, timeout_s=max(c.timeout_s for c in cfg.channels) + 30)


__all__ = ["HUMAN_RESOURCE", "MAX_WAIT_S", "Human", "TerminalHuman", "collaboration_tools"]
