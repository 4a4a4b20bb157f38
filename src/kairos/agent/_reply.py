"""A model reply on its way into the trajectory: reply guards, unique tool-call ids."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kairos.agent.plugin import ReplyGuard
from kairos.models.types import Message


def fed(guards: Sequence[ReplyGuard] | None, text: str) -> str:
    if guards is None:  # a guard plugin failed to start: show nothing until the reply is replaced
        return ""
    for g in guards:
        text = g.feed(text)
    return text


def guarded_reply(reply: Message, guards: Sequence[ReplyGuard] | None, shown: bool) -> tuple[Message, str]:
    """The reply to store and the held-back tail to show, after every guard finished."""
    if guards is None:
        text = "[reply withheld: a reply check could not run]"
        return dataclasses.replace(reply, content=text, raw=None, tool_calls=()), text
    tail = ""
    for g in guards:
        tail = g.feed(tail) + g.finish()
    replacement = next((g.replacement for g in guards if g.replacement is not None), None)
    if replacement is None:
        return reply, tail
    # the raw text must not be re-rendered either
    return dataclasses.replace(reply, content=replacement, raw=None), ("\n" if shown else "") + replacement


def unique_ids(reply: Message, used: set[str]) -> Message:
    """Give every tool call an id not used before in the session (a duplicate would lose a result)."""
    if not reply.tool_calls:
        return reply
    calls = []
    changed = False
    for c in reply.tool_calls:
        cid = c.id or "call"
        if cid in used:
            n = 2
            while f"{cid}_{n}" in used:
                n += 1
            cid = f"{cid}_{n}"
        if cid != c.id:
            changed = True
            c = dataclasses.replace(c, id=cid)
        used.add(cid)
        calls.append(c)
    return dataclasses.replace(reply, tool_calls=tuple(calls)) if changed else reply
