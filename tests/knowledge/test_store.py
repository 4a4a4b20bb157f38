from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from kairos.knowledge import Filters, HashEmbedder, KnowledgeBase, SQLiteKnowledgeStore, StoreError
from kairos.knowledge.store import INDEX_NAME, ChunkIn, DocumentIn, fts_query


def _doc(source: str, digest: str = "d1", **kw: object) -> DocumentIn:
    return DocumentIn(source, "text", digest, **kw)  # type: ignore[arg-type]


def _pairs(texts: list[str], emb: HashEmbedder) -> list[tuple[ChunkIn, np.ndarray]]:
    vecs = emb.embed_passages(texts)
    return [(ChunkIn(t, i, {"i": i}), vecs[i]) for i, t in enumerate(texts)]


def test_round_trip_survives_reopen(tmp_path: Path) -> None:
    emb = HashEmbedder()
    with SQLiteKnowledgeStore(tmp_path, emb.dim, emb.name) as store:
        stored, replaced = store.add_document(_doc("a.txt", title="A"), _pairs(["alpha beta", "gamma delta"], emb))
        assert replaced is None and stored.version == 1 and stored.chunks == 2
    assert (tmp_path / "knowledge.db").exists() and (tmp_path / INDEX_NAME).exists()
    with SQLiteKnowledgeStore(tmp_path, emb.dim, emb.name) as store:
        doc = store.get_document("a.txt")
        assert doc is not None and doc.title == "A" and doc.current
        chunks = store.document_chunks(doc.id)
        assert [c.text for c in chunks] == ["alpha beta", "gamma delta"]
        assert chunks[1].meta == {"i": 1}
        assert store.check() == {"chunks": 2, "bm25_docs": 2, "vectors": 2, "orphan_chunks": 0}
        assert store.search_bm25("gamma", 5)[0].text == "gamma delta"


def test_another_embedder_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    SQLiteKnowledgeStore(tmp_path, 64, "hash-64").close()
    with pytest.raises(StoreError, match="built with the embedder hash-64"):
        SQLiteKnowledgeStore(tmp_path, 32, "hash-32")


def test_bm25_filters_apply_inside_the_query_not_after_top_k(kb: KnowledgeBase) -> None:
    # 30 documents of "bob" match the query better than alice's single one; k=1 must still find hers
    for i in range(30):
        kb.add_text(f"bob/{i}.txt", f"rocket rocket rocket launch schedule {i}", owner="bob")
    kb.add_text("alice/notes.txt", "the rocket launch moved to friday", owner="alice")
    top = kb.store.search_bm25("rocket launch", 1, Filters(owner="alice"))
    assert [h.source for h in top] == ["alice/notes.txt"]
    assert kb.store.search_bm25("rocket launch", 1)[0].source.startswith("bob/")
    assert kb.store.search_bm25("rocket", 50, Filters(source_prefix="bob/1")) != []
    assert {h.source for h in kb.store.search_bm25("rocket", 50, Filters(source_prefix="bob/1"))} == {
        "bob/1.txt",
        *(f"bob/{i}.txt" for i in range(10, 20)),
    }
    assert kb.store.search_bm25("rocket", 5, Filters(kind="pdf")) == []


def test_dense_filters_widen_the_fetch_until_k_pass(kb: KnowledgeBase) -> None:
    for i in range(200):
        kb.add_text(f"bob/{i}.txt", "rocket launch schedule", owner="bob")
    for i in range(3):
        kb.add_text(f"alice/{i}.txt", f"weekly shopping list number {i}", owner="alice")
    vec = kb.embedder.embed_queries(["rocket launch schedule"])[0]
    hits = kb.store.search_dense(vec, 3, Filters(owner="alice"))
    assert sorted(h.source for h in hits) == ["alice/0.txt", "alice/1.txt", "alice/2.txt"]
    assert kb.store.search_dense(vec, 3, Filters(owner="nobody")) == []


def test_hnsw_insert_and_delete_are_incremental(kb: KnowledgeBase) -> None:
    kb.add_text("one.txt", "apples and pears")
    vec = kb.embedder.embed_queries(["apples and pears"])[0]
    assert kb.store.search_dense(vec, 1)[0].source == "one.txt"
    kb.add_text("two.txt", "submarine periscope sonar")
    assert kb.store.check()["vectors"] == 2
    assert kb.remove("one.txt") == 1
    assert kb.store.check() == {"chunks": 1, "bm25_docs": 1, "vectors": 1, "orphan_chunks": 0}
    assert [h.source for h in kb.store.search_dense(vec, 5)] == ["two.txt"]
    assert kb.store.search_bm25("apples", 5) == []
    assert kb.remove("one.txt") == 0


@pytest.mark.parametrize("damage", ["missing", "corrupt", "stale"])
def test_a_missing_corrupt_or_stale_index_is_rebuilt_from_stored_vectors(tmp_path: Path, damage: str) -> None:
    emb = HashEmbedder()
    kb = KnowledgeBase.open(tmp_path, emb)
    kb.add_text("a.txt", "alpha beta gamma")
    kb.close()
    index = tmp_path / INDEX_NAME
    saved = index.read_bytes()
    if damage == "missing":
        index.unlink()
    elif damage == "corrupt":
        index.write_bytes(b"\x00garbage" * 10)
    kb = KnowledgeBase.open(tmp_path, emb)
    if damage == "stale":  # written after the index was saved (a crash before the save): generations differ
        kb.add_text("b.txt", "delta epsilon")
        kb.store._dirty = False  # simulate the crash: the new index is never saved
        kb.store._db.close()
        index.write_bytes(saved)
        kb = KnowledgeBase.open(tmp_path, emb)
    assert kb.store.check()["vectors"] == kb.store.check()["chunks"]
    vec = emb.embed_queries(["alpha beta gamma"])[0]
    assert kb.store.search_dense(vec, 1)[0].source == "a.txt"
    kb.close()


def test_versions_expiry_and_conflicts(kb: KnowledgeBase) -> None:
    assert kb.add_text("policy.md", "Refunds within 14 days.").status == "added"
    assert kb.add_text("policy.md", "Refunds within 14 days.").status == "unchanged"
    r = kb.add_text("policy.md", "Refunds within 30 days.")
    assert (r.status, r.version, r.message) == ("updated", 2, "replaces version 1 (kept)")
    current = kb.search("refunds days", 5)
    assert [h.chunk.version for h in current.hits] == [2] and current.conflicts == []
    history = kb.search("refunds days", 5, filters=Filters(all_versions=True))
    assert sorted(h.chunk.version for h in history.hits) == [1, 2]
    assert history.conflicts == [
        {
            "source": "policy.md",
            "versions": [1, 2],
            "note": "several versions of this source match; they are not merged",
        }
    ]
    assert [d.version for d in kb.store.versions("policy.md")] == [1, 2]
    kb.add_text("promo.md", "Summer refunds promotion", expires_at=time.time() - 1)
    assert all(h.chunk.source != "promo.md" for h in kb.search("summer promotion", 5).hits)
    expired = kb.search("summer promotion", 5, filters=Filters(include_expired=True))
    assert expired.hits[0].chunk.source == "promo.md"


def test_validity_window_filters_by_time(kb: KnowledgeBase) -> None:
    kb.add_text("rule.md", "Office opens at 9", valid_from=1000.0)
    kb.add_text("rule.md", "Office opens at 8", valid_from=2000.0)
    at_1500 = kb.search("office opens", 5, "bm25", Filters(all_versions=True, at=1500.0))
    assert [h.chunk.text for h in at_1500.hits] == ["Office opens at 9"]
    at_2500 = kb.search("office opens", 5, "bm25", Filters(all_versions=True, at=2500.0))
    assert [h.chunk.text for h in at_2500.hits] == ["Office opens at 8"]


@pytest.mark.parametrize("query", ['"', "AND OR NOT", "NEAR(", "*", "a:b", "'; DROP TABLE chunks; --", "\x00", ""])
def test_hostile_queries_are_plain_words(kb: KnowledgeBase, query: str) -> None:
    kb.add_text("x.txt", "and or not near drop table chunks")
    kb.search(query, 5, "bm25")  # never an FTS5 syntax error
    kb.search(query, 5, "hybrid")
    assert kb.store.check()["chunks"] == 1


def test_fts_query_drops_stopwords_unless_nothing_is_left() -> None:
    assert fts_query("When did Caroline go?") == '"caroline" OR "go"'
    assert fts_query("what is it") == '"what" OR "is" OR "it"'
    assert fts_query("!!!") is None


def test_two_processes_writers_see_each_others_vectors(tmp_path: Path) -> None:
    emb = HashEmbedder()
    a = KnowledgeBase.open(tmp_path, emb)
    b = KnowledgeBase.open(tmp_path, emb)  # e.g. a running agent and `kairos kb add`
    try:
        a.add_text("a.txt", "alpha beta gamma")
        assert [h.chunk.source for h in b.search("alpha beta gamma", 5, "dense").hits] == ["a.txt"]
        b.add_text("b.txt", "submarine periscope")
        a.add_text("c.txt", "volcano lava")
        assert b.store.check() == {"chunks": 3, "bm25_docs": 3, "vectors": 3, "orphan_chunks": 0}
        assert a.search("submarine periscope", 1, "dense").hits[0].chunk.source == "b.txt"
        assert b.search("volcano lava", 1, "dense").hits[0].chunk.source == "c.txt"
    finally:
        a.close()
        b.close()
    reopened = KnowledgeBase.open(tmp_path, emb)
    assert reopened.store.check()["vectors"] == 3
    reopened.close()
