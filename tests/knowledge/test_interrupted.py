"""An ingest killed halfway (SIGKILL, mid-transaction) leaves nothing of that document behind."""

from __future__ import annotations

import textwrap
from pathlib import Path

from kairos.knowledge import HashEmbedder, KnowledgeBase
from tests.support.crash import kill_9_at

CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from kairos.knowledge import HashEmbedder, KnowledgeBase
    from kairos.knowledge.store import ChunkIn, DocumentIn

    kb = KnowledgeBase.open(Path(sys.argv[1]), HashEmbedder())
    emb = kb.embedder

    def chunks():
        for i in range(1000):
            if i == 500:
                print("halfway", flush=True)
                time.sleep(600)  # killed here, inside the transaction
            yield ChunkIn(f"big document chunk {i}", i), emb.embed_passages([f"big document chunk {i}"])[0]

    kb.store.add_document(DocumentIn("big.txt", "text", "digest-big"), chunks())
    print("finished", flush=True)
    """
)


def test_a_killed_ingest_rolls_back_and_the_base_stays_consistent(tmp_path: Path) -> None:
    state = tmp_path / ".kairos"
    kb = KnowledgeBase.open(state, HashEmbedder())
    assert kb.add_text("small.txt", "a small document that was there before").status == "added"
    kb.close()
    kill_9_at(CHILD, "halfway", str(state))
    kb = KnowledgeBase.open(state, HashEmbedder())
    try:
        assert kb.store.get_document("big.txt") is None
        assert kb.store.check() == {"chunks": 1, "bm25_docs": 1, "vectors": 1, "orphan_chunks": 0}
        assert {h.chunk.source for h in kb.search("big chunk", 50, "bm25").hits} <= {"small.txt"}
        assert kb.search("small document", 1).hits[0].chunk.source == "small.txt"
        assert kb.add_text("big.txt", "the ingest can be repeated").status == "added"  # nothing is locked
    finally:
        kb.close()
