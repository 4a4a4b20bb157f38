"""One conformance suite for :class:`~kairos.knowledge.records.KnowledgeStore`, run against every backend.

``sqlite`` is :class:`SQLiteKnowledgeStore` on a ``knowledge.db``; ``postgres`` is :class:`PgKnowledgeStore`
on a real PostgreSQL on loopback (skipped with the install hint when the server or psycopg is missing).
``backend.open(worker)`` is what another worker would have: on SQLite another connection to the same
file, on PostgreSQL another process's store with its own state dir (so its own index caches). The
crash case runs a writer in a child process and ``kill -9`` s it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kairos.errors import StoreError
from kairos.knowledge import HashEmbedder, KnowledgeBase
from kairos.knowledge.records import ChunkHit, ChunkIn, DocumentIn, Filters
from kairos.knowledge.store import SQLiteKnowledgeStore, open_knowledge_store

WAIT_S = 15.0
REPO = Path(__file__).resolve().parents[2]
EMB = HashEmbedder()


@dataclass
class Backend:
    name: str
    root: Path
    url: str
    """``embedded`` or the ``postgresql://`` URL."""
    opened: list[Any] = field(default_factory=list)

    def state(self, worker: int = 0) -> Path:
        """The state dir of ``worker``: one workspace on SQLite, one per worker on PostgreSQL."""
        return self.root / ("w0" if self.name == "sqlite" else f"w{worker}")

    def open(self, worker: int = 0, **kw: Any) -> Any:
        """A store as ``worker`` opens it (``kw``: the PostgreSQL store's own options)."""
        if kw:
            from kairos.knowledge.store_pg import PgKnowledgeStore

            store: Any = PgKnowledgeStore(self.url, self.state(worker), EMB.dim, EMB.name, **kw)
        else:
            store = open_knowledge_store(self.state(worker), EMB.dim, EMB.name, self.url)
        self.opened.append(store)
        return store

    def forget(self, store: Any) -> None:
        store.close()
        self.opened.remove(store)

    def cache_dirs(self, worker: int = 0) -> list[Path]:
        """The index files of ``worker``'s cache (SQLite: the indexes beside ``knowledge.db``)."""
        state = self.state(worker)
        if self.name == "sqlite":
            return [state / "knowledge.tantivy", state / "knowledge.usearch", state / "knowledge.json"]
        return list((state / "knowledge-pg-cache").iterdir())


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    url = "embedded" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    backend = Backend(request.param, tmp_path, url)
    try:
        yield backend
    finally:
        for store in backend.opened:
            store.close()


@pytest.fixture
def store(backend: Backend) -> Any:
    return backend.open()


def _add(store: Any, source: str, texts: list[str], *, digest: str | None = None, vectors: bool = True,
         **doc: Any) -> Any:  # fmt: skip
    vecs = EMB.embed_passages(texts)
    chunks = [(ChunkIn(t, i, {"i": i}), vecs[i] if vectors else None) for i, t in enumerate(texts)]
    return store.add_document(DocumentIn(source, doc.pop("kind", "text"), digest or "|".join(texts), **doc), chunks)


def _q(text: str) -> Any:
    return EMB.embed_queries([text])[0]


def _bm25(store: Any, query: str, k: int = 10, **f: Any) -> list[str]:
    return [h.source for h in store.search_bm25(query, k, Filters(**f))]


def _dense(store: Any, query: str, k: int = 10, **f: Any) -> list[str]:
    return [h.source for h in store.search_dense(_q(query), k, Filters(**f))]


def _consistent(store: Any) -> None:
    check = store.check()
    with_vectors = check["chunks"] - store.count_without_vectors()
    assert check == {"chunks": check["chunks"], "bm25_docs": check["chunks"], "vectors": with_vectors,
                     "orphan_chunks": 0}  # fmt: skip


# -- documents and versions -------------------------------------------------------------------


def test_versions_replace_and_an_unchanged_digest_is_a_no_op(backend: Backend, store: Any) -> None:
    first, replaced = _add(store, "a.md", ["alpha beta", "gamma delta"], title="A", meta={"lang": "en"})
    assert (first.version, first.chunks, first.current, replaced, first.meta) == (1, 2, True, None, {"lang": "en"})
    same, replaced = _add(store, "a.md", ["alpha beta", "gamma delta"])
    assert (same.id, same.version, replaced) == (first.id, 1, None)
    second, replaced = _add(store, "a.md", ["alpha beta", "epsilon"])
    assert second.version == 2 and replaced is not None and replaced.id == first.id
    other = backend.open(1)  # another worker sees the same history
    old = other.get_document("a.md", 1)
    assert not old.current and old.valid_to is not None and other.find_current("a.md").id == second.id
    assert [(d.version, d.current) for d in other.versions("a.md")] == [(1, False), (2, True)]
    assert [h.text for h in other.document_chunks(second.id)] == ["alpha beta", "epsilon"]
    assert other.document_chunks(second.id)[1].meta == {"i": 1}
    assert [h.position for h in other.document_chunks(second.id, 1, 1)] == [1]
    assert [d.version for d in other.list_documents()] == [2]
    assert [d.version for d in other.list_documents(Filters(all_versions=True))] == [2, 1]
    assert _bm25(other, "gamma") == [] and _bm25(other, "gamma", all_versions=True) == ["a.md"]
    assert [(h.position, len(v)) for h, v in other.chunks_with_vectors(second.id)] == [(0, EMB.dim), (1, EMB.dim)]
    assert [h.position for h, _ in other.chunks_with_vectors(second.id, [1])] == [1]
    ids = [h.chunk_id for h in other.document_chunks(second.id)]
    assert [h.chunk_id for h in other.chunks_by_id(ids[::-1])] == ids[::-1]
    _consistent(other)


def test_a_vector_of_another_length_or_another_embedder_is_refused(backend: Backend, store: Any) -> None:
    with pytest.raises(StoreError, match="dimensions"):
        store.add_document(DocumentIn("x", "text", "d"), [(ChunkIn("x", 0), np.ones(EMB.dim + 1))])
    assert store.find_current("x") is None
    with pytest.raises(StoreError, match="embedder"):
        open_knowledge_store(backend.state(1), 8, "another-8", backend.url)


# -- filters ----------------------------------------------------------------------------------


def test_filters_apply_inside_both_retrievers(store: Any) -> None:
    now = time.time()
    _add(store, "alice/plan.md", ["the rocket launch moved to friday"], owner="alice")
    _add(store, "bob/plan.md", ["rocket launch rocket launch schedule"], owner="bob", kind="pdf")
    _add(store, "old.md", ["rocket launch in the past"], valid_from=now - 100, valid_to=now - 50)
    _add(store, "gone.md", ["rocket launch that expired"], expires_at=now - 1)
    _add(store, "chat", ["rocket launch talk"], kind="conversation", owner="alice")
    _add(store, "v.md", ["rocket launch version one"])
    _add(store, "v.md", ["rocket launch version two"])
    for search in (_bm25, _dense):
        query = "rocket launch"
        assert set(search(store, query)) == {"alice/plan.md", "bob/plan.md", "chat", "v.md"}
        assert set(search(store, query, owner="alice")) == {"alice/plan.md", "chat"}
        assert search(store, query, sources=("bob/plan.md",)) == ["bob/plan.md"]
        assert set(search(store, query, source_prefix="alice/")) == {"alice/plan.md"}
        assert search(store, query, kind="pdf") == ["bob/plan.md"]
        assert "chat" not in search(store, query, exclude_kinds=("conversation",))
        assert "old.md" in search(store, query, at=now - 75) and "old.md" not in search(store, query)
        assert "gone.md" in search(store, query, include_expired=True)
        assert search(store, query, all_versions=True).count("v.md") == 2
        assert search(store, query, k=1, owner="alice", kind="conversation") == ["chat"]
    assert [d.source for d in store.list_documents(Filters(owner="alice"))] == ["chat", "alice/plan.md"]


def test_top_k_is_the_embedded_stores(backend: Backend, store: Any, tmp_path: Path) -> None:
    words = ["apples", "pears", "rockets", "apples pears", "sonar", "rocket fuel", "tea"]
    corpus = {f"doc{i}.md": [f"{w} report number {i}", f"notes about {w} and {i % 3}"] for i, w in enumerate(words)}
    reference = SQLiteKnowledgeStore(tmp_path / "reference", EMB.dim, EMB.name)
    try:
        for source, texts in corpus.items():
            _add(store, source, texts)
            _add(reference, source, texts)

        def ranked(s: Any, hits: list[ChunkHit]) -> list[tuple[str, int, float]]:
            return [(h.source, h.position, round(h.score, 4)) for h in hits]

        for query in ("apples report", "rocket", "notes about 1", "tea sonar pears"):
            assert ranked(store, store.search_bm25(query, 5)) == ranked(reference, reference.search_bm25(query, 5))
            assert ranked(store, store.search_dense(_q(query), 5)) == ranked(
                reference, reference.search_dense(_q(query), 5)
            )
    finally:
        reference.close()


# -- removal and vectors given later ----------------------------------------------------------


def test_remove_source_leaves_every_index(backend: Backend, store: Any) -> None:
    _add(store, "one.md", ["apples and pears"])
    _add(store, "one.md", ["apples and plums"])
    _add(store, "two.md", ["submarine periscope sonar"])
    other = backend.open(1)
    assert _bm25(other, "apples") == ["one.md"] and _dense(other, "apples and plums")[0] == "one.md"
    assert store.remove_source("one.md") == 2 and store.remove_source("one.md") == 0
    assert _bm25(other, "apples", all_versions=True) == [] and _dense(other, "apples and plums") == ["two.md"]
    assert other.versions("one.md") == [] and [d.source for d in other.list_documents()] == ["two.md"]
    assert other.check() == {"chunks": 1, "bm25_docs": 1, "vectors": 1, "orphan_chunks": 0}


def test_vectors_set_later_reach_dense_search(backend: Backend, store: Any) -> None:
    _add(store, "late.md", ["quantum tunnelling notes", "superconducting magnets"], vectors=False)
    other = backend.open(1)
    assert other.count_without_vectors() == 2 and _bm25(other, "magnets") == ["late.md"]
    assert _dense(other, "superconducting magnets") == []
    todo = other.without_vectors(10)
    assert [t for _, t in todo] == ["quantum tunnelling notes", "superconducting magnets"]
    assert other.without_vectors(10, after=todo[0][0]) == todo[1:]
    assert other.set_vectors([(key, EMB.embed_passages([text])[0]) for key, text in todo]) == 2
    assert other.set_vectors([(todo[0][0], EMB.embed_passages(["again"])[0])]) == 0  # given already: skipped
    assert store.count_without_vectors() == 0 and _dense(store, "superconducting magnets")[0] == "late.md"
    _consistent(store)


# -- several workers --------------------------------------------------------------------------


def test_another_worker_catches_up_with_adds_and_deletions(
    backend: Backend, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = backend.open(1)
    assert _bm25(other, "lighthouse") == [] and _dense(other, "lighthouse") == []
    rebuilt = _rebuilds(other, monkeypatch) if backend.name == "postgres" else []
    for i in range(5):
        _add(store, f"n{i}.md", [f"lighthouse keeper log {i}", f"storm number {i}"])
    assert len(_bm25(other, "lighthouse")) == 5 and len(_dense(other, "lighthouse keeper log 3", k=3)) == 3
    store.remove_source("n1.md")
    _add(store, "n2.md", ["the lighthouse was sold"])
    assert sorted(set(_bm25(other, "lighthouse"))) == ["n0.md", "n2.md", "n3.md", "n4.md"]
    assert "n1.md" not in _dense(other, "lighthouse keeper log 1", k=10)
    _consistent(other)
    _consistent(store)
    assert rebuilt == []  # caught up from the change log, never rebuilt


@pytest.mark.parametrize("damage", ["deleted", "garbage"])
def test_a_damaged_cache_is_rebuilt_from_the_rows(backend: Backend, store: Any, damage: str) -> None:
    _add(store, "a.md", ["zebra crossing rules", "yellow lines"])
    _add(store, "b.md", ["parking meters"], vectors=False)
    assert _bm25(store, "zebra") == ["a.md"]
    backend.forget(store)
    for path in backend.cache_dirs():
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        if damage == "deleted":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        else:
            for f in files:
                f.write_bytes(b"\x00garbage" * 3)
    again = backend.open()
    assert _bm25(again, "zebra") == ["a.md"] and _dense(again, "yellow lines")[0] == "a.md"
    _consistent(again)


def _rebuilds(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which of ``store``'s cached indexes were rebuilt whole from the rows, from now on."""
    seen: list[str] = []
    for name, label in (("_rebuild_bm25", "bm25"), ("_fill", "vectors")):
        original = getattr(store.cache, name)

        def spy(*args: Any, _original: Any = original, _label: str = label) -> Any:
            seen.append(_label)
            return _original(*args)

        monkeypatch.setattr(store.cache, name, spy)
    return seen


def test_a_cache_further_behind_than_the_change_log_is_rebuilt(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend.name != "postgres":
        pytest.skip("the change log is PostgreSQL's")
    writer = backend.open(0, keep_changes=2)
    behind = backend.open(1, keep_changes=2)
    _add(writer, "first.md", ["orchard apples"])
    assert _bm25(behind, "apples") == ["first.md"]
    rebuilt = _rebuilds(behind, monkeypatch)
    _add(writer, "second.md", ["orchard plums"])
    assert _bm25(behind, "plums") == ["second.md"] and rebuilt == []  # one generation behind: the log suffices
    for i in range(4):  # five generations past its stamp; the log keeps two
        _add(writer, f"more{i}.md", [f"orchard pears {i}"])
    writer.remove_source("first.md")
    assert _bm25(behind, "apples") == [] and len(_bm25(behind, "orchard")) == 5
    assert sorted(rebuilt) == ["bm25", "vectors"]
    _consistent(behind)


def test_two_writers_racing_on_one_source_never_make_a_version_twice(backend: Backend) -> None:
    stores = [backend.open(0), backend.open(1)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            start.wait(WAIT_S)
            for i in range(10):
                _add(stores[n], "shared.md", [f"draft {n}.{i}"])
                _add(stores[n], "same.md", ["identical text"])  # the same digest from both: stored once
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S * 4)
    assert not errors
    history = stores[0].versions("shared.md")
    assert [d.version for d in history] == list(range(1, 21)) and [d.current for d in history].count(True) == 1
    assert [d.version for d in stores[1].versions("same.md")] == [1]
    _consistent(stores[1])


_WRITER = """
import numpy as np
from kairos.knowledge.records import ChunkIn, DocumentIn
def add(source, texts, vectors=True):
    vecs = emb.embed_passages(texts)
    chunks = [(ChunkIn(t, i), vecs[i] if vectors else None) for i, t in enumerate(texts)]
    return store.add_document(DocumentIn(source, "text", "|".join(texts)), chunks)
add("s", ["v1 first"])
print("first", flush=True)
i = 2
while True:
    add("s", [f"v{i} text", f"v{i} more"])
    add(f"e{i}", [f"event {i}"], vectors=False)
    todo = store.without_vectors(10)
    store.set_vectors([(k, emb.embed_passages([t])[0]) for k, t in todo])
    if i % 3 == 0:
        store.remove_source(f"e{i - 1}")
    store.search_bm25(f"v{i}", 3)  # the index caches are written too (on PostgreSQL, caught up here)
    store.search_dense(emb.embed_queries([f"v{i}"])[0], 3)
    if i % 5 == 0:
        store.flush()
    i += 1
"""


@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.2])
def test_kill_9_between_writes_leaves_a_consistent_store(backend: Backend, delay_s: float) -> None:
    code = textwrap.dedent(f"""
        from pathlib import Path
        from kairos.knowledge import HashEmbedder
        from kairos.knowledge.store import open_knowledge_store
        emb = HashEmbedder()
        store = open_knowledge_store(Path({str(backend.state())!r}), emb.dim, emb.name, {backend.url!r})
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
    store = backend.open()  # the dead writer's own state dir (and index caches): valid after the crash
    _consistent(store)
    versions = store.versions("s")
    assert [d.version for d in versions] == list(range(1, len(versions) + 1))  # whole versions, in order
    assert [d.current for d in versions].count(True) == 1 and versions[-1].current
    last = versions[-1].version
    assert last == 1 or set(_bm25(store, f"v{last}")) == {"s"}
    stored, replaced = _add(store, "s", ["after the crash"])  # and writable as before
    assert stored.version == last + 1 and replaced is not None
    assert _bm25(backend.open(1), "crash") == ["s"]


def test_each_backend_is_the_shipped_class(backend: Backend) -> None:
    from kairos.knowledge.store_pg import PgKnowledgeStore

    expected = {"sqlite": SQLiteKnowledgeStore, "postgres": PgKnowledgeStore}[backend.name]
    assert isinstance(backend.open(), expected)


# -- PostgreSQL only: the deployment's knowledge base -----------------------------------------


def test_past_conversations_of_a_postgres_deployment_are_shared(postgres_url: str, tmp_path: Path) -> None:
    from kairos.knowledge.store_pg import PgKnowledgeStore
    from kairos.memory import UserMemory
    from kairos.models.types import Message

    async def go() -> None:
        mem = UserMemory.open(tmp_path / "one", EMB, None, user="alice", store=postgres_url)
        try:
            assert isinstance(mem.kb.store, PgKnowledgeStore)
            said = "my sister Clara moved to Lisbon last spring"
            await mem.ingest_session([Message.user(said)], session_id="s1", at=datetime(2025, 3, 1, tzinfo=UTC))
        finally:
            mem.close()
        assert not (tmp_path / "one" / "knowledge.db").exists()  # nothing of it in the workspace's SQLite
        other = UserMemory.open(tmp_path / "two", EMB, None, user="alice", store=postgres_url)
        try:
            hits = await other.past_conversations("where does Clara live", 3)
            assert hits and "Lisbon" in hits[0].text and hits[0].session_id == "s1"
        finally:
            other.close()

    asyncio.run(go())
    kb = KnowledgeBase.open(tmp_path / "three", EMB, url=postgres_url)
    try:
        assert [d.kind for d in kb.list_documents(Filters(owner="alice"))] == ["conversation"]
    finally:
        kb.close()


def test_the_entity_graph_on_postgres_ranks_as_on_sqlite(postgres_url: str, tmp_path: Path) -> None:
    from kairos.knowledge.entity_graph import TripleExtractor, build_graph, graph_ranking, query_entities
    from kairos.knowledge.store_pg import PgKnowledgeStore
    from kairos.testing import ScriptedModel
    from tests.knowledge.test_entity_graph import FACTS, FILLER, add_doc, triples_for, triples_of

    questions = ["Where does Rex's previous owner live now?", "Who teaches chemistry?", "What did Bo give Ann?"]
    seen: dict[str, Any] = {}
    for name, url in (("sqlite", "embedded"), ("postgres", postgres_url)):
        kb = KnowledgeBase.open(tmp_path / name, EMB, url=url)
        try:
            assert isinstance(kb.store, PgKnowledgeStore) == (name == "postgres")
            add_doc(kb, [*FACTS, *FILLER])
            add_doc(kb, ["Bo relocated to Lisbon in the spring.", "Rex chased a ball."], "other.md")
            results = [asyncio.run(build_graph(kb, source, TripleExtractor(ScriptedModel([triples_for] * 40))))
                       for source in ("story.md", "other.md")]  # fmt: skip
            again = asyncio.run(build_graph(kb, "story.md", TripleExtractor(ScriptedModel([]))))
            searches = [kb.search(q, k=5, mode="hybrid+graph") for q in questions]
            assert all(not s.warning for s in searches)
            seeds = query_entities(kb.store, questions[0])
            seen[name] = (
                [(r.status, r.chunks, r.triples, r.dropped) for r in results], again.status, triples_of(kb),
                [[(h.chunk.source, h.chunk.position, h.graph_rank, round(h.score, 9)) for h in s.hits]
                 for s in searches],
                sorted(seeds.values()),
                [(h.source, h.position) for h in graph_ranking(kb.store, seeds, 10, Filters(), max_fanout=2)],
            )  # fmt: skip
        finally:
            kb.close()
    assert seen["postgres"] == seen["sqlite"]
    built, again, triples, ranked, seeds, hubless = seen["postgres"]
    assert built == [("built", 28, 4, 0), ("built", 2, 1, 0)] and again == "unchanged"
    assert ("rex", "puppy of", "ann lee") in triples and seeds == ["rex"] and hubless
    assert ("story.md", 1) in [(source, position) for source, position, _, _ in ranked[0]]  # Bo's move, two hops
    assert any(rank is not None for _, _, rank, _ in ranked[0])


def _graph_kb(backend: Backend, worker: int) -> KnowledgeBase:
    return KnowledgeBase(backend.open(worker), EMB)


def test_removing_a_source_removes_its_triples_on_every_backend(backend: Backend) -> None:
    from kairos.knowledge.entity_graph import TripleExtractor, build_graph
    from kairos.testing import ScriptedModel
    from tests.knowledge.test_entity_graph import FACTS, add_doc, triples_for, triples_of

    kb = _graph_kb(backend, 0)
    add_doc(kb, list(FACTS))
    add_doc(kb, ["Bo relocated to Lisbon in the spring."], "other.md")
    for source in ("story.md", "other.md"):
        assert asyncio.run(build_graph(kb, source, TripleExtractor(ScriptedModel([triples_for] * 3)))).triples
    assert len(triples_of(kb)) == 4  # "bo relocated to lisbon" from both documents: one triple each
    kb.remove("story.md")
    assert triples_of(kb) == {("bo", "relocated to", "lisbon")}
    with kb.store.read() as db:
        assert db.execute("SELECT count(*) FROM graph_chunks").fetchone()[0] == 1
        assert db.execute("SELECT count(*) FROM graph_triples").fetchone()[0] == 1
    found = kb.search("Where did Bo move?", k=3, mode="hybrid+graph")
    assert not found.warning and [h.chunk.source for h in found.hits] == ["other.md"]
    kb.remove("other.md")
    assert triples_of(kb) == set()
    assert "no entity graph" in kb.search("Where did Bo move?", k=3, mode="hybrid+graph").warning
    _consistent(kb.store)


NAMES = [f"Agent {chr(ord('A') + i)}lpha" for i in range(12)]


def _chain(request: Any) -> Any:
    """Triples linking every name of the passage to the next one, in the order the passage names them."""
    from kairos.testing import call, reply

    passage = request.messages[0].content
    named = sorted((passage.index(n), n) for n in NAMES if n in passage)
    chain = [{"subject": a, "relation": "met", "object": b} for (_, a), (_, b) in zip(named, named[1:], strict=False)]
    return reply("", call("triples", {"triples": chain}))


def test_two_workers_building_graphs_that_share_entities_both_succeed(backend: Backend) -> None:
    from kairos.knowledge.entity_graph import TripleExtractor, build_graph
    from kairos.testing import ScriptedModel

    kbs = [_graph_kb(backend, 0), _graph_kb(backend, 1)]
    rounds = 4
    for n, kb in enumerate(kbs):
        order = NAMES if n == 0 else NAMES[::-1]  # the two workers name the entities in opposite orders
        for r in range(rounds):
            texts = [
                f"Round {r} note {i} of worker {n}: " + ", ".join(order[i:] + order[:i]) + " met." for i in range(6)
            ]
            kb.add_chunks(DocumentIn(f"w{n}-{r}.md", "text", f"{n}.{r}"), [ChunkIn(t, i) for i, t in enumerate(texts)])
    start = threading.Barrier(2)
    errors: list[BaseException] = []
    results: list[Any] = []

    def build(n: int) -> None:
        try:
            for r in range(rounds):
                start.wait(WAIT_S)
                extractor = TripleExtractor(ScriptedModel([_chain] * 6))
                results.append(asyncio.run(build_graph(kbs[n], f"w{n}-{r}.md", extractor, batch_chars=0)))
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=build, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S * 4)
    assert not errors
    assert [(r.status, r.chunks, r.triples) for r in results] == [("built", 6, 6 * (len(NAMES) - 1))] * 2 * rounds
    with kbs[1].store.read() as db:
        names = db.execute("SELECT name, count(*) FROM graph_entities GROUP BY name").fetchall()
        triples = db.execute("SELECT count(*) FROM graph_triples").fetchone()[0]
    assert sorted(names) == sorted((n.lower(), 1) for n in NAMES)
    assert triples == 2 * rounds * 6 * (len(NAMES) - 1)


def test_kb_commands_use_the_store_they_are_given(postgres_url: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from kairos.cli import app

    one, two = tmp_path / "one", tmp_path / "two"
    for ws in (one, two):
        ws.mkdir()
    (one / "deploys.md").write_text("Deploys run every friday at noon.\n")
    runner = CliRunner()

    def kb(ws: Path, *args: str) -> Any:
        return runner.invoke(app, ["kb", *args, "-w", str(ws), "--embedder", "hash", "--store", postgres_url])

    assert kb(one, "add", str(one / "deploys.md")).exit_code == 0
    found = kb(two, "search", "when do deploys run", "--json")  # another workspace, the same deployment
    assert found.exit_code == 0 and "friday" in found.output
    assert not (two / ".kairos" / "knowledge.db").exists()


def test_context_twins_are_searched_and_removed_on_every_backend(backend: Backend) -> None:
    from tests.knowledge.test_twins import add

    kb = KnowledgeBase(backend.open(), EMB)
    add(kb, "chat", owner="ann")
    top = kb.search("a greyhound puppy", k=3, filters=Filters(owner="ann")).hits[0]
    assert (top.chunk.source, top.chunk.meta["turn_id"], top.context_rank) == ("chat", "D1:1", 1)
    assert top.chunk.meta["context"] == "Ann adopted a greyhound puppy."
    assert kb.search("a greyhound puppy", k=3, filters=Filters(owner="bo")).hits == []
    assert [d.source for d in kb.list_documents()] == ["chat"]
    assert kb.stats()["kinds"] == {"context": 1, "conversation": 1} and kb.stats()["context_twins"] == 1
    kb.remove("chat")
    assert kb.store.find_current("chat#contexts") is None
    _consistent(kb.store)
