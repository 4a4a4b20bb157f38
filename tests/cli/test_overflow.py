"""A request over the model's window: advice that is true for what does not fit (issue 24 §5).

The error advised "turn on compression", which is on by default, whatever was too big, and ``kairos
run`` then offered to continue a session that fails the same way. Now the advice follows the cause
(the fixed part, one huge message, the history), and the session is offered for continuing only
where continuing can work.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import kairos.models
from kairos.cli import app
from kairos.testing import ScriptedModel, reply

runner = CliRunner()


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> ScriptedModel:
    scripted = ScriptedModel([reply("ok")] * 20, context_window=8192)
    monkeypatch.setattr(kairos.models, "load_model", lambda spec, config=None, **kw: scripted)
    return scripted


def _run(workspace: Path, text: str, *extra: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["run", "-w", str(workspace), *extra, text])
    return result.exit_code, result.stdout, result.stderr


def test_one_huge_message_says_to_put_it_in_a_file(model: ScriptedModel, workspace: Path) -> None:
    code, out, err = _run(workspace, "Look at this log:\n" + "ERROR in module foo at line 42\n" * 1500)
    assert code == 1 and model.requests == []
    assert "Your last message alone needs about" in err and "save it to a file in the workspace" in err
    assert "turn on compression" not in err and "enabled = true" not in err  # it is on
    assert "continue with" not in out  # this session would fail the same way


def test_a_fixed_part_over_the_window_says_larger_window_or_fewer_tools(model: ScriptedModel, workspace: Path) -> None:
    model.context_window = 2048  # under the product's system prompt and tool schemas
    code, out, err = _run(workspace, "hi")
    assert code == 1 and "tool schemas alone need" in err and "fewer tools" in err and "n_ctx" in err
    assert "a new session would not fit either" in err and "continue with" not in out


def _long_chat(model: ScriptedModel, workspace: Path, rounds: int) -> str:
    model.script[:] = [reply("A long answer. " * 300) for _ in range(rounds)]
    code, out, _ = _run(workspace, "question 0")
    sid = out.split("--session ")[1].split(")")[0]
    for i in range(1, rounds):
        code, out, err = _run(workspace, f"question {i}", "--session", sid)
        if code:
            return err
    raise AssertionError("the history never overflowed")


def test_a_long_history_says_new_session_or_larger_window_and_continues_in_a_larger_one(
    model: ScriptedModel, workspace: Path
) -> None:
    err = _long_chat(model, workspace, rounds=12)
    assert "The conversation so far no longer fits, even after compression" in err
    assert "start a new session" in err and "continue this one" in err and "turn on" not in err
    sid = runner.invoke(app, ["sessions", "-w", str(workspace)]).stdout.split()[0]
    model.context_window = 32768  # what the advice says: a larger window, and the same session goes on
    model.script[:] = [reply("fits now")]
    code, out, _ = _run(workspace, "and now?", "--session", sid)
    assert code == 0 and "fits now" in out


def test_with_compression_off_the_advice_says_so(model: ScriptedModel, workspace: Path, user_config_dir: Path) -> None:
    (user_config_dir / "config.toml").write_text("[compression]\nenabled = false\n")
    err = _long_chat(model, workspace, rounds=12)
    assert "compression is off ([compression] enabled = true)" in err
