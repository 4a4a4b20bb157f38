"""The command line on a scripted model: what a user sees."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import kairos.models
from kairos.cli import app
from kairos.testing import ScriptedModel, call, reply

runner = CliRunner()


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> ScriptedModel:
    model = ScriptedModel()
    monkeypatch.setattr(kairos.models, "load_model", lambda spec, config=None, **kw: model)
    return model


def test_run_streams_tool_calls_results_trace_and_answer(scripted: ScriptedModel, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    scripted.extend([reply("", call("read_file", {"path": "notes.txt"})), reply("The file has 2 lines.")])
    result = runner.invoke(app, ["run", "--trace", "-w", str(workspace), "How many lines in notes.txt?"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "→ read_file" in out and "← read_file" in out and "lines 1–2 of 2" in out
    assert "[request 0]" in out and "first request" in out and "prefix ok" in out
    assert out.count("The file has 2 lines.") == 1
    assert "session " in out


def test_run_resumes_a_session_and_lists_it(scripted: ScriptedModel, workspace: Path) -> None:
    scripted.extend([reply("first answer"), reply("second answer")])
    first = runner.invoke(app, ["run", "-w", str(workspace), "hello"])
    sid = first.output.split("session ")[1].split()[0]
    second = runner.invoke(app, ["run", "-w", str(workspace), "--session", sid, "again"])
    assert second.exit_code == 0 and "second answer" in second.output
    assert len(scripted.requests[1].messages) > len(scripted.requests[0].messages)
    listing = runner.invoke(app, ["sessions", "-w", str(workspace)])
    # user, skills catalog (appended once, not again on resume), answer, user, answer
    assert sid in listing.output and "5 msgs" in listing.output


def test_unknown_session_is_a_clear_error(scripted: ScriptedModel, workspace: Path) -> None:
    result = runner.invoke(app, ["run", "-w", str(workspace), "--session", "nope", "hi"])
    assert result.exit_code == 1
    assert "no session 'nope'" in result.output


def test_model_failure_exits_nonzero_with_message(scripted: ScriptedModel, workspace: Path) -> None:
    from kairos.errors import ModelUnavailableError

    scripted.extend([ModelUnavailableError("endpoint down after 5 attempts")])
    result = runner.invoke(app, ["run", "-w", str(workspace), "hi"])
    assert result.exit_code == 1 and "endpoint down after 5 attempts" in result.output


def test_bad_config_is_reported(workspace: Path) -> None:
    (workspace / "kairos.toml").write_text('modle = "local"\n')
    result = runner.invoke(app, ["run", "-w", str(workspace), "hi"])
    assert result.exit_code == 1 and "modle" in result.output


def test_unknown_model_spec_says_what_to_use(workspace: Path) -> None:
    result = runner.invoke(app, ["run", "-w", str(workspace), "--model", "gpt-5", "hi"])
    assert result.exit_code == 1 and "openai:NAME" in result.output


def test_bench_list_names_every_benchmark() -> None:
    result = runner.invoke(app, ["bench", "list"])
    for name in ("kv-cache", "overhead", "status-bar", "compression", "injection", "skills"):
        assert name in result.output


def test_chat_keeps_one_session_across_turns(scripted: ScriptedModel, workspace: Path) -> None:
    scripted.extend([reply("hi there"), reply("still here")])
    result = runner.invoke(app, ["chat", "-w", str(workspace)], input="hello\nare you there?\n/exit\n")
    assert result.exit_code == 0, result.output
    assert "hi there" in result.output and "still here" in result.output
    second = scripted.requests[1]
    stored = [m.content for m in second.messages[: second.stable_prefix_len] if "skills_catalog" not in m.content]
    # the status bar stamps user messages with the time: "[YYYY-MM-DD HH:MM:SS] hello"
    assert [text.split("] ", 1)[-1] for text in stored] == ["hello", "hi there", "are you there?"]


def test_bench_rejects_trials_for_a_bench_without_them() -> None:
    result = runner.invoke(app, ["bench", "overhead", "--trials", "3"])
    assert result.exit_code == 1 and "does not take --trials" in result.output
