"""The ``parallel`` strategy (book ch6 §3.2): a question answered in a side session at once.

The main session keeps working; the side session answers from the question alone, the answer goes
to the session's stream, and the exchange is logged in the main session ("executed in parallel") at
its next safe point, so the agent knows what was said on its behalf.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kairos.agent.events import FinalAnswer, RunError
from kairos.context.inbox import ParallelExchange
from kairos.runtime.events import Event
from kairos.runtime.handle import RUNTIME_RESOURCE, RuntimeHandle
from kairos.runtime.outbound import ParallelAnswer, ParallelStarted
from kairos.runtime.records import agent_record

if TYPE_CHECKING:
    from kairos.runtime.runtime import Runtime

log = logging.getLogger("kairos.runtime")


async def answer_in_parallel(runtime: Runtime, session_id: str, event: Event) -> None:
    """Answer ``event`` in a side session now; log the exchange in the main one."""
    side = runtime.store.new(f"parallel: {event.content[:60]}", {"parallel_of": session_id})
    side.tool_context.put(RUNTIME_RESOURCE, RuntimeHandle(runtime, side.id))
    runtime.publish(session_id, ParallelStarted(question=event.content, side_session=side.id))
    answer = ""
    try:
        async for ev in runtime.agent.run(side, event.content):
            payload = agent_record(ev)
            if payload is not None:
                runtime.publish(side.id, payload)
            if isinstance(ev, FinalAnswer):
                answer = ev.text
            elif isinstance(ev, RunError):
                answer = f"(the side session failed: {ev.message})"
    except Exception as e:
        log.exception("parallel answer failed")
        answer = f"(the side session failed: {e})"
    finally:
        await side.aclose()
    runtime.publish(session_id, ParallelAnswer(question=event.content, answer=answer, side_session=side.id))
    runtime.post(session_id, ParallelExchange(event.content, answer, side.id))
