"""What the runner does at a safe point: the inbox drained into the trajectory, the ``turn_start`` hook.

At a safe point the trajectory is valid (every tool call has its result), so pending events can be
appended as messages (one transaction with their consumption) and a pending interrupt honoured.
A failed append puts the events back: nothing posted is ever lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from kairos.agent._state import RunState, event_message, mark_batch
from kairos.agent.events import Activity, AgentEvent
from kairos.context.inbox import Interrupt, Posted
from kairos.context.session import Session
from kairos.models.types import Message

_SHOW_WAIT_S = 0.25
"""A wait shorter than this is not worth an ``Activity`` (it would only flicker)."""


@dataclass
class Drained:
    """What one drain found."""

    appended: int = 0
    stop: Interrupt | None = None
    """An interrupt that ends the run at this safe point."""
    after_turn: bool = False
    """An ``after_turn`` interrupt: end the run when the model answers."""


def drain(st: RunState, *, at_start: bool = False, hold: bool = False, direct: Posted | None = None) -> Drained:
    """Append messages for pending events (one transaction with their consumption).

    The inbox sorts what waits by the interrupt rules (:meth:`~kairos.context.inbox.Inbox.drain`).
    ``direct`` is the run's own input, not stored in the inbox (nothing was pending when the
    run began): it comes first and is persisted by the append itself.
    """
    session = st.live
    pipeline = st.agent.pipeline
    found = session.inbox.drain(at_start=at_start, hold=hold, direct_input=direct is not None)
    out = Drained(stop=found.stop, after_turn=found.after_turn)
    if not found.taken and direct is None:
        return out
    messages: list[Message] = []
    consumed: list[int] = []
    created: list[float] = []  # each message is stamped with the time its event was posted (typed)
    if direct is not None:
        message = event_message(direct.event)
        assert message is not None
        messages.append(pipeline.on_input(st, message, st.report))
        created.append(direct.posted_at)
    batch: list[Message] = []
    kinds: list[str] = []
    for p in found.deliver:
        message = event_message(p.event)
        if message is None:
            found.control.append(p.seq)
            continue
        batch.append(pipeline.on_input(st, message, st.report))
        kinds.append(p.event.kind)
        consumed.append(p.seq)
        created.append(p.posted_at)
    messages.extend(mark_batch(batch, kinds))
    try:
        session.append(*messages, consume=consumed, created=created)
    except BaseException:
        _put_back(session, found.taken)  # nothing of it was stored: it all waits for the next try
        raise
    _put_back(session, found.held)
    session.consume(found.control)  # an interrupt kept after a failure here is honoured again: harmless
    out.appended = len(messages)
    return out


def drain_control(session: Session) -> None:
    """Consume pending interrupts (they were honoured); other events stay queued."""
    session.consume_interrupts()


def ends_run(session: Session) -> bool:
    """After a preemption: whether an immediate interrupt ends the run (it is consumed then)."""
    if session.inbox.interrupt_pending():
        drain_control(session)
        return True
    return False


async def turn_start(st: RunState) -> AsyncGenerator[AgentEvent, None]:
    """The ``turn_start`` safe point; ``Activity("memory")`` when a memory plugin makes it wait.

    Recalling memories can take seconds (an embedding model, a search); a quick recall shows nothing.
    """
    pipeline = st.agent.pipeline
    hook = pipeline.at_safe_point(st, "turn_start", st.append_from("turn_start"), st.report)
    if not any(p.stage == "memory" for p in pipeline.hooked["at_safe_point"]):
        await hook
        return
    task = asyncio.ensure_future(hook)
    try:
        done, _ = await asyncio.wait({task}, timeout=_SHOW_WAIT_S)
        if not done:
            yield Activity("memory")
        await task
    finally:
        if not task.done():  # the run was cancelled or closed meanwhile
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _put_back(session: Session, posted: list[Posted]) -> None:
    """Return events to the front of the inbox (a failed append must not lose them)."""
    if posted:
        session.inbox.put_back(posted)
