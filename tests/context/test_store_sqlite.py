"""What only the SQLite trajectory store does: clear errors for a file that cannot be used (never
replaced or rewritten) and files of older releases. The backend-agnostic behaviour is in
``test_store_conformance.py``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from kairos.context.store_sqlite import SqliteTrajectoryStore
from kairos.errors import StoreError
from kairos.models.types import Message


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_an_unusable_database_is_a_clear_error_and_is_left_as_it_is(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "kairos.db"
    if damage == "garbage":
        path.write_bytes(b"this is not a database" * 200)
    else:
        st = SqliteTrajectoryStore(path)
        sid = st.create_session()
        st.append_messages(sid, 0, [Message.user("x" * 5000) for _ in range(50)])
        st.close()
        for side in ("-wal", "-shm"):
            Path(str(path) + side).unlink(missing_ok=True)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    before = path.read_bytes()
    with pytest.raises(StoreError, match="cannot be used") as info:
        st = SqliteTrajectoryStore(path)
        st.list_sessions()  # a truncated file may open, then fail on its first read
        st.load_messages(st.list_sessions()[0].id)
    assert "mv " in str(info.value) and "left as it is" in str(info.value)
    assert path.read_bytes() == before


def test_a_bad_record_is_a_clear_error_naming_the_message(tmp_path: Path) -> None:
    st = SqliteTrajectoryStore(tmp_path / "k.db")
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
        SqliteTrajectoryStore(tmp_path / ".kairos" / "kairos.db")


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
    st = SqliteTrajectoryStore(path)
    assert [m.content for m in st.load_messages("s1")] == ["hi", "hello"]
    st.append_messages("s1", 2, [Message.user("again"), Message.assistant("yes")], request=(1, {"index": 1}))
    assert st.load_requests("s1") == [{"index": 0}, {"index": 1}] and st.count_requests("s1") == 2
    st.close()
