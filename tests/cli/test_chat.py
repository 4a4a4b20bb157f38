"""``kairos chat`` in process on the scripted model: what it says about a line typed while the agent works."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kairos.agent import Agent
from kairos.cli._chat import Chat
from kairos.context.session import SessionStore
from kairos.runtime import Runtime
from kairos.testing import reply
from tests.support.models import ReadsItsPrompt


async def test_a_line_typed_while_the_model_reads_is_acknowledged_at_once_and_joins_the_running_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24 §2: the line was echoed bare, and joined the session only when the user pressed Ctrl-C."""
    model = ReadsItsPrompt([reply("Salut !")])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        sid = rt.create_session("chat")
        chat = Chat(rt, sid, trace=False, interactive=True)
        rt.agent_listeners.append(chat.on_agent_event)
        assert await chat.handle("say hi")
        assert "queued" not in capsys.readouterr().out  # nothing ran yet: the line starts the turn, no notice
        await asyncio.wait_for(model.reading.wait(), 10)
        assert rt.busy(sid)
        assert await chat.handle("in French, please")
        said = capsys.readouterr().out
        assert "» queued: joins at the next safe point (typed " in said
        await rt.wait_idle(sid, 10)
        assert "Salut !" in capsys.readouterr().out
        messages = rt.store.trajectories.load_messages(sid)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "say hi"),
        ("user", "in French, please"),
        ("assistant", "Salut !"),
    ]
    assert len(model.requests) == 2  # one turn: the reading request was made again with the line
