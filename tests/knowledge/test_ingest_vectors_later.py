"""``kb add`` stores every file first (BM25 finds it at once), then embeds: embedding can fail, be
interrupted or be killed without losing a file, and the next ingest embeds what is left."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kairos.knowledge import EmbeddingError, HashEmbedder, KnowledgeBase
from kairos.knowledge.store import SQLiteKnowledgeStore
from tests.support.crash import kill_9_at

if TYPE_CHECKING:
    from kairos.retrieval.embeddings import Vectors


class FlakyEmbedder(HashEmbedder):
    """The hashing embedder, down when ``down`` is set, and refusing any text that holds ``refuse``."""

    def __init__(self, refuse: str = "") -> None:
        super().__init__()
        self.down = False
        self.refuse = refuse

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        if self.down:
            raise EmbeddingError("the embedding endpoint is unreachable")
        if self.refuse and any(self.refuse in t for t in texts):
            raise EmbeddingError("input too long")
        return super().embed_passages(texts)


def corpus(root: Path, files: int = 3) -> Path:
    docs = root / "docs"
    docs.mkdir()
    for i in range(files):
        (docs / f"animal{i}.md").write_text(f"# Animal {i}\n\nThe animal{i} lives by the river number {i}.\n")
    return docs


def test_files_are_found_by_text_before_any_vector_and_the_next_ingest_embeds_them(tmp_path: Path) -> None:
    docs, embedder = corpus(tmp_path), FlakyEmbedder()
    kb = KnowledgeBase.open(tmp_path / ".kairos", embedder)
    try:
        embedder.down = True
        report = kb.ingest([docs])
        assert [r.status for r in report.results] == ["added"] * 3  # stored although nothing could be embedded
        assert report.embedded == 0 and report.without_vectors == 3 and "unreachable" in report.embed_error
        assert "3 chunks without a vector yet" in report.summary()
        assert Path(kb.search("animal1", 1, "bm25").hits[0].chunk.source).name == "animal1.md"
        assert Path(kb.search("animal2 river", 1, "hybrid").hits[0].chunk.source).name == "animal2.md"
        assert kb.store.check()["vectors"] == 0
        embedder.down = False
        again = kb.ingest([docs])
        assert [r.status for r in again.results] == ["unchanged"] * 3
        assert again.embedded == 3 and again.without_vectors == 0 and again.embed_error == ""
        assert Path(kb.search("animal0 river number 0", 1, "dense").hits[0].chunk.source).name == "animal0.md"
    finally:
        kb.close()


def test_a_chunk_the_embedder_refuses_costs_only_itself(tmp_path: Path) -> None:
    docs = corpus(tmp_path, files=5)
    (docs / "animal3.md").write_text("# Animal 3\n\nPOISON text the endpoint refuses.\n")
    kb = KnowledgeBase.open(tmp_path / ".kairos", FlakyEmbedder(refuse="POISON"))
    try:
        report = kb.ingest([docs])
        assert report.embedded == 4 and report.without_vectors == 1 and "input too long" in report.embed_error
        assert Path(kb.search("POISON", 1, "bm25").hits[0].chunk.source).name == "animal3.md"
    finally:
        kb.close()


def test_vectors_given_later_do_not_make_the_next_open_rebuild_the_text_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = corpus(tmp_path)
    kb = KnowledgeBase.open(tmp_path / ".kairos", HashEmbedder())
    kb.ingest([docs])
    kb.close()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the full-text index was rebuilt: its stamp did not follow the vectors' generation")

    monkeypatch.setattr(SQLiteKnowledgeStore, "rebuild_bm25", refuse)
    kb = KnowledgeBase.open(tmp_path / ".kairos", HashEmbedder())
    try:
        assert Path(kb.search("animal1", 1, "bm25").hits[0].chunk.source).name == "animal1.md"
        assert kb.store.check() == {"chunks": 3, "bm25_docs": 3, "vectors": 3, "orphan_chunks": 0}
    finally:
        kb.close()


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from kairos.knowledge import HashEmbedder, KnowledgeBase

    class Slow(HashEmbedder):
        calls = 0

        def embed_passages(self, texts):
            Slow.calls += 1
            if Slow.calls == 2:
                print("embedding", flush=True)
                time.sleep(600)  # killed here, the first batch of 32 stored
            return super().embed_passages(texts)

    kb = KnowledgeBase.open(Path(sys.argv[1]), Slow())
    kb.ingest([Path(sys.argv[2])])
    """
)


def test_an_ingest_killed_while_embedding_keeps_every_file_and_the_batches_done(tmp_path: Path) -> None:
    docs, state = corpus(tmp_path, files=40), tmp_path / ".kairos"
    kill_9_at(CHILD, "embedding", str(state), str(docs))
    kb = KnowledgeBase.open(state, HashEmbedder())
    try:
        assert kb.store.check() == {"chunks": 40, "bm25_docs": 40, "vectors": 32, "orphan_chunks": 0}
        assert Path(kb.search("animal39", 1, "bm25").hits[0].chunk.source).name == "animal39.md"
        report = kb.ingest([docs])
        assert report.embedded == 8 and report.without_vectors == 0
        assert kb.store.check()["vectors"] == 40
    finally:
        kb.close()
