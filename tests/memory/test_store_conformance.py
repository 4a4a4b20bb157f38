"""One conformance suite for :class:`~kairos.memory.records.MemoryStore`, run against every backend.

``sqlite`` is :class:`SQLiteMemoryStore` on a ``knowledge.db``; ``postgres`` is :class:`PgMemoryStore` on a
real PostgreSQL on loopback (skipped with the install hint when the server or psycopg is missing).
``backend.open()`` is another connection to the same data — what a second worker would have. The crash
case runs a writer in a child process and ``kill -9`` s it.
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
from typing import Any

import numpy as np
import pytest

from kairos.knowledge import HashEmbedder
from kairos.memory.records import MemoryCard, MemoryIn, MemoryProvenance, MemoryStore, MemoryStoreError
from kairos.memory.store import open_memory_store

WAIT_S = 15.0
REPO = Path(__file__).resolve().parents[2]
EMB = HashEmbedder()


@dataclass
class Backend:
    name: str
    state: Path
    url: str
    """``embedded`` or the ``postgresql://`` URL."""
    server_data: Path | None = None
    opened: list[MemoryStore] = field(default_factory=list)

    def open(self) -> Any:
        store = open_memory_store(self.state, EMB.dim, EMB.name, self.url)
        self.opened.append(store)
        return store


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        backend = Backend("sqlite", tmp_path, "embedded")
    else:
        url = request.getfixturevalue("postgres_url")
        backend = Backend("postgres", tmp_path, url, request.getfixturevalue("postgres_server").data)
    try:
        yield backend
    finally:
        for store in backend.opened:
            store.close()


@pytest.fixture
def store(backend: Backend) -> Any:
    return backend.open()


def _vec(text: str) -> Any:
    return EMB.embed_passages([text])[0]


def _mem(content: str, *, session: str = "s1", **kw: Any) -> MemoryIn:
    return MemoryIn("semantic", "note", "fact", content, provenance=MemoryProvenance(session, (0,), "user"), **kw)


def _add(store: Any, owner: str, content: str, **kw: Any) -> MemoryCard:
    card: MemoryCard = store.add(owner, _mem(content, **kw), _vec(content))
    return card


def _revise(store: Any, owner: str, card: MemoryCard, content: str, **kw: Any) -> MemoryCard:
    new: MemoryCard = store.revise(owner, card.id, _mem(content, **kw), _vec(content), op="update")
    return new


# -- versions -------------------------------------------------------------------------------


def test_a_memory_is_added_revised_and_keeps_its_history(backend: Backend, store: Any) -> None:
    first = _add(store, "alice", "alice drinks green tea", data={"path": "drinks.tea"})
    assert (first.version, first.status, first.op, first.replaces) == (1, "current", "add", None)
    assert first.data == {"path": "drinks.tea"} and first.provenance.session_id == "s1"
    second = _revise(store, "alice", first, "alice drinks black tea")
    assert (second.key, second.version, second.status, second.replaces) == (first.key, 2, "current", first.id)
    other = backend.open()  # another process sees the same history
    old = other.get("alice", first.id)
    assert old.status == "superseded" and old.valid_to is not None
    assert [(c.version, c.status) for c in other.history("alice", first.key)] == [(1, "superseded"), (2, "current")]
    assert [c.content for c in other.current("alice")] == ["alice drinks black tea"] and other.count("alice") == 1
    with pytest.raises(MemoryStoreError, match="not current"):
        _revise(other, "alice", first, "a third value")  # an old version is never revised


def test_older_news_stays_in_history_behind_the_current_value(store: Any) -> None:
    now = _add(store, "alice", "alice lives in Lyon", valid_from=2_000.0)
    kept = _revise(store, "alice", now, "alice lives in Paris", valid_from=1_000.0)  # an earlier session, late
    assert kept.id == now.id and kept.status == "current" and kept.content == "alice lives in Lyon"
    versions = store.history("alice", now.key)
    assert [(c.version, c.status, c.content) for c in versions] == [
        (1, "current", "alice lives in Lyon"), (2, "superseded", "alice lives in Paris"),
    ]  # fmt: skip


def test_delete_tombstones_and_archive_merges(store: Any) -> None:
    a, b, c = (_add(store, "alice", t) for t in ("likes jazz", "likes blues", "likes rain"))
    tomb = store.delete("alice", c.id, provenance=MemoryProvenance("s2", (1,), "user"))
    assert (tomb.status, tomb.op, tomb.version) == ("deleted", "delete", 2)
    summary = store.archive("alice", [a.id, b.id], _mem("likes jazz and blues"), _vec("likes jazz and blues"))
    assert summary.op == "compress" and summary.data["merged"] == [a.id, b.id]
    assert store.get("alice", a.id).status == "archived" and store.get("alice", a.id).data["merged_into"] == summary.id
    assert [x.content for x in store.current("alice")] == ["likes jazz and blues"]
    with pytest.raises(MemoryStoreError):
        store.delete("alice", c.id, provenance=MemoryProvenance())  # already gone


def test_owners_are_isolated(store: Any) -> None:
    mine = _add(store, "alice", "alice has a cat named Tom")
    _add(store, "bob", "bob has a dog named Rex")
    assert store.get("bob", mine.id) is None
    with pytest.raises(MemoryStoreError, match="no memory"):
        _revise(store, "bob", mine, "bob took alice's memory")
    with pytest.raises(MemoryStoreError, match="no memory"):
        store.forget("bob", mine.id)
    assert [c.content for c, _ in store.search_bm25("bob", "cat Tom", 5)] == []
    assert all(c.owner == "bob" for c, _ in store.search_dense("bob", _vec("a cat named Tom"), 5))
    assert store.count("alice") == 1 and store.count("bob") == 1


def test_expired_memories_leave_retrieval(store: Any) -> None:
    _add(store, "alice", "a parcel arrives today", expires_at=time.time() - 1)
    live = _add(store, "alice", "alice's parcel locker is 42", expires_at=time.time() + 3600)
    assert [c.id for c in store.current("alice")] == [live.id] and store.count("alice") == 1
    assert [c.id for c, _ in store.search_bm25("alice", "parcel", 5)] == [live.id]
    assert [c.id for c in store.vectors("alice")[0]] == [live.id]


def test_accesses_are_counted(store: Any) -> None:
    card = _add(store, "alice", "alice reads sci-fi")
    store.touch([card.id])
    store.touch([card.id])
    store.touch([])
    assert store.get("alice", card.id).accesses == 2


# -- search ---------------------------------------------------------------------------------


def test_full_text_and_dense_search_rank_the_obvious_match_first(store: Any) -> None:
    texts = ["alice is allergic to penicillin", "alice prefers a window seat", "alice's café is Café Crème",
             "alice runs on Sundays", "bob is allergic to nuts"]  # fmt: skip
    cards = {t: _add(store, "bob" if t.startswith("bob") else "alice", t) for t in texts}
    lexical = store.search_bm25("alice", "which allergies? penicillin", 3)
    assert lexical[0][0].id == cards[texts[0]].id and lexical[0][1] > 0
    assert [c.id for c, _ in store.search_bm25("alice", "window seats", 3)][0] == cards[texts[1]].id  # stemmed
    assert [c.id for c, _ in store.search_bm25("alice", "cafe creme", 3)] == [cards[texts[2]].id]  # accents folded
    assert store.search_bm25("alice", "", 3) == [] and store.search_bm25("alice", "unrelated words", 3) == []
    dense = store.search_dense("alice", EMB.embed_queries(["alice runs on Sundays"])[0], 2)
    assert dense[0][0].id == cards[texts[3]].id and dense[0][1] > 0.99 and len(dense) == 2
    cards_, vecs = store.vectors("alice")
    assert vecs.shape == (4, EMB.dim) and vecs.dtype == np.float32 and len(cards_) == 4


def test_a_vector_of_another_length_is_refused(store: Any) -> None:
    with pytest.raises(MemoryStoreError, match="dimensions"):
        store.add("alice", _mem("x"), np.ones(EMB.dim + 1))
    assert store.count("alice") == 0


# -- forget ---------------------------------------------------------------------------------


def _files_hold(folder: Path, secret: bytes) -> list[str]:
    """Files under ``folder`` whose bytes hold ``secret`` (SQLite's WAL aside: it is emptied on close)."""
    files = [p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(("-wal", "-shm"))]
    return [str(p) for p in files if secret in p.read_bytes()]


def test_forget_erases_every_version_and_the_text_leaves_the_files(backend: Backend, store: Any) -> None:
    secret = "zanzibarquokka" + os.urandom(4).hex()
    card = _add(store, "alice", f"alice's passphrase is {secret}")
    _revise(store, "alice", card, f"alice's passphrase is still {secret}")
    kept = _add(store, "alice", "alice likes tea")
    assert store.forget("alice", card.id) == 2
    assert store.history("alice", card.key) == [] and store.search_bm25("alice", secret, 5) == []
    assert [c.id for c in store.current("alice")] == [kept.id]
    store.close()  # the files as they are at rest
    backend.opened.remove(store)
    if backend.server_data is not None:
        import psycopg

        with psycopg.connect(backend.url, autocommit=True) as conn:
            conn.execute("CHECKPOINT")  # every page the server holds, on disk
    folder = backend.server_data / "base" if backend.server_data is not None else backend.state
    assert _files_hold(folder, secret.encode()) == []
    assert backend.open().count("alice") == 1


def test_forget_all_erases_the_owner_and_the_unfinished_ingests(store: Any) -> None:
    _add(store, "alice", "one")
    _add(store, "alice", "two")
    _add(store, "bob", "bob's")
    store.expect_ingest("alice", "s9", "d9", 4, 1.0)
    store.keep_step("alice", "s9", "d9", "extract:0", "{}")
    assert store.forget("alice") == 2
    assert store.count("alice") == 0 and store.count("bob") == 1
    assert store.unfinished_ingests("alice") == [] and store.step("alice", "s9", "d9", "extract:0") is None


# -- the ingest ledger ----------------------------------------------------------------------


def test_a_duplicate_ingest_is_recorded_once(backend: Backend, store: Any) -> None:
    other = backend.open()
    assert store.expect_ingest("alice", "s1", "d1", 4, 10.0) is True
    assert other.expect_ingest("alice", "s1", "d1", 4, 10.0) is True  # expected, not done: still to ingest
    store.expect_ingest("alice", "s2", "d2", 2, 5.0)
    assert other.unfinished_ingests("alice") == [("s2", "d2", 2, 5.0), ("s1", "d1", 4, 10.0)]
    assert store.begin_ingest("alice", "s1", "d1") == 0
    store.keep_step("alice", "s1", "d1", "scrub", "first")
    store.keep_step("alice", "s1", "d1", "scrub", "kept")
    assert other.step("alice", "s1", "d1", "scrub") == "kept" and other.step("alice", "s1", "d1", "x") is None
    store.end_ingest("alice", "s1", "d1")
    assert other.expect_ingest("alice", "s1", "d1", 4, 10.0) is False  # redelivered: a no-op
    assert other.ingested("alice", "s1") == [("d1", 4)] and other.step("alice", "s1", "d1", "scrub") is None
    assert [u[0] for u in other.unfinished_ingests("alice")] == ["s2"] and store.unfinished_ingests("bob") == []


def test_an_interrupted_attempt_is_undone_by_the_next(store: Any) -> None:
    before = _add(store, "alice", "alice lives in Lyon", session="s0")
    store.expect_ingest("alice", "s1", "d1", 4, 10.0)
    store.begin_ingest("alice", "s1", "d1")
    _add(store, "alice", "alice has a new bike", session="s1")
    _revise(store, "alice", before, "alice lives in Paris", session="s1")  # the attempt dies here
    assert store.begin_ingest("alice", "s1", "d1") == 2
    assert [c.content for c in store.current("alice")] == ["alice lives in Lyon"]
    assert store.get("alice", before.id).status == "current" and store.get("alice", before.id).valid_to is None


# -- a second writer and crashes ------------------------------------------------------------


def test_two_writers_racing_one_key_never_make_a_version_twice(backend: Backend) -> None:
    first = _add(backend.open(), "alice", "counter 0")
    stores = [backend.open(), backend.open()]
    start = threading.Barrier(2)
    lost: list[int] = [0, 0]
    errors: list[BaseException] = []

    def write(n: int) -> None:
        store = stores[n]
        try:
            start.wait(WAIT_S)
            for i in range(15):
                while True:
                    live = next(c for c in store.history("alice", first.key) if c.status == "current")
                    try:
                        _revise(store, "alice", live, f"counter by {n}.{i}")
                        break
                    except MemoryStoreError:
                        lost[n] += 1  # the other writer revised it first: read again
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S * 4)
    assert not errors
    history = stores[0].history("alice", first.key)
    assert sorted(c.version for c in history) == list(range(1, 32))  # 1 + 30 revisions, none twice
    assert [c.status for c in history].count("current") == 1
    by_id = {c.id: c for c in history}
    chain = [c for c in history if c.replaces is not None]
    assert sorted(by_id[c.replaces].version for c in chain) == list(range(1, 31))  # each replaced exactly once


_WRITER = """
import time
from kairos.memory.records import MemoryIn, MemoryProvenance
card = store.add("alice", MemoryIn("semantic", "note", "fact", "v1"), emb.embed_passages(["v1"])[0])
print("first", flush=True)
i = 2
while True:
    text = f"v{i}"
    card = store.revise("alice", card.id, MemoryIn("semantic", "note", "fact", text), emb.embed_passages([text])[0],
                        op="update")
    store.add("alice", MemoryIn("episodic", "note", "event", f"e{i}"), emb.embed_passages([f"e{i}"])[0])
    store.keep_step("alice", "s", "d", f"step{i}", text)
    i += 1
"""


@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.2])
def test_kill_9_between_writes_leaves_a_consistent_store(backend: Backend, delay_s: float) -> None:
    code = textwrap.dedent(f"""
        from pathlib import Path
        from kairos.knowledge import HashEmbedder
        from kairos.memory.store import open_memory_store
        emb = HashEmbedder()
        store = open_memory_store(Path({str(backend.state)!r}), emb.dim, emb.name, {backend.url!r})
    """) + textwrap.dedent(_WRITER)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "first", f"child exited {child.poll()}"
        time.sleep(delay_s)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(WAIT_S)
    finally:
        child.kill()
        child.wait(WAIT_S)
        if child.stdout is not None:
            child.stdout.close()
    store = backend.open()  # a fresh connection: valid after the crash
    check = store.check()
    assert check["rows"] == check["fts_rows"]
    revised = [c for c in store.history("alice") if c.kind == "semantic"]
    assert sorted(c.version for c in revised) == list(range(1, len(revised) + 1))  # whole versions, in order
    live = [c for c in revised if c.status == "current"]
    assert len(live) == 1 and live[0].content == f"v{len(revised)}"
    events = sorted(int(c.content[1:]) for c in store.current("alice") if c.kind == "episodic")
    assert events == list(range(2, len(events) + 2))  # none skipped
    assert len(revised) - 1 - len(events) in (0, 1)  # at most the pair the kill cut
    again = _revise(store, "alice", live[0], "after the crash")  # and writable as before
    assert again.version == len(revised) + 1


def test_each_backend_is_the_shipped_class(backend: Backend) -> None:
    from kairos.memory.store import SQLiteMemoryStore
    from kairos.memory.store_pg import PgMemoryStore

    expected = {"sqlite": SQLiteMemoryStore, "postgres": PgMemoryStore}[backend.name]
    assert isinstance(backend.open(), expected)
