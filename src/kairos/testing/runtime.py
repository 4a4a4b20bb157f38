"""Runtime helpers for tests and benches."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kairos.runtime import Runtime
from kairos.runtime.outbound import AgentFinal


async def gather_answers(
    runtime: Runtime, session_id: str, until: Callable[[list[str]], bool], timeout_s: float = 60.0
) -> list[str]:
    """Final answers published for a session until ``until(answers)`` holds (tests and benches)."""
    answers: list[str] = []
    async with asyncio.timeout(timeout_s):
        async for ev in runtime.bus.subscribe(session_id, after=runtime.bus.last_cursor()):
            if isinstance(ev.payload, AgentFinal):
                answers.append(ev.payload.text)
                if until(answers):
                    return answers
    return answers
