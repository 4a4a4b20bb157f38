"""The SQLite trajectory store: append-only rows, frozen values, the inbox table, and clear errors
for a database that cannot be used (never replaced or rewritten)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from kairos.context.store import TrajectoryStore
from kairos.errors import StoreError
from kairos.models.types import Message


def test_frozen_values_are_written_once(tmp_path: Path) -> None:
    st = TrajectoryStore(tmp_path / "k.db")
    sid = st.create_session()
    assert st.freeze(sid, "k", "first") == "first"
    assert st.freeze(sid, "k", "second") == "first"
    assert st.frozen(sid, "k") == "first" and st.frozen(sid, "other") is None
    st.close()


def test_inbox_rows_are_pending_until_consumed_with_the_messages_they_became(tmp_path: Path) -> None:
    st = TrajectoryStore(tmp_path / "k.db")
    sid = st.create_session()
    a, _ = st.post_event(sid, "user_input", {"text": "hi", "urgent": False})
    b, _ = st.post_event(sid, "interrupt", {"mode": "immediate", "reason": ""})
    assert (a, b) == (1, 2)
    assert [e.seq for e in st.pending_events(sid)] == [1, 2]
    st.append_messages(sid, 0, [Message.user("hi")], consume=[a])
    assert [e.seq for e in st.pending_events(sid)] == [2]
    st.consume(sid, [b])
    assert st.pending_events(sid) == []
    st.close()


def test_a_failed_append_consumes_nothing(tmp_path: Path) -> None:
    st = TrajectoryStore(tmp_path / "k.db")
    sid = st.create_session()
    seq, _ = st.post_event(sid, "user_input", {"text": "hi", "urgent": False})
    st.append_messages(sid, 0, [Message.user("first")])
    with pytest.raises(sqlite3.IntegrityError):
        st.append_messages(sid, 0, [Message.user("clash")], consume=[seq])  # seq 0 exists: rolled back whole
    assert [e.seq for e in st.pending_events(sid)] == [seq]
    st.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_an_unusable_database_is_a_clear_error_and_is_left_as_it_is(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "kairos.db"
    if damage == "garbage":
        path.write_bytes(b"this is not a database" * 200)
    else:
        st = TrajectoryStore(path)
        sid = st.create_session()
        st.append_messages(sid, 0, [Message.user("x" * 5000) for _ in range(50)])
        st.close()
        for side in ("-wal", "-shm"):
            Path(str(path) + side).unlink(missing_ok=True)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    before = path.read_bytes()
    with pytest.raises(StoreError, match="cannot be used") as info:
        st = TrajectoryStore(path)
        st.list_sessions()  # a truncated file may open, then fail on its first read
        st.load_messages(st.list_sessions()[0].id)
    assert "mv " in str(info.value) and "left as it is" in str(info.value)
    assert path.read_bytes() == before


def test_a_bad_record_is_a_clear_error_naming_the_message(tmp_path: Path) -> None:
    st = TrajectoryStore(tmp_path / "k.db")
    sid = st.create_session()
    st.append_messages(sid, 0, [Message.user("fine")])
    raw = sqlite3.connect(tmp_path / "k.db")
    raw.execute("INSERT INTO messages VALUES (?, 1, 0, ?, NULL)", (sid, json.dumps({"role": "alien"})))
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match=f"message 1 of session {sid}"):
        st.load_messages(sid)
    st.close()


def test_a_file_where_the_state_folder_should_be_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / ".kairos").write_text("not a folder")
    with pytest.raises(StoreError, match="is a file, not a folder"):
        TrajectoryStore(tmp_path / ".kairos" / "kairos.db")


def test_a_database_from_before_traces_moved_to_their_replies_opens_and_keeps_its_traces(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    raw = sqlite3.connect(path)
    raw.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, created_at REAL NOT NULL, title TEXT NOT NULL DEFAULT '',
                               meta TEXT NOT NULL DEFAULT '{}');
        CREATE TABLE messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL, created_at REAL NOT NULL,
                               record TEXT NOT NULL, PRIMARY KEY (session_id, seq));
        CREATE TABLE requests (session_id TEXT NOT NULL, idx INTEGER NOT NULL, record TEXT NOT NULL,
                               PRIMARY KEY (session_id, idx));
        INSERT INTO sessions VALUES ('s1', 0, 'old', '{}');
        INSERT INTO messages VALUES ('s1', 0, 0, '{"role": "user", "content": "hi"}');
        INSERT INTO messages VALUES ('s1', 1, 0, '{"role": "assistant", "content": "hello", "synthetic": false}');
        INSERT INTO requests VALUES ('s1', 0, '{"index": 0}');
        """
    )
    raw.commit()
    raw.close()
    st = TrajectoryStore(path)
    assert [m.content for m in st.load_messages("s1")] == ["hi", "hello"]
    st.append_messages("s1", 2, [Message.user("again"), Message.assistant("yes")], request=(1, {"index": 1}))
    assert st.load_requests("s1") == [{"index": 0}, {"index": 1}] and st.count_requests("s1") == 2
    st.close()


def test_group_commits_from_two_connections_never_reuse_a_seq(tmp_path: Path) -> None:
    # each store remembers the newest seq per session between its group commits; a commit by the
    # other connection (another process in real life) must make it ask the database again
    first, second = TrajectoryStore(tmp_path / "k.db"), TrajectoryStore(tmp_path / "k.db")
    sid = first.create_session("s")
    seqs: list[int] = []
    for i in range(6):
        store = first if i % 3 else second
        done = store.post_events(
            [(sid, "user_input", {"text": f"e{i}"}, None), (sid, "user_input", {"text": "x"}, None)]
        )
        seqs += [d[0] for d in done if d is not None]
        seqs.append(store.post_event(sid, "user_input", {"text": f"single {i}"})[0])
        seqs += [d[0] for d in first.post_events([(sid, "user_input", {"text": "again"}, None)]) if d is not None]
    assert seqs == list(range(1, len(seqs) + 1))
    assert [e.seq for e in second.pending_events(sid)] == seqs
    first.close(), second.close()


def test_a_failed_group_commit_leaves_the_next_seqs_right(tmp_path: Path) -> None:
    store = TrajectoryStore(tmp_path / "k.db")
    sid = store.create_session("s")
    assert [d[0] for d in store.post_events([(sid, "user_input", {"text": "a"}, None)]) if d is not None] == [1]
    with pytest.raises(TypeError):  # a record that is not JSON: nothing of the batch is stored
        store.post_events([(sid, "user_input", {"text": "b"}, None), (sid, "user_input", {"bad": object()}, None)])
    assert [d[0] for d in store.post_events([(sid, "user_input", {"text": "c"}, None)]) if d is not None] == [2]
    assert [e.record["text"] for e in store.pending_events(sid)] == ["a", "c"]
    store.close()
