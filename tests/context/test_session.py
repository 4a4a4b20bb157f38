"""Sessions: append-only persistence, one writer (the lease), repair of a cut turn on resume."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kairos.context.lease import SessionLease
from kairos.context.session import INTERRUPTED_TOOL_RESULT, SessionStore, early_result_key, open_calls
from kairos.errors import SessionBusyError, SessionNotFoundError, StoreConflictError
from kairos.models.types import Message, ToolCall
from kairos.testing import trajectory_problems


def cut_turn(store: SessionStore) -> str:
    """A session whose last reply asked for two tools and got one result (a crash mid-tools)."""
    s = store.new()
    calls = (ToolCall("a", "bash", '{"command": "sleep 1"}'), ToolCall("b", "bash", '{"command": "echo hi"}'))
    s.append(Message.user("go"), Message.assistant("", calls), Message.tool("a", "done a", "bash"))
    s.freeze(early_result_key("b"), "hi")  # b finished before a crash and was saved on the side
    s.lease.release() if s.lease else None
    return s.id


def test_open_calls_finds_the_unanswered_calls_of_the_last_reply() -> None:
    calls = (ToolCall("a", "t", "{}"), ToolCall("b", "t", "{}"))
    assert open_calls([Message.user("x"), Message.assistant("", calls)]) == [("a", "t"), ("b", "t")]
    assert open_calls([Message.user("x"), Message.assistant("", calls), Message.tool("b", "r")]) == [("a", "t")]
    assert open_calls([Message.user("x"), Message.assistant("done")]) == []


async def test_resume_closes_a_cut_turn_with_saved_results_and_placeholders(store: SessionStore) -> None:
    sid = cut_turn(store)
    resumed = store.resume(sid)
    assert trajectory_problems(resumed.messages) == []
    results = {m.tool_call_id: m.content for m in resumed.messages if m.role == "tool"}
    assert results == {"a": "done a", "b": "hi"}
    await resumed.aclose()
    # the repair was appended and persisted: resuming again adds nothing
    again = store.resume(sid)
    assert len(again.messages) == 4
    await again.aclose()


async def test_resume_without_a_saved_result_gets_the_placeholder(store: SessionStore) -> None:
    s = store.new()
    s.append(Message.user("go"), Message.assistant("", (ToolCall("x", "t", "{}"),)))
    await s.aclose()
    resumed = store.resume(s.id)
    assert resumed.messages[-1].content == INTERRUPTED_TOOL_RESULT and resumed.messages[-1].tool_call_id == "x"
    await resumed.aclose()


async def test_one_writer_per_session_in_one_process(store: SessionStore) -> None:
    first = store.new("t")
    with pytest.raises(SessionBusyError, match=f"session '{first.id}' is in use by pid {os.getpid()}"):
        store.resume(first.id)
    other = SessionStore(store.workspace)  # a second store in the same process is refused too
    with pytest.raises(SessionBusyError):
        other.resume(first.id)
    await first.aclose()
    second = other.resume(first.id)  # given back: now it opens
    await second.aclose()
    other.close()


def test_a_released_session_leaves_no_lock_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    holder = SessionLease(tmp_path / "locks", "s1")
    holder.acquire()
    assert holder.path is not None and holder.path.exists()
    holder.release()
    assert not holder.path.exists()  # lock files do not pile up, one per session ever

    # a taker that opened the file just before the holder deleted it must not keep the deleted inode
    holder.acquire()
    real_flock = fcntl.flock

    def holder_lets_go_first(fd: int, op: int) -> None:
        monkeypatch.setattr(fcntl, "flock", real_flock)
        holder.release()
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", holder_lets_go_first)
    taker = SessionLease(tmp_path / "locks", "s1")
    taker.acquire()
    assert os.fstat(taker._fd).st_ino == os.stat(holder.path).st_ino  # type: ignore[arg-type]
    with pytest.raises(SessionBusyError):  # and so it excludes the next taker
        SessionLease(tmp_path / "locks", "s1").acquire()
    taker.release()


def test_one_writer_per_session_across_processes(store: SessionStore, workspace: Path) -> None:
    sid = store.new().id
    store.close()
    holder = textwrap.dedent(
        f"""
        import sys, time
        from kairos.context.session import SessionStore
        s = SessionStore({str(workspace)!r}).resume({sid!r})
        print("held", flush=True)
        sys.stdin.readline()
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
        other = SessionStore(workspace)
        with pytest.raises(SessionBusyError, match=f"pid {proc.pid}"):
            other.resume(sid)
        proc.kill()  # the kernel drops the lock of a killed holder: the session is free again
        proc.wait(10)
        other.resume(sid).lease.release()  # type: ignore[union-attr]
        other.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def test_an_unknown_session_is_a_clear_error(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError, match="no session 'nope'"):
        store.resume("nope")


async def test_appends_are_persisted_before_they_are_visible(store: SessionStore) -> None:
    s = store.new()
    s.append(Message.user("a"), Message.assistant("b"))
    assert [m.content for m in store.trajectories.load_messages(s.id)] == ["a", "b"]
    # append-only: an existing position cannot be written again
    with pytest.raises(StoreConflictError, match="already has a message at seq 0"):
        store.trajectories.append_messages(s.id, 0, [Message.user("overwrite")])
    assert [m.content for m in s.messages] == ["a", "b"]
    await s.aclose()


async def test_closing_runs_closers_last_first_and_releases_the_lease(store: SessionStore) -> None:
    s = store.new()
    order: list[str] = []

    async def one() -> None:
        order.append("one")

    async def two() -> None:
        order.append("two")

    s.on_close(one)
    s.on_close(two)
    await s.aclose()
    await s.aclose()  # idempotent
    assert order == ["two", "one"]
    store.resume(s.id).lease.release()  # type: ignore[union-attr]


async def test_a_child_session_shares_the_store_and_holds_its_own_lease(store: SessionStore) -> None:
    parent = store.new()
    child = parent.spawn("child", {"parent_session": parent.id})
    assert child.store is parent.store and child.workspace == parent.workspace
    assert store.trajectories.session_meta(child.id) == {"parent_session": parent.id}
    with pytest.raises(SessionBusyError):
        store.resume(child.id)
    await child.aclose()
    await parent.aclose()
