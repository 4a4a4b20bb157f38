"""``kairos chat`` on the event runtime, as a real subprocess whose model is a loopback OpenAI-compatible server.

stdin is a pipe the test writes to and keeps open, so the chat keeps running between lines: what
it prints without typed input (a timer fired, a notification) is what the runtime brought in.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kairos.context.session import SessionStore
from kairos.testing import trajectory_problems
from tests.models.fake_servers import chat_stream
from tests.support.kairos_cli import KairosProcess
from tests.support.openai_server import OpenAIServer, text_reply, tool_calls_reply
from tests.support.sessions import stored


@pytest.fixture
def model() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@contextlib.contextmanager
def _chat(workspace: Path, model: OpenAIServer, config_dir: Path, logs: Path, *extra: str) -> Iterator[KairosProcess]:
    """A chat reading a pipe the test types into (closed, and the process killed, at the end)."""
    with KairosProcess(
        "chat", "-w", workspace, "--model", "openai:fake-model", "--base-url", model.openai_base_url, *extra,
        config_dir=config_dir, logs=logs, stdin=subprocess.PIPE,
    ) as proc:  # fmt: skip
        try:
            yield proc
        finally:
            _end_input(proc)


def _type(proc: KairosProcess, line: str) -> None:
    stdin = proc.proc.stdin
    assert stdin is not None
    stdin.write(line.encode() + b"\n")
    stdin.flush()


def _end_input(proc: KairosProcess) -> None:
    stdin = proc.proc.stdin
    assert stdin is not None
    with contextlib.suppress(BrokenPipeError):
        stdin.close()


def test_a_timer_wakes_the_chat_and_its_run_is_printed_without_typed_input(
    workspace: Path, model: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    timer = json.dumps({"message": "tell the user the tea is ready", "after_s": 1})
    model.script(
        tool_calls_reply(("c1", "set_timer", timer)),
        text_reply("Timer set for one second."),
        text_reply("Your tea is ready!"),
    )
    with _chat(workspace, model, user_config_dir, logs) as proc:
        _type(proc, "remind me about the tea in a second")
        proc.wait_until("the timer's run", lambda: "Your tea is ready!" in proc.stdout)
        out = proc.stdout
        _end_input(proc)
        assert proc.wait() == 0, proc.stderr
    assert "→ set_timer" in out and "Timer set for one second." in out
    woke = "» timer.trigger: tell the user the tea is ready"  # what woke the agent, before its reply
    assert out.index("Timer set for one second.") < out.index(woke) < out.index("Your tea is ready!")
    assert len(model.requests) == 3
    woken = json.dumps(model.bodies()[2]["messages"])
    assert "tell the user the tea is ready" in woken  # the third request is the timer's, not the user's
    _, messages = stored(workspace)
    assert trajectory_problems(messages) == []


def test_notifications_and_questions_reach_the_terminal_and_a_typed_line_answers(
    workspace: Path, model: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    notify = json.dumps({"message": "the build is done", "priority": "high"})
    ask = json.dumps({"question": "Deploy now?", "options": ["yes", "no"], "timeout_s": 600, "default": "no"})
    model.script(tool_calls_reply(("c1", "notify_user", notify), ("c2", "ask_user", ask)), text_reply("Deploying."))
    with _chat(workspace, model, user_config_dir, logs) as proc:
        _type(proc, "build it")
        proc.wait_until("the question", lambda: "? Deploy now? [yes / no] (question q-" in proc.stdout)
        assert "notification (high): the build is done" in proc.stdout
        _type(proc, "maybe")
        proc.wait_until("the refusal", lambda: "the answer must be one of: yes, no" in proc.stderr)
        _type(proc, "yes")
        proc.wait_until("the answer", lambda: "Deploying." in proc.stdout)
        _end_input(proc)
        assert proc.wait() == 0, proc.stderr
    tool_results = [m["content"] for m in model.bodies()[1]["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 2 and "notified" in tool_results[0]
    assert "The user answered: yes" in tool_results[1]
    assert len(model.requests) == 2  # "maybe" and "yes" answered the question; neither became a message
    _, messages = stored(workspace)
    assert trajectory_problems(messages) == []
    assert not any(m.role == "user" and ("maybe" in m.content or m.content.endswith("yes")) for m in messages)


def test_answer_by_id_and_a_bad_id_is_a_clear_error(
    workspace: Path, model: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    ask = json.dumps({"question": "Which colour?", "timeout_s": 0})
    model.script(tool_calls_reply(("c1", "ask_user", ask)), text_reply("Blue it is."))
    with _chat(workspace, model, user_config_dir, logs) as proc:
        _type(proc, "/help")
        proc.wait_until("the help", lambda: "Ctrl-C stops a running turn" in proc.stdout)
        _type(proc, "paint it")
        proc.wait_until("the question", lambda: "? Which colour? (question q-" in proc.stdout)
        qid = proc.stdout.split("(question ", 1)[1].split(")", 1)[0].split(";")[0]
        _type(proc, "/answer q-nope blue")
        proc.wait_until("the error", lambda: "no question 'q-nope'" in proc.stderr)
        _type(proc, f"/answer {qid} blue")
        proc.wait_until("the answer", lambda: "Blue it is." in proc.stdout)
        _end_input(proc)
        assert proc.wait() == 0, proc.stderr
    assert len(model.requests) == 2  # /help and /answer were commands, not messages
    tool_results = [m["content"] for m in model.bodies()[1]["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 1 and "The user answered: blue" in tool_results[0]


def test_an_unanswered_question_is_closed_with_its_default_and_the_terminal_says_so(
    workspace: Path, model: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    ask = json.dumps({"question": "Deploy now?", "options": ["yes", "no"], "timeout_s": 1, "default": "no"})
    model.script(tool_calls_reply(("c1", "ask_user", ask)), text_reply("Not deploying, then."))
    with _chat(workspace, model, user_config_dir, logs) as proc:
        _type(proc, "build it")
        proc.wait_until("the answer", lambda: "Not deploying, then." in proc.stdout)
        _end_input(proc)
        assert proc.wait() == 0, proc.stderr
        out = proc.stdout
    assert "is expired; the agent uses the default: no" in out
    (result,) = [m["content"] for m in model.bodies()[1]["messages"] if m["role"] == "tool"]
    assert "using the declared default: no" in result


def test_ctrl_c_interrupts_a_run_the_session_stays_valid_and_ctrl_c_at_the_prompt_quits(
    workspace: Path, model: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    model.script(chat_stream({"content": "zebra quokka wombat"}, hold_open=True), text_reply("Back again."))
    with _chat(workspace, model, user_config_dir, logs) as proc:
        _type(proc, "tell me about animals")
        proc.wait_until("the reply is streaming", lambda: "zebra quokka" in proc.stdout)
        proc.send(signal.SIGINT)
        proc.wait_until("the run stopped", lambda: "(interrupted)" in proc.stdout)
        _type(proc, "and now?")
        proc.wait_until("the next answer", lambda: "Back again." in proc.stdout)
        # the chat prints its prompt (piped input: once the session is idle): Ctrl-C there quits
        proc.wait_until("the prompt", lambda: proc.stdout.rstrip().endswith("you>"))
        proc.send(signal.SIGINT)
        assert proc.wait() == 0, proc.stderr
        out, err = proc.stdout, proc.stderr
    assert out.count("zebra quokka") == 1 and "saved." in out
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    _, messages = stored(workspace)
    assert trajectory_problems(messages) == []
    assert [m.content for m in messages if m.role == "assistant"][-1] == "Back again."
    # the second request carried the cut reply that was shown, then the new message
    sent = [m["content"] for m in model.bodies()[1]["messages"] if m["role"] in ("user", "assistant")]
    assert any(c.startswith("zebra quokka") for c in sent) and "and now?" in sent[-1]


@pytest.mark.parametrize(
    ("sig", "code"), [pytest.param(signal.SIGTERM, 143, id="SIGTERM"), pytest.param(signal.SIGHUP, 129, id="SIGHUP")]
)
def test_sigterm_or_sighup_during_a_run_closes_the_session_and_exits_128_plus_the_signal(
    sig: int, code: int, workspace: Path, model: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    model.script(chat_stream({"content": "a long story begins"}, hold_open=True))
    with _chat(workspace, model, user_config_dir, logs) as proc:
        _type(proc, "tell me a story")
        proc.wait_until("the reply is streaming", lambda: "a long story" in proc.stdout)
        proc.send(sig)
        assert proc.wait() == code, proc.stderr
        assert "Traceback" not in proc.stderr and "saved." in proc.stdout
    _, messages = stored(workspace)
    assert trajectory_problems(messages) == []


@pytest.mark.parametrize("how", ["SIGTERM", "kill -9"])
def test_interrupts_of_a_chat_that_ended_abnormally_are_not_replayed_by_the_next_chat(
    how: str, workspace: Path, model: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    """Issue 24 §2: the next ``kairos chat --session`` said "Interrupted before the turn started" at once.

    SIGTERM: the turn does not finish within the grace, so the stopping runtime posts a second
    interrupt and cancels the run. kill -9: the process dies with the first interrupt stored.
    """
    model.script(chat_stream({"content": "a long story begins"}, hold_open=True), text_reply("Hello again."))
    with _chat(workspace, model, user_config_dir, logs) as proc:
        _type(proc, "tell me a story")
        proc.wait_until("the reply is streaming", lambda: "a long story" in proc.stdout)
        proc.send(signal.SIGTERM)  # the turn gets an after_turn interrupt and a grace period to finish
        if how == "kill -9":
            proc.wait_until("the stop interrupt is stored", lambda: _pending_interrupts(workspace) > 0)
            proc.kill()  # within the grace: the interrupt stays in the inbox, unconsumed
        else:
            assert proc.wait() == 143, proc.stderr
            assert _pending_interrupts(workspace) == 0  # they died with the run they were aimed at
    sid, _ = stored(workspace)
    with _chat(workspace, model, user_config_dir, logs, "--session", sid) as proc:
        _type(proc, "hello?")
        proc.wait_until("the answer", lambda: "Hello again." in proc.stdout)
        _end_input(proc)
        assert proc.wait() == 0, proc.stderr
        out = proc.stdout
    assert "Interrupted" not in out and "(interrupted)" not in out
    assert len(model.requests) == 2 and "hello?" in json.dumps(model.bodies()[1]["messages"])
    assert _pending_interrupts(workspace) == 0
    _, messages = stored(workspace)
    assert trajectory_problems(messages) == []


def _pending_interrupts(workspace: Path) -> int:
    """Unconsumed interrupts in the workspace's inbox table."""
    con = sqlite3.connect(workspace / ".kairos" / "kairos.db")
    try:
        sql = "SELECT COUNT(*) FROM inbox WHERE kind = 'interrupt' AND consumed_at IS NULL"
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


def test_an_unknown_session_is_a_clear_error(
    workspace: Path, model: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    with _chat(workspace, model, user_config_dir, logs, "--session", "nope") as proc:
        assert proc.wait() == 1
        assert "no session 'nope'" in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr
    assert model.requests == []


def test_on_a_terminal_approvals_are_typed_answers_and_a_line_typed_during_a_run_joins_it(
    workspace: Path, model: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    """stdin is a pseudo-terminal: the chat reads ahead, so a line typed while a tool runs is queued at once."""
    command = "touch started; while [ ! -f go ]; do sleep 0.02; done; echo released"
    model.script(
        tool_calls_reply(("c1", "bash", json.dumps({"command": command}))), text_reply("Released, and hi to you.")
    )
    (user_config_dir / "config.toml").write_text("[defences]\nconfirm_side_effects = true\n", encoding="utf-8")
    controller, terminal = pty.openpty()
    try:
        with KairosProcess(
            "chat", "-w", workspace, "--model", "openai:fake-model", "--base-url", model.openai_base_url,
            config_dir=user_config_dir, logs=logs, stdin=terminal,
        ) as proc:  # fmt: skip
            os.write(controller, b"run the waiting command\n")
            proc.wait_until("the approval question", lambda: "? Allow bash(" in proc.stdout)
            assert "[approve / deny]" in proc.stdout
            os.write(controller, b"y\n")  # an outbox question (approve / deny); the next line answers, y for approve
            proc.wait_until("the command runs", lambda: (workspace / "started").exists())
            os.write(controller, b"and say hi\n")  # typed while the tool runs: queued for its next safe point
            proc.wait_until("the line was accepted", lambda: _accepted(workspace, "and say hi"))
            ack = "» queued: joins at the next safe point (typed "  # said at once, not only when it joins
            proc.wait_until("the acknowledgement", lambda: ack in proc.stdout)
            (workspace / "go").touch()
            proc.wait_until("the answer", lambda: "Released, and hi to you." in proc.stdout)
            os.write(controller, b"/exit\n")
            assert proc.wait() == 0, proc.stderr
            assert "Fatal Python error" not in proc.stderr and "Traceback" not in proc.stderr
    finally:
        os.close(controller)
        os.close(terminal)
    assert len(model.requests) == 2  # one run: the typed line joined it instead of starting another
    sent = model.bodies()[1]["messages"]
    roles = [m["role"] for m in sent]
    tool_at = roles.index("tool")
    assert "released" in sent[tool_at]["content"]
    assert any(m["role"] == "user" and "and say hi" in m["content"] for m in sent[tool_at + 1 :])
    _, messages = stored(workspace)
    assert trajectory_problems(messages) == []


def _accepted(workspace: Path, text: str) -> bool:
    """Whether an event with ``text`` is in the session's inbox (durably accepted by the runtime)."""
    con = sqlite3.connect(workspace / ".kairos" / "kairos.db")
    try:
        return bool(con.execute("SELECT 1 FROM inbox WHERE record LIKE ?", (f"%{text}%",)).fetchall())
    finally:
        con.close()


def test_a_configuration_error_stops_the_chat_before_it_creates_a_session(
    workspace: Path, model: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    (user_config_dir / "config.toml").write_text('[runtime]\ntoolsets = ["mail"]\n', encoding="utf-8")
    with _chat(workspace, model, user_config_dir, logs) as proc:
        assert proc.wait() != 0
        err = proc.stderr
    assert "no mailbox is configured" in err and "Traceback" not in err
    store = SessionStore(workspace)
    try:
        assert store.trajectories.list_sessions() == []  # no empty session left behind by the failed start
    finally:
        store.close()
