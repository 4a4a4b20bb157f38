"""``Agent.activity``: background work (user memory) can tell whether a run is in progress and wait for none."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.testing import ScriptedModel, reply


async def test_a_run_makes_the_agent_busy_until_it_ends_even_when_left_early(tmp_path: Path) -> None:
    agent = Agent(ScriptedModel([reply("one"), reply("two")]))
    store = SessionStore(tmp_path)
    session = store.new()
    try:
        idle = asyncio.ensure_future(agent.activity.wait(busy=False))
        busy = asyncio.ensure_future(agent.activity.wait(busy=True))
        await asyncio.sleep(0)
        assert idle.done() and not busy.done()  # idle at once: no run yet
        seen = []
        async for _ in agent.run(session, "hi"):
            seen.append(agent.activity.busy)
        assert seen and all(seen) and busy.done() and not agent.activity.busy
        events = agent.run(session, "again")
        await anext(events)
        assert agent.activity.runs == 1
        await events.aclose()  # type: ignore[attr-defined]  # left early: the run still ends
        assert agent.activity.runs == 0
        await asyncio.wait_for(agent.activity.wait(busy=False), 1)
    finally:
        await session.aclose()
        store.close()
