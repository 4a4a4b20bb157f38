"""One conformance suite for :class:`~kairos.context.store.TrajectoryStore`, run against every backend.

``sqlite`` is the embedded :class:`SqliteTrajectoryStore` on a file; ``postgres`` is
:class:`PostgresTrajectoryStore` on a real PostgreSQL on loopback (skipped with the install hint when
the server or psycopg is missing). ``backend.open()`` is another connection to the same data — what
a second process would have. The crash cases run a writer in a child process and ``kill -9`` it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kairos.context.store import TrajectoryStore, open_trajectory_store
from kairos.errors import SessionBusyError, StoreConflictError
from kairos.models.types import Message

WAIT_S = 15.0
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Backend:
    name: str
    target: str
    """What :func:`open_trajectory_store` opens: a file path or a ``postgresql://`` URL."""
    opened: list[TrajectoryStore] = field(default_factory=list)

    def open(self) -> TrajectoryStore:
        store = open_trajectory_store(self.target)
        self.opened.append(store)
        return store


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    sqlite = request.param == "sqlite"
    target = str(tmp_path / "kairos.db") if sqlite else request.getfixturevalue("postgres_url")
    backend = Backend(request.param, target)
    try:
        yield backend
    finally:
        for store in backend.opened:
            store.close()


@pytest.fixture
def store(backend: Backend) -> TrajectoryStore:
    return backend.open()


def _texts(store: TrajectoryStore, sid: str) -> list[str]:
    return [str(m.content) for m in store.load_messages(sid)]


def _child(backend: Backend, body: str) -> subprocess.Popen[str]:
    """A Python child that opens the store as ``store`` and runs ``body`` (its stdout is a pipe)."""
    code = textwrap.dedent(f"""
        import sys
        from kairos.context.store import open_trajectory_store
        from kairos.models.types import Message
        store = open_trajectory_store({backend.target!r})
    """) + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)


def _reap(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(WAIT_S)
    if proc.stdout is not None:
        proc.stdout.close()


def _wait_for_line(proc: subprocess.Popen[str], expected: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()  # the child prints at once; a dead child gives ""
    assert line == expected, f"child said {line!r} (exit {proc.poll()})"


# -- sessions, messages, requests -----------------------------------------------------------


def test_sessions_are_created_listed_renamed_and_described(store: TrajectoryStore) -> None:
    first = store.create_session("first", {"user": "ada"})
    time.sleep(0.01)  # created_at orders the list
    second = store.create_session(session_id="chosen-id", history=[Message.user("a"), Message.assistant("b")])
    assert second == "chosen-id" and store.has_session(first) and not store.has_session("nope")
    assert [s.id for s in store.list_sessions()] == [second, first]
    assert [s.id for s in store.list_sessions(limit=1)] == [second]
    assert store.session_meta(first) == {"user": "ada"} and store.session_meta("nope") == {}
    info = store.session_info(second)
    assert info is not None and (info.title, info.messages) == ("", 2)
    assert store.session_info("nope") is None
    assert store.set_title(second, "renamed") and not store.set_title("nope", "x")
    assert store.session_info(second).title == "renamed"  # type: ignore[union-attr]
    assert _texts(store, second) == ["a", "b"]


def test_appends_keep_their_order_and_their_request_records(backend: Backend, store: TrajectoryStore) -> None:
    sid = store.create_session()
    store.append_messages(sid, 0, [Message.user("q1")])
    store.append_messages(sid, 1, [Message.assistant("a1")], request=(0, {"index": 0}))
    store.append_messages(sid, 2, [Message.user("q2"), Message.assistant("a2")], request=(1, {"index": 1}))
    store.append_messages(sid, 4, [], request=(2, {"index": 2, "failed": True}))  # a request with no reply
    other = backend.open()  # what another process reads
    assert _texts(other, sid) == ["q1", "a1", "q2", "a2"]
    assert sorted(r["index"] for r in other.load_requests(sid)) == [0, 1, 2]
    assert other.count_requests(sid) == 3 and other.session_info(sid).messages == 4  # type: ignore[union-attr]


def test_an_unknown_session_cannot_be_loaded(store: TrajectoryStore) -> None:
    from kairos.errors import SessionNotFoundError

    with pytest.raises(SessionNotFoundError):
        store.load_messages("nope")


def test_a_taken_seq_is_a_conflict_and_the_failed_append_consumes_nothing(store: TrajectoryStore) -> None:
    sid = store.create_session()
    seq, _ = store.post_event(sid, "user_input", {"text": "hi", "urgent": False})
    store.append_messages(sid, 0, [Message.user("first")])
    with pytest.raises(StoreConflictError, match="already has a message at seq 0"):
        store.append_messages(sid, 0, [Message.user("clash")], consume=[seq], request=(0, {"index": 0}))
    assert [e.seq for e in store.pending_events(sid)] == [seq]
    assert _texts(store, sid) == ["first"] and store.count_requests(sid) == 0


# -- frozen values --------------------------------------------------------------------------


def test_frozen_values_are_written_once_across_connections(backend: Backend, store: TrajectoryStore) -> None:
    sid = store.create_session()
    assert store.freeze(sid, "k", "first") == "first"
    assert backend.open().freeze(sid, "k", "second") == "first"
    assert store.frozen(sid, "k") == "first" and store.frozen(sid, "other") is None
    store.freeze(sid, "kairos.summary.1", "s1")
    store.freeze(sid, "kairos.summary.2", "s2 ✓")
    assert store.frozen_items(sid, "kairos.summary.") == {"kairos.summary.1": "s1", "kairos.summary.2": "s2 ✓"}


# -- inbox ----------------------------------------------------------------------------------


def test_inbox_rows_are_pending_until_consumed_with_the_messages_they_became(store: TrajectoryStore) -> None:
    sid = store.create_session()
    a, _ = store.post_event(sid, "user_input", {"text": "hi", "urgent": False})
    b, _ = store.post_event(sid, "interrupt", {"mode": "immediate", "reason": ""})
    assert (a, b) == (1, 2)
    assert [e.seq for e in store.pending_events(sid)] == [1, 2]
    assert store.sessions_with_pending() == [sid]
    store.append_messages(sid, 0, [Message.user("hi")], consume=[a])
    assert [e.seq for e in store.pending_events(sid)] == [2]
    assert store.sessions_with_pending() == []  # an interrupt alone does not count
    store.consume(sid, [b])
    assert store.pending_events(sid) == []


def test_group_commits_from_two_connections_never_reuse_a_seq(backend: Backend) -> None:
    first, second = backend.open(), backend.open()
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


def test_concurrent_posters_never_collide(backend: Backend) -> None:
    sid = backend.open().create_session()
    stores = [backend.open() for _ in range(4)]
    errors: list[BaseException] = []

    def post(store: TrajectoryStore, n: int) -> None:
        try:
            for i in range(20):
                store.post_events([(sid, "user_input", {"text": f"{n}.{i}"}, None)])
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=post, args=(s, n)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert not errors
    assert [e.seq for e in stores[0].pending_events(sid)] == list(range(1, 81))


def test_a_failed_group_commit_leaves_the_next_seqs_right(store: TrajectoryStore) -> None:
    sid = store.create_session("s")
    assert [d[0] for d in store.post_events([(sid, "user_input", {"text": "a"}, None)]) if d is not None] == [1]
    with pytest.raises(TypeError):  # a record that is not JSON: nothing of the batch is stored
        store.post_events([(sid, "user_input", {"text": "b"}, None), (sid, "user_input", {"bad": object()}, None)])
    assert [d[0] for d in store.post_events([(sid, "user_input", {"text": "c"}, None)]) if d is not None] == [2]
    assert [e.record["text"] for e in store.pending_events(sid)] == ["a", "c"]


def test_a_duplicate_delivery_is_stored_and_consumed_once(backend: Backend, store: TrajectoryStore) -> None:
    sid = store.create_session()
    record = {"source": "webhook", "text": "paid", "urgent": False, "guidance": ""}
    first = store.post_events([(sid, "external", record, "hook-1"), (sid, "external", record, "hook-1")])
    assert first[0] is not None and first[1] is None  # twice in one batch: once
    assert backend.open().post_events([(sid, "external", record, "hook-1")]) == [None]  # redelivered: a no-op
    assert store.posted_record("hook-1") == record and store.posted_record("other") is None
    pending = store.pending_events(sid)
    assert [e.seq for e in pending] == [first[0][0]]
    store.append_messages(sid, 0, [Message.user("paid")], consume=[pending[0].seq])
    assert store.post_events([(sid, "external", record, "hook-1")]) == [None]  # after consumption too
    assert store.pending_events(sid) == [] and _texts(store, sid) == ["paid"]


# -- a second writer and crashes --------------------------------------------------------------


def test_two_writers_racing_for_one_place_leave_one_append_and_one_consumption(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    sid = a.create_session()
    a.append_messages(sid, 0, [Message.user("before")])
    seq, _ = a.post_event(sid, "user_input", {"text": "go", "urgent": False})
    outcomes: dict[str, str] = {}
    start = threading.Barrier(2)

    def write(store: TrajectoryStore, name: str) -> None:
        start.wait(WAIT_S)
        try:
            store.append_messages(sid, 1, [Message.user("go"), Message.assistant(f"by {name}")], consume=[seq])
            outcomes[name] = "ok"
        except StoreConflictError:
            outcomes[name] = "conflict"

    threads = [threading.Thread(target=write, args=(s, n)) for s, n in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert sorted(outcomes.values()) == ["conflict", "ok"]
    winner = next(n for n, o in outcomes.items() if o == "ok")
    assert _texts(b, sid) == ["before", "go", f"by {winner}"] and b.pending_events(sid) == []


def test_one_lease_per_session_across_stores_and_it_dies_with_its_holder(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    sid = a.create_session()
    held = a.lease(sid)
    held.acquire()
    held.acquire()  # idempotent
    with pytest.raises(SessionBusyError):
        b.lease(sid).acquire()
    other = b.lease(a.create_session())  # another session is free
    other.acquire()
    held.release()
    taker = b.lease(sid)
    taker.acquire()
    assert taker.held
    taker.release(), other.release()

    holder = f"lease = store.lease({sid!r})\nlease.acquire()\nprint('held', flush=True)\nimport time\ntime.sleep(60)\n"
    child = _child(backend, holder)
    try:
        _wait_for_line(child, "held")
        with pytest.raises(SessionBusyError):
            a.lease(sid).acquire()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while True:  # the server notices the dead connection within moments (the kernel closes it)
            try:
                a.lease(sid).acquire()
                break
            except SessionBusyError:
                assert time.monotonic() < deadline, "the dead holder's lease was never dropped"
                time.sleep(0.05)
    finally:
        _reap(child)


def test_a_second_lease_of_a_held_session_in_the_same_process_is_refused(backend: Backend) -> None:
    store = backend.open()
    sid = store.create_session()
    first = store.lease(sid)
    first.acquire()
    with pytest.raises(SessionBusyError):
        store.lease(sid).acquire()  # PostgreSQL's advisory locks are re-entrant on one connection: counted here
    first.release()
    again = store.lease(sid)
    again.acquire()
    again.release()


def test_a_process_holds_its_leases_on_one_connection(backend: Backend) -> None:
    """1,000 sessions held by a worker must not take 1,000 of the server's connections."""
    if backend.name != "postgres":
        pytest.skip("SQLite's leases are files, not connections")
    import psycopg

    store = backend.open()
    leases = [store.lease(store.create_session()) for _ in range(30)]
    for lease in leases:
        lease.acquire()
    mine = f"kairos pid {os.getpid()} %"
    count = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s AND datname = current_database()"
    with psycopg.connect(backend.target, autocommit=True) as conn:
        assert conn.execute(count, (mine,)).fetchone() == (1,)
        for lease in leases[:10]:
            lease.release()
        locks = (
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        assert conn.execute(locks).fetchone() == (20,)
    store.close()  # closing the store frees the rest
    with psycopg.connect(backend.target, autocommit=True) as conn:
        assert conn.execute(count, (mine,)).fetchone() == (0,)


_WRITER = """
sid = {sid!r}
store.append_messages(sid, 0, [Message.user("b0 m0"), Message.user("b0 m1")])
print("first", flush=True)
n, k = 2, 1
while True:
    seq, _ = store.post_event(sid, "user_input", {{"text": f"b{{k}}", "urgent": False}})
    store.append_messages(sid, n, [Message.user(f"b{{k}} m{{i}}") for i in range({batch})], consume=[seq])
    n, k = n + {batch}, k + 1
"""


@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.2])
def test_kill_9_between_writes_leaves_whole_appends_and_each_event_once(backend: Backend, delay_s: float) -> None:
    batch = 5
    store = backend.open()
    sid = store.create_session()
    child = _child(backend, _WRITER.format(sid=sid, batch=batch))
    try:
        _wait_for_line(child, "first")
        time.sleep(delay_s)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(WAIT_S)
    finally:
        _reap(child)
    reader = backend.open()  # a fresh connection: the store is valid after the crash
    texts = _texts(reader, sid)
    assert texts[:2] == ["b0 m0", "b0 m1"]  # the first write is there
    batches = [t.split()[0] for t in texts[2:]]
    appended = list(dict.fromkeys(batches))
    assert appended == [f"b{k}" for k in range(1, len(appended) + 1)]  # in order, none skipped
    assert all(batches.count(b) == batch for b in appended)  # each append wholly there or wholly absent
    pending = [e.record["text"] for e in reader.pending_events(sid)]
    assert set(pending).isdisjoint(appended)  # an event is in the trajectory or pending, never both
    assert pending in ([], [f"b{len(appended) + 1}"])  # at most the one posted before the kill, never lost
    reader.append_messages(sid, len(texts), [Message.user("after")])  # and writable as before
    assert _texts(reader, sid)[-1] == "after"


def test_each_backend_is_the_shipped_class(backend: Backend) -> None:
    from kairos.context.store_pg import PostgresTrajectoryStore
    from kairos.context.store_sqlite import SqliteTrajectoryStore

    expected = {"sqlite": SqliteTrajectoryStore, "postgres": PostgresTrajectoryStore}[backend.name]
    assert isinstance(backend.open(), expected)
