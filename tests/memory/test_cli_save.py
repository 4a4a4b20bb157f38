"""``kairos run`` does not wait for user memory; ``kairos memory save`` saves what is left (issue 24)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kairos.cli import app
from tests.support.openai_server import OpenAIServer, text_reply, tool_calls_reply

runner = CliRunner()


@pytest.fixture
def server(user_config_dir: Path) -> Iterator[OpenAIServer]:
    with OpenAIServer() as model:
        (user_config_dir / "config.toml").write_text(
            f'model = "openai:fake-model"\nbase_url = "{model.openai_base_url}"\n'
            '[memory]\nenabled = true\nuser = "alice"\nscrub_timeout_s = 0\nsession_notes = false\n'
            '[knowledge]\nembedder = "hash"\n'
        )
        yield model


def test_run_exits_without_waiting_and_memory_save_saves_the_session(workspace: Path, server: OpenAIServer) -> None:
    server.script(text_reply("Noted: you play the cello."))
    result = runner.invoke(app, ["run", "-w", str(workspace), "I play the cello."])
    assert result.exit_code == 0, result.output
    assert "memory: 1 session not saved yet" in result.output and "kairos memory save" in result.output
    assert len(server.requests) == 1  # the answer only: no extraction held the exit back

    shown = runner.invoke(app, ["memory", "show", "-w", str(workspace)]).output
    assert "no memories yet" in shown and "not saved yet: session" in shown

    ops = {"operations": [{"op": "add", "content": "Plays the cello", "kind": "semantic", "category": "fact"}]}
    server.script(tool_calls_reply(("c1", "save_memories", json.dumps(ops))))
    result = runner.invoke(app, ["memory", "save", "-w", str(workspace)])
    assert result.exit_code == 0, result.output
    assert ": 1 memories stored, 0 refused" in result.output and "saved 1 session" in result.output
    shown = runner.invoke(app, ["memory", "show", "-w", str(workspace)]).output
    assert "Plays the cello" in shown and "not saved yet" not in shown
    assert runner.invoke(app, ["memory", "save", "-w", str(workspace)]).output.strip() == "nothing to save"


def test_memory_save_says_memory_is_off(workspace: Path, user_config_dir: Path) -> None:
    result = runner.invoke(app, ["memory", "save", "-w", str(workspace)])
    assert result.exit_code == 1 and "memory is off" in result.output and "enabled = true" in result.output
