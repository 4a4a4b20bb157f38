"""Regression tests for issue 8 §5, findings 4-8 and 10-12: crash safety and the seams behind it.

Findings 1, 2, 3, 9 and the configuration part of 11 are in ``test_8_trust.py``. Each test is
named after its finding and reproduces what a new user hit; the process-level ones run the real
``kairos`` command (``tests/support/kairos_cli.py``) against a real loopback OpenAI-compatible
server (``tests/support/openai_server.py``), never a real model.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kairos.agent import Agent
from kairos.agent.events import AgentEvent, FinalAnswer, RunError
from kairos.app import build_agent
from kairos.config import KairosConfig
from kairos.context.session import INTERRUPTED_TOOL_RESULT, Session, SessionStore, early_result_key
from kairos.errors import SessionBusyError
from kairos.models.openai_compat import OpenAICompatModel
from kairos.models.types import Message
from kairos.security.trust import TrustStore
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.tools.base import ToolContext, ToolResult
from kairos.tools.builtins import _grep, files
from kairos.tools.builtins.files import edit_file, grep
from kairos.tools.builtins.shell import bash
from kairos.tools.function import tool
from tests.models.fake_servers import chat_stream, openai_error, tool_fragment
from tests.support.kairos_cli import KairosProcess, kill_quietly, run_kairos, wait_gone
from tests.support.openai_server import OpenAIServer, protocol_problem, text_reply, tool_calls_reply
from tests.support.sessions import frozen_in_db, new_session_id, results, stored

SLOW_TAG = f"60.{os.getpid()}"
SLOW = f"sleep {SLOW_TAG} & echo started > slow.pid; wait"
"""A bash command that blocks for a minute; ``slow.pid`` appears once its ``sleep`` runs. The sleep is
found by its unique argument in ``/proc`` (inside the sandbox ``$!`` is a pid of its own namespace)."""


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as s:
        yield s


@pytest.fixture
def strict_server() -> Iterator[OpenAIServer]:
    with OpenAIServer(strict=True) as s:
        yield s


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path / "logs"


def remote(server: OpenAIServer) -> tuple[str, ...]:
    """The flags that point kairos at ``server`` (flags need no workspace trust)."""
    return ("--model", "openai:fake-model", "--base-url", server.openai_base_url)


def bash_args(command: str) -> str:
    return json.dumps({"command": command})


def sleep_pid(workspace: Path) -> int | None:
    """The pid of the slow command's ``sleep``, once it is running."""
    if not (workspace / "slow.pid").exists():
        return None
    wanted = f"sleep\0{SLOW_TAG}\0".encode()
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                try:
                    if Path(entry.path, "cmdline").read_bytes() == wanted:
                        return int(entry.name)
                except OSError:
                    continue
    return None


def resume_against_strict_server(
    workspace: Path, session_id: str, strict: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    """A later run of the session is accepted by a server that checks the tool-call protocol."""
    strict.script(text_reply("picked up where we left off"))
    code, out, err = run_kairos(
        "run", "-w", workspace, *remote(strict), "--session", session_id, "go on",
        config_dir=user_config_dir, logs=logs,
    )  # fmt: skip
    assert strict.refused == []
    assert code == 0, err
    assert "picked up where we left off" in out


# ---- finding 4: SIGTERM, SIGHUP or kill -9 while a tool runs ----------------------------------


@pytest.mark.parametrize(
    ("sig", "code"), [pytest.param(signal.SIGTERM, 143, id="SIGTERM"), pytest.param(signal.SIGHUP, 129, id="SIGHUP")]
)
def test_finding_4_a_signal_while_a_tool_runs_leaves_a_valid_session(
    sig: int,
    code: int,
    workspace: Path,
    server: OpenAIServer,
    strict_server: OpenAIServer,
    user_config_dir: Path,
    logs: Path,
) -> None:
    """SIGTERM/SIGHUP while `bash` ran left a call without a result; a strict server then refused the session."""
    quick = bash_args("echo quick-done | tee quick.txt")
    server.script(tool_calls_reply(("call_quick", "bash", quick), ("call_slow", "bash", bash_args(SLOW))))
    pid: int | None = None
    try:
        with KairosProcess(
            "run", "-w", workspace, *remote(server), "do two things", config_dir=user_config_dir, logs=logs
        ) as kairos:
            kairos.wait_until("the slow command started", lambda: sleep_pid(workspace) is not None)
            pid = sleep_pid(workspace)
            assert (workspace / "quick.txt").read_text() == "quick-done\n"
            kairos.send(sig)
            assert kairos.wait() == code, kairos.stderr
            assert "Traceback" not in kairos.stderr
        assert pid is not None and wait_gone(pid), "the shell's sleep outlived kairos"
    finally:
        if pid is not None:
            kill_quietly(pid)
    session_id, messages = stored(workspace)
    assert trajectory_problems(messages) == []  # closed by kairos itself, before any resume
    by_id = results(messages)
    assert "quick-done" in by_id["call_quick"]
    # bash has side effects: its placeholder (issue 9 §4) says it may have happened, check before retrying
    assert by_id["call_slow"].startswith("[interrupted:") and "before calling it again" in by_id["call_slow"]
    assert len(server.requests) == 1
    resume_against_strict_server(workspace, session_id, strict_server, user_config_dir, logs)


def test_finding_4_kill_9_while_a_tool_runs_is_repaired_on_resume(
    workspace: Path, server: OpenAIServer, strict_server: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    """kill -9 lost the result of a call that had finished (before an earlier, slower sibling)."""
    write = json.dumps({"path": "quick.txt", "content": "quick-done\n"})
    server.script(tool_calls_reply(("call_slow", "bash", bash_args(SLOW)), ("call_quick", "write_file", write)))
    pid: int | None = None
    try:
        with KairosProcess(
            "run", "-w", workspace, *remote(server), "do two things", config_dir=user_config_dir, logs=logs
        ) as kairos:
            kairos.wait_until("the slow command started", lambda: sleep_pid(workspace) is not None)
            pid = sleep_pid(workspace)
            # the quick result is saved on the side: it finished before the earlier call
            kairos.wait_until(
                "the quick result was saved", lambda: frozen_in_db(workspace, early_result_key("call_quick"))
            )
            kairos.send(signal.SIGKILL)
            assert kairos.wait() == -signal.SIGKILL
        # no code of kairos runs after kill -9: the shell's watchdog takes down what bash started
        assert pid is not None and wait_gone(pid), "the shell's sleep outlived kairos"
    finally:
        if pid is not None:
            kill_quietly(pid)
    session_id, messages = stored(workspace)
    assert trajectory_problems(messages) == ["calls ['call_slow', 'call_quick'] have no result"]
    store = SessionStore(workspace)
    try:
        session = store.resume(session_id)
        try:
            assert trajectory_problems(session.messages) == []
            by_id = results(list(session.messages))
            # bash has side effects: the placeholder (issue 9 §4) warns it may have happened
            assert by_id["call_slow"].startswith("[interrupted:") and "before calling it again" in by_id["call_slow"]
            assert "quick.txt" in by_id["call_quick"] and by_id["call_quick"] != INTERRUPTED_TOOL_RESULT
            assert session.messages[: len(messages)] == tuple(messages)  # repaired by appending only
        finally:
            asyncio.run(session.aclose())
    finally:
        store.close()
    resume_against_strict_server(workspace, session_id, strict_server, user_config_dir, logs)


# ---- finding 5: two processes on one session -------------------------------------------------


def test_finding_5_a_second_process_on_a_busy_session_is_refused(
    workspace: Path, server: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    """Two processes on one session interleaved messages and crashed with an IntegrityError traceback."""
    sid = new_session_id(workspace)
    server.script(tool_calls_reply(("call_slow", "bash", bash_args(SLOW))))
    pid: int | None = None
    try:
        with KairosProcess(
            "run", "-w", workspace, *remote(server), "--session", sid, "first task",
            config_dir=user_config_dir, logs=logs,
        ) as first:  # fmt: skip
            first.wait_until("the first run is in its slow tool", lambda: sleep_pid(workspace) is not None)
            pid = sleep_pid(workspace)
            code, out, err = run_kairos(
                "run", "-w", workspace, *remote(server), "--session", sid, "second task",
                config_dir=user_config_dir, logs=logs,
            )  # fmt: skip
            assert code == 1
            message = " ".join(err.split())
            assert f"session '{sid}' is in use by pid {first.pid} (" in message, err
            assert "Traceback" not in err and "IntegrityError" not in err
            assert len(server.requests) == 1  # the second run never reached the model
            first.send(signal.SIGTERM)
            assert first.wait() == 143, first.stderr
    finally:
        if pid is not None:
            kill_quietly(pid)
    _, messages = stored(workspace)
    assert trajectory_problems(messages) == []
    assert not any("second task" in m.content for m in messages)
    con = sqlite3.connect(workspace / ".kairos" / "kairos.db")
    try:  # not even queued: the refused run posted nothing to the session's inbox
        assert not con.execute("SELECT 1 FROM inbox WHERE record LIKE '%second task%'").fetchall()
    finally:
        con.close()


async def test_finding_5_one_writer_per_session_in_one_process(workspace: Path) -> None:
    """A second writer in the same process is refused too, until the first lets go."""
    store = SessionStore(workspace)
    other = SessionStore(workspace)
    try:
        first = store.new("one writer")
        with pytest.raises(SessionBusyError, match=f"pid {os.getpid()} "):
            store.resume(first.id)
        with pytest.raises(SessionBusyError):
            other.resume(first.id)
        await first.aclose()
        again = other.resume(first.id)
        with pytest.raises(SessionBusyError):
            store.resume(first.id)
        await again.aclose()
        await store.resume(first.id).aclose()
    finally:
        store.close()
        other.close()


# ---- finding 6: duplicate tool-call ids ------------------------------------------------------


async def test_finding_6_duplicate_tool_call_ids_get_one_result_each(session: Session) -> None:
    """A duplicate id lost one result and stored the other twice."""
    seen: list[str] = []

    @tool
    def note(text: str) -> str:
        """Record a note and echo it."""
        seen.append(text)
        return f"noted {text}"

    model = ScriptedModel(
        [
            reply("", call("note", {"text": "a"}, id="dup"), call("note", {"text": "b"}, id="dup")),
            reply("", call("note", {"text": "c"}, id="dup")),  # reuses an id of the earlier reply
            reply("done"),
        ]
    )
    events = [e async for e in Agent(model, tools=[note]).run(session, "take notes")]
    assert isinstance(events[-1], FinalAnswer) and events[-1].text == "done"
    assert sorted(seen) == ["a", "b", "c"]  # each call ran once
    messages = list(session.messages)
    assert trajectory_problems(messages) == []
    calls = [c for m in messages for c in m.tool_calls]
    ids = [c.id for c in calls]
    assert len(set(ids)) == len(ids) == 3
    by_id = results(messages)
    assert len(by_id) == len([m for m in messages if m.role == "tool"]) == 3  # nothing stored twice
    for c in calls:  # and each result is its own call's
        assert by_id[c.id] == f"noted {c.parsed_arguments()['text']}"
    # what the model was shown next is what was stored
    assert [c.id for m in model.requests[-1].messages for c in m.tool_calls] == ids
    assert session.store.load_messages(session.id) == messages


# ---- finding 7: a stream cut without finish_reason / [DONE] ---------------------------------


async def test_finding_7_a_cut_stream_is_an_error_and_its_tool_call_never_runs(
    session: Session, server: OpenAIServer
) -> None:
    """A close-delimited stream cut after a whole tool call was taken as the reply and the call executed."""
    ran: list[str] = []

    @tool
    def delete_everything(path: str) -> str:
        """Delete a folder (for tests: only records the call)."""
        ran.append(path)
        return "deleted"

    fragment = tool_fragment(0, id="call_rm", name="delete_everything", arguments='{"path": "."}')
    server.script(chat_stream(fragment, complete=False))
    model = OpenAICompatModel("fake-model", base_url=server.openai_base_url, api_key="sk-test", backoff_s=0.001)
    try:
        events = [e async for e in Agent(model, tools=[delete_everything]).run(session, "clean up")]
    finally:
        await model.aclose()
    errors = [e for e in events if isinstance(e, RunError)]
    assert len(errors) == 1 and "finish_reason" in errors[0].message
    assert not any(isinstance(e, FinalAnswer) for e in events)
    assert ran == []
    assert [m.role for m in session.messages] == ["user"]  # no half reply
    assert session.store.load_messages(session.id) == list(session.messages)
    assert len(server.requests) == 1  # output had started: not retried, not acted on


# ---- finding 8: the loop guard with the product's defaults ----------------------------------


async def test_finding_8_loop_guard_fires_with_the_default_status_bar(session: Session, workspace: Path) -> None:
    """Timestamps and "Tool call #k" notes made identical results look different: 20 calls ran."""
    (workspace / "a.txt").write_text("x\n")
    model = ScriptedModel([reply("", call("list_dir", {"path": "."})) for _ in range(20)])
    config = KairosConfig()
    assert config.status_bar.enabled and config.status_bar.timestamps and config.status_bar.counters
    agent = build_agent(model, workspace, config)
    events: list[AgentEvent] = [e async for e in agent.run(session, "list the folder")]
    end = events[-1]
    assert isinstance(end, FinalAnswer) and end.stop_reason == "loop_guard", end
    assert len(model.requests) == 4 and len(model.script) == 16
    shown = [m.content for m in session.messages if m.role == "tool"]
    assert len(shown) == 4 and len(set(shown)) == 4  # annotated results differ; the raw ones did not
    assert trajectory_problems(list(session.messages)) == []


# ---- finding 10: bounded work, said what was skipped, full output kept ----------------------


@pytest.fixture
async def ctx(workspace: Path) -> AsyncIterator[ToolContext]:
    c = ToolContext(workspace=workspace, session_id="s-10")
    yield c
    await c.aclose()


def sparse(path: Path, size: int) -> None:
    with path.open("wb") as f:
        f.truncate(size)


async def test_finding_10_edit_file_refuses_a_huge_file_without_reading_it(ctx: ToolContext, workspace: Path) -> None:
    """edit_file on a 200 MB file with a non-matching `old` used 3.1 GB building its hint."""
    sparse(workspace / "huge.log", 200_000_000)
    r: ToolResult = await edit_file.call({"path": "huge.log", "old": "not there", "new": "y"}, ctx)
    assert r.is_error
    assert f"edit_file only edits files up to {files.MAX_EDIT_FILE_BYTES // 1_000_000} MB" in r.content
    assert "sed -i" in r.content  # and what to use instead


async def test_finding_10_grep_names_the_large_files_it_skipped(ctx: ToolContext, workspace: Path) -> None:
    """grep skipped files over 5 MB in silence and answered "no matches"."""
    sparse(workspace / "big.log", _grep.MAX_GREP_FILE_BYTES + 1)
    (workspace / "small.txt").write_text("nothing\n")
    r: ToolResult = await grep.call({"pattern": "needle"}, ctx)
    assert "No matches" in r.content
    assert "[skipped 1 file over 5 MB: big.log; search large files with bash" in r.content


async def test_finding_10_bash_reports_the_true_size_and_keeps_the_whole_output(
    ctx: ToolContext, workspace: Path
) -> None:
    """A long output's note gave a wrong size and the spill file held only the capped 12 KB."""
    expected = b"".join(b"%d\n" % i for i in range(1, 200_001))
    r: ToolResult = await bash.call({"command": "seq 1 200000"}, ctx)
    assert r.metadata["total_bytes"] == len(expected)
    assert f"the output was {len(expected):,} bytes" in r.content and "200,000 lines" in r.content
    spill = workspace / r.metadata["full_output"]
    assert r.metadata["full_output"].startswith(".kairos/spill/") and spill.read_bytes() == expected
    assert len(r.content) < 12_000


# ---- finding 11: clear errors, visible waits, Ctrl-C -----------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def real_database(workspace: Path) -> Path:
    """A kairos.db with a few sessions in it, as kairos left it."""
    store = SessionStore(workspace)
    try:
        for k in range(3):
            session = store.new(f"session {k}")
            session.append(*(Message.user(f"message {i} " + "x" * 1500) for i in range(10)))
            asyncio.run(session.aclose())
    finally:
        store.close()
    return workspace / ".kairos" / "kairos.db"


@pytest.mark.parametrize("damage", ["random bytes", "cut in half"])
def test_finding_11_a_broken_database_is_a_clear_error_and_left_alone(
    damage: str, workspace: Path, server: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    """A corrupt or truncated kairos.db gave a traceback (and must never be silently replaced)."""
    db = real_database(workspace)
    if damage == "random bytes":
        db.write_bytes(os.urandom(64 * 1024))
    else:
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 2])
    before = sha256(db)
    for args in (("run", *remote(server), "hi"), ("sessions",)):
        code, _, err = run_kairos(*args, "-w", workspace, config_dir=user_config_dir, logs=logs)
        message = " ".join(err.split())
        assert code == 1, err
        assert "Traceback" not in err
        assert f"the session database {db} cannot be used" in message
        assert f"mv {db} {db}.broken" in message and "restore it from a backup" in message
        assert sha256(db) == before
    assert server.requests == []


def test_finding_11_a_kairos_file_in_place_of_the_state_folder_is_a_clear_error(
    workspace: Path, server: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    """`.kairos` being a regular file gave a traceback."""
    (workspace / ".kairos").write_text("not a folder")
    code, _, err = run_kairos("run", "-w", workspace, *remote(server), "hi", config_dir=user_config_dir, logs=logs)
    message = " ".join(err.split())
    assert code == 1 and "Traceback" not in err
    assert f"{workspace / '.kairos'} is a file, not a folder" in message and "move or delete it" in message
    assert (workspace / ".kairos").read_text() == "not a folder"


def trusted_remote_config(workspace: Path, server: OpenAIServer, extra: str = "") -> None:
    """A kairos.toml that points at ``server`` with [remote] settings, in a workspace the user trusts."""
    (workspace / "kairos.toml").write_text(
        f'model = "openai:fake-model"\nbase_url = "{server.openai_base_url}"\n{extra}'
    )
    TrustStore().trust(workspace)  # [remote] and base_url from a workspace apply once it is trusted


def test_finding_11_the_overflow_hint_names_real_settings(
    workspace: Path, server: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    """The overflow hint said `--ctx`, which does not exist; the window of `openai:` models could not be set."""
    trusted_remote_config(workspace, server, "max_tokens = 128\n[remote]\ncontext_window = 1024\n")
    code, _, err = run_kairos("run", "-w", workspace, "word " * 2000, config_dir=user_config_dir, logs=logs)
    message = " ".join(err.split())
    assert code == 1 and "Traceback" not in err
    assert "but fake-model allows 896 (1024 window - 128 reserved for the reply)" in message  # the setting applied
    assert "[local] n_ctx" in message and "[remote] context_window" in message and "--ctx" not in message
    assert server.requests == []


def test_finding_11_a_rate_limit_wait_is_visible_and_retries_are_configurable(
    workspace: Path, server: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    """A 429 made kairos wait in silence; the retry settings could not be changed."""
    trusted_remote_config(workspace, server, "[remote]\nmax_retries = 1\nbackoff_s = 0\n")
    server.script(openai_error(429, "slow down", {"Retry-After": "1"}), text_reply("the answer"))
    code, out, err = run_kairos("run", "-w", workspace, "hi", config_dir=user_config_dir, logs=logs)
    assert code == 0, err
    message = " ".join(err.split())
    assert "HTTP 429" in message and "retrying in 1 s (attempt 2 of 2)" in message
    assert out.count("the answer") == 1 and len(server.requests) == 2
    # max_retries = 1 from kairos.toml: two attempts, then a clear error
    server.script(openai_error(503, "busy"), openai_error(503, "busy"), text_reply("never asked for"))
    code, out, err = run_kairos("run", "-w", workspace, "again", config_dir=user_config_dir, logs=logs)
    message = " ".join(err.split())
    assert code == 1 and "Traceback" not in err
    assert "is unavailable after 2 attempt(s)" in message and "HTTP 503" in message
    assert len(server.requests) == 4


def test_finding_11_ctrl_c_while_streaming_exits_130_and_prints_the_text_once(
    workspace: Path, server: OpenAIServer, user_config_dir: Path, logs: Path
) -> None:
    """Ctrl-C printed the partial answer a second time."""
    # the leak guard holds back the last word while a reply streams: "wombat" is not shown yet
    server.script(chat_stream({"content": "zebra quokka wombat"}, hold_open=True))
    with KairosProcess("run", "-w", workspace, *remote(server), "hi", config_dir=user_config_dir, logs=logs) as kairos:
        kairos.wait_until("the reply is streaming", lambda: "zebra quokka" in kairos.stdout)
        kairos.send(signal.SIGINT)
        assert kairos.wait() == 130, kairos.stderr
        out, err = kairos.stdout, kairos.stderr
    assert out.count("zebra quokka") == 1, out
    assert "(interrupted)" in out and "Traceback" not in err and "KeyboardInterrupt" not in err
    _, messages = stored(workspace)
    (partial,) = [m.content for m in messages if m.role == "assistant"]
    assert partial.startswith("zebra quokka")  # what was shown is kept in the session
    assert trajectory_problems(messages) == []


# ---- finding 12: tool calls a server writes as text ------------------------------------------


async def test_finding_12_a_fenced_json_tool_call_runs_end_to_end(session: Session, server: OpenAIServer) -> None:
    """llama-cpp-python's server answered with a fenced JSON block instead of a tool call.

    The same path against that real server over the bundled model is the model-marked test
    ``tests/models/test_llama_server.py``; this one needs no model: a loopback server sends
    what that server sent.
    """
    asked: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather of a city."""
        asked.append(city)
        return f"{city}: 14 °C, light rain"

    fenced = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'
    server.script(chat_stream(*({"content": piece} for piece in fenced.split(" "))), text_reply("Rainy, 14 °C."))
    model = OpenAICompatModel("fake-model", base_url=server.openai_base_url, api_key="sk-test", backoff_s=0.001)
    try:
        events = [e async for e in Agent(model, tools=[get_weather]).run(session, "Weather in Paris?")]
    finally:
        await model.aclose()
    assert asked == ["Paris"]
    end = events[-1]
    assert isinstance(end, FinalAnswer) and end.text == "Rainy, 14 °C."
    (assistant,) = [m for m in session.messages if m.tool_calls]
    assert [c.name for c in assistant.tool_calls] == ["get_weather"] and "get_weather" not in assistant.content
    assert results(list(session.messages)) == {assistant.tool_calls[0].id: "Paris: 14 °C, light rain"}
    # the call and its result went back to the server as a proper pair
    sent = server.requests[1].body
    assert protocol_problem(sent) is None
    (sent_call,) = [c for m in sent["messages"] for c in m.get("tool_calls") or []]
    (sent_result,) = [m for m in sent["messages"] if m["role"] == "tool"]
    assert sent_result["tool_call_id"] == sent_call["id"] and sent_call["function"]["name"] == "get_weather"


def test_finding_4_the_strict_fake_server_refuses_what_strict_servers_refuse() -> None:
    """The check behind finding 4's resumed run: an open call, a doubled result and a stray result."""
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function"}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    user = {"role": "user", "content": "hi"}
    assert protocol_problem({"messages": [user, call, result, user]}) is None
    assert "c1" in str(protocol_problem({"messages": [user, call, user]}))
    assert "c1" in str(protocol_problem({"messages": [user, call, result, result]}))
    assert protocol_problem({"messages": [user, result]}) is not None
