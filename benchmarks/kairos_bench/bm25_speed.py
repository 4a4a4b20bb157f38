"""``bm25-speed``: our BM25 (tantivy through the knowledge store) vs SQLite FTS5, ``bm25s`` and ``rank-bm25``.

Corpus: every turn of the LoCoMo conversations in the data folder, replicated until there are
``docs`` documents (default 100,000); replica ``r`` of a turn ends with the token ``rep<r>`` so the
copies are distinct documents. Queries: the LoCoMo questions (up to ``queries`` of them).

The peers score the same tokens: the exact token streams SQLite's FTS5 tokenizer (porter,
unicode61, the store's former configuration) makes of each turn and query, read back through
``fts5vocab``. The query is the store's :func:`~kairos.knowledge.records.fts_query` (an OR of the
words, stopwords dropped); every engine gets the same words. ``bm25s`` uses ``method="robertson"``,
k1 = 1.2, b = 0.75, which is FTS5's formula; rank-bm25 is ``BM25Okapi`` with the same k1 and b.
Where tantivy cannot match: it tokenizes with its own analyzer (Unicode words, lower case, ASCII
folding, Snowball English stems rather than Porter), uses Lucene's idf (``ln(1 + (N-n+0.5)/(n+0.5))``,
never negative) and one-byte document lengths; k1 and b are the same fixed 1.2 and 0.75.

Our queries go through ``SQLiteKnowledgeStore.search_bm25`` (the product path: tantivy's top list
joined to chunks and documents with the default filters). "tantivy alone" is the store's index
queried without the join; "SQLite FTS5 alone" is an FTS5 table of the same texts (the engine the
store used before), queried without a join. Replicas make exact score ties, so top-10
agreement is tie-aware: one of our top 10 agrees when bm25s scores it at least as high as bm25s's
own 10th result (relative tolerance 1e-4, bm25s computes in float32). Incremental insert: one new
single-turn document added to the built store (one transaction: rows, tantivy commit, vector index).
bm25s and rank-bm25 have no incremental insert: adding a document means rebuilding the index, and
that rebuild time is what is reported for them.
"""

from __future__ import annotations

import json
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from kairos.knowledge.records import fts_query
from kairos.knowledge.store import ChunkIn, DocumentIn, Filters, SQLiteKnowledgeStore
from kairos_bench._stats import percentile
from kairos_bench.locomo_retrieval import DEFAULT_DATA, load_turns

K = 10
K1, B = 1.2, 0.75
BLOCK = 1000  # chunks per stored document
DIM = 4  # the store needs vectors; BM25 ignores them
_RAW_SQL = "SELECT rowid, rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?"
"""SQLite FTS5 alone (the store's engine before tantivy): no join to chunks and documents, no filters."""


def _tantivy_version() -> str:
    from importlib.metadata import version

    return version("tantivy")


def load_corpus(folder: Path) -> tuple[list[str], list[str]]:
    """The turns' texts and the questions of every LoCoMo file in ``folder``."""
    files = sorted(folder.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no LoCoMo conversation files (*.json) in {folder}")
    turns: list[str] = []
    questions: list[str] = []
    for path in files:
        conv = json.loads(path.read_text(encoding="utf-8"))
        turns.extend(t.text for t in load_turns(conv.get("conversation", conv)))
        questions.extend(str(q["question"]) for q in conv.get("qa", []) if q.get("question"))
    return turns, questions


def replicate(turns: Sequence[str], docs: int) -> list[str]:
    """``docs`` documents: the turns over and over, replica ``r`` tagged ``rep<r>``."""
    return [f"{turns[i % len(turns)]} rep{i // len(turns)}" for i in range(docs)]


def fts_tokens(texts: Sequence[str]) -> list[list[str]]:
    """The tokens the store's FTS5 tokenizer makes of each text, in order (read back via fts5vocab)."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5 (text, tokenize = 'porter unicode61 remove_diacritics 2')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab (t, instance)")
    db.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", ((i + 1, s) for i, s in enumerate(texts)))
    out: list[list[tuple[int, str]]] = [[] for _ in texts]
    for term, doc, offset in db.execute("SELECT term, doc, offset FROM v"):
        out[doc - 1].append((offset, term))
    db.close()
    return [[term for _, term in sorted(toks)] for toks in out]


def query_words(question: str) -> str:
    """The words the store's query keeps (stopwords dropped), space-joined for the tokenizer."""
    match = fts_query(question)
    return " ".join(w.strip('"') for w in match.split(" OR ")) if match else ""


def build_fts5(path: Path, corpus: Sequence[str]) -> float:
    """An FTS5 table of ``corpus`` in its own database at ``path`` (rowid = index + 1); returns seconds."""
    t0 = time.perf_counter()
    db = sqlite3.connect(path)
    db.execute("CREATE VIRTUAL TABLE fts USING fts5 (text, tokenize = 'porter unicode61 remove_diacritics 2')")
    db.executemany("INSERT INTO fts (rowid, text) VALUES (?, ?)", ((i + 1, s) for i, s in enumerate(corpus)))
    db.commit()
    db.close()
    return time.perf_counter() - t0


def build_store(folder: Path, corpus: Sequence[str], console: Console) -> SQLiteKnowledgeStore:
    """Our index: the corpus as documents of :data:`BLOCK` chunks each (chunk id = corpus index + 1)."""
    store = SQLiteKnowledgeStore(folder, DIM, "bench-bm25")
    rng = np.random.default_rng(0)
    for b in range(0, len(corpus), BLOCK):
        block = corpus[b : b + BLOCK]
        vecs = rng.standard_normal((len(block), DIM)).astype(np.float32)
        chunks = ((ChunkIn(text, pos), vecs[pos]) for pos, text in enumerate(block))
        store.add_document(DocumentIn(f"block-{b // BLOCK}", "text", f"d{b}"), chunks)
        if (b // BLOCK) % 20 == 0:
            console.print(f"bm25-speed: stored {b + len(block):,} / {len(corpus):,}")
    store.flush()
    return store


def timed_rounds(
    engines: Mapping[str, tuple[Callable[[int], object], int]], repeats: int, console: Console
) -> dict[str, tuple[float, list[float]]]:
    """Per engine: median queries per second over ``repeats`` passes, and per-query ms of all passes.

    The engines take turns within each round, so a machine that gets busier or quieter during the
    run slows them alike.
    """
    rates: dict[str, list[float]] = {name: [] for name in engines}
    lat: dict[str, list[float]] = {name: [] for name in engines}
    for r in range(repeats):
        for name, (search, n) in engines.items():
            console.print(f"bm25-speed: round {r + 1}/{repeats}: {name}, {n} queries")
            t0 = time.perf_counter()
            for i in range(n):
                t1 = time.perf_counter()
                search(i)
                lat[name].append((time.perf_counter() - t1) * 1000)
            rates[name].append(n / (time.perf_counter() - t0))
    return {name: (statistics.median(rates[name]), lat[name]) for name in engines}


def agreement(ours: Sequence[int], scores: np.ndarray) -> float | None:
    """Tie-aware top-10 overlap of ``ours`` with the engine whose per-document ``scores`` are given."""
    positive = int((scores > 0).sum())
    want = min(K, positive)
    if want == 0:
        return None
    tenth = float(np.partition(scores, -want)[-want])
    cut = tenth - 1e-4 * max(1.0, abs(tenth))
    return min(want, sum(1 for d in ours[:K] if scores[d] >= cut)) / want


def run(
    console: Console | None = None,
    *,
    quick: bool = False,
    docs: int | None = None,
    queries: int = 500,
    repeats: int = 3,
    rank_bm25_queries: int = 50,
    data: Path | None = None,
    model: str | None = None,  # accepted from `kairos bench`; no chat model is used
) -> dict[str, Any]:
    """Build the three indexes on the same corpus and time them on the same queries."""
    import bm25s  # type: ignore[import-untyped]  # ships no type information
    from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]  # ships no type information

    console = console or Console(stderr=True)
    folder = (data or DEFAULT_DATA).resolve()
    n_docs = docs or (10_000 if quick else 100_000)
    if quick:
        queries, repeats, rank_bm25_queries = min(queries, 100), 1, min(rank_bm25_queries, 20)
    turns, questions = load_corpus(folder)
    corpus = replicate(turns, n_docs)
    rng = random.Random(0)
    picked = rng.sample(questions, min(queries, len(questions)))
    console.print(f"bm25-speed: {len(turns):,} turns → {n_docs:,} documents; {len(picked)} queries")

    turn_tokens = fts_tokens(turns)
    doc_tokens = [[*turn_tokens[i % len(turns)], f"rep{i // len(turns)}"] for i in range(n_docs)]
    q_tokens = [list(dict.fromkeys(t)) for t in fts_tokens([query_words(q) for q in picked])]
    console.print("bm25-speed: building bm25s and rank-bm25")
    t0 = time.perf_counter()
    retriever = bm25s.BM25(k1=K1, b=B, method="robertson")
    retriever.index(doc_tokens, show_progress=False)
    build_bm25s = time.perf_counter() - t0
    vocab = retriever.vocab_dict
    q_known = [[t for t in q if t in vocab] for q in q_tokens]
    t0 = time.perf_counter()
    okapi = BM25Okapi(doc_tokens, k1=K1, b=B)
    build_rank = time.perf_counter() - t0
    n_rank = min(rank_bm25_queries, len(picked))
    rank_scores: list[np.ndarray] = [np.zeros(0)] * n_rank
    matches = [fts_query(q) for q in picked]
    ours_top: list[list[int]] = [[] for _ in picked]
    any_time = Filters(all_versions=True)

    with tempfile.TemporaryDirectory(prefix="kairos-bm25-") as tmp:
        t0 = time.perf_counter()
        store = build_store(Path(tmp), corpus, console)
        build_ours = time.perf_counter() - t0
        build_fts = build_fts5(Path(tmp) / "fts5.db", corpus)
        raw = sqlite3.connect(Path(tmp) / "fts5.db")
        bm25 = store._bm25  # the store's own index, queried without the join
        t_queries = [bm25.query(bm25.terms(query_words(q).split()), None, (), None, ()) for q in picked]
        try:

            def ours(i: int) -> None:
                ours_top[i] = [h.chunk_id - 1 for h in store.search_bm25(picked[i], K, any_time)]

            def fts_alone(i: int) -> None:
                if matches[i]:
                    raw.execute(_RAW_SQL, (matches[i], K)).fetchall()

            def tantivy_alone(i: int) -> None:
                bm25.search(t_queries[i], K)

            def peer(i: int) -> None:
                if q_known[i]:
                    retriever.retrieve([q_known[i]], k=K, show_progress=False, n_threads=1)

            def rank(i: int) -> None:
                rank_scores[i] = okapi.get_scores(q_tokens[i])

            n = len(picked)
            engines = {"ours": (ours, n), "tantivy": (tantivy_alone, n), "raw": (fts_alone, n), "bm25s": (peer, n)}
            timing = timed_rounds(engines, repeats, console)
            timing |= timed_rounds({"rank": (rank, n_rank)}, 1, console)
            inserts: list[float] = []
            for j in range(30 if not quick else 5):
                t1 = time.perf_counter()
                doc = DocumentIn(f"insert-{j}", "text", f"i{j}")
                store.add_document(doc, [(ChunkIn(f"{turns[j % len(turns)]} new{j}", 0), np.ones(DIM))])
                inserts.append((time.perf_counter() - t1) * 1000)
            db_bytes = sum(f.stat().st_size for f in Path(tmp).iterdir() if f.name.startswith("knowledge.db"))
            tantivy_bytes = bm25.size_bytes()
        finally:
            raw.close()
            store.close()
    agree = [
        a
        for i, q in enumerate(q_known)
        if q and (a := agreement(ours_top[i], np.asarray(retriever.get_scores(q)))) is not None
    ]
    agree_rank = [a for i in range(n_rank) if (a := agreement(ours_top[i], rank_scores[i])) is not None]
    (qps_ours, lat_ours), (qps_raw, lat_raw), (qps_tan, lat_tan) = timing["ours"], timing["raw"], timing["tantivy"]
    (qps_bm25s, lat_bm25s), (qps_rank, lat_rank) = timing["bm25s"], timing["rank"]

    rows = [
        {
            "engine": f"kairos (tantivy {_tantivy_version()} via search_bm25)",
            "qps": round(qps_ours, 1),
            "latency_p50_ms": round(percentile(lat_ours, 0.5), 2),
            "latency_p95_ms": round(percentile(lat_ours, 0.95), 2),
            "index_build_s": round(build_ours, 2),
            "index_build_note": "includes writing rows, vectors (4-d, random), tantivy and the HNSW index",
            "insert_p50_ms": round(percentile(inserts, 0.5), 2),
            "insert_p95_ms": round(percentile(inserts, 0.95), 2),
            "insert": f"incremental: one new document, one transaction ({len(inserts)} inserts)",
            "db_bytes": db_bytes,
            "tantivy_bytes": tantivy_bytes,
            "queries": len(picked),
        },
        {
            "engine": "tantivy alone (the store's index, no join or filters: the ceiling of our path)",
            "qps": round(qps_tan, 1),
            "latency_p50_ms": round(percentile(lat_tan, 0.5), 2),
            "latency_p95_ms": round(percentile(lat_tan, 0.95), 2),
            "queries": len(picked),
        },
        {
            "engine": "SQLite FTS5 alone (porter unicode61, no join or filters; the store's engine before)",
            "qps": round(qps_raw, 1),
            "latency_p50_ms": round(percentile(lat_raw, 0.5), 2),
            "latency_p95_ms": round(percentile(lat_raw, 0.95), 2),
            "index_build_s": round(build_fts, 2),
            "queries": len(picked),
        },
        {
            "engine": f"bm25s {bm25s.__version__} (robertson, numpy)",
            "qps": round(qps_bm25s, 1),
            "latency_p50_ms": round(percentile(lat_bm25s, 0.5), 2),
            "latency_p95_ms": round(percentile(lat_bm25s, 0.95), 2),
            "index_build_s": round(build_bm25s, 2),
            "insert_p50_ms": round(build_bm25s * 1000, 1),
            "insert": "no incremental insert: adding a document rebuilds the index (the build time)",
            "queries": len(picked),
            "top10_agreement_with_kairos": round(statistics.fmean(agree), 4) if agree else None,
        },
        {
            "engine": "rank-bm25 0.2.2 (BM25Okapi)",
            "qps": round(qps_rank, 2),
            "latency_p50_ms": round(percentile(lat_rank, 0.5), 2),
            "latency_p95_ms": round(percentile(lat_rank, 0.95), 2),
            "index_build_s": round(build_rank, 2),
            "insert_p50_ms": round(build_rank * 1000, 1),
            "insert": "no incremental insert: adding a document rebuilds the index (the build time)",
            "queries": n_rank,
            "top10_agreement_with_kairos": round(statistics.fmean(agree_rank), 4) if agree_rank else None,
        },
    ]
    summary = {
        "qps_ours": rows[0]["qps"],
        "qps_tantivy_alone": rows[1]["qps"],
        "qps_fts5_alone": rows[2]["qps"],
        "qps_bm25s": rows[3]["qps"],
        "qps_ratio_bm25s": round(qps_ours / qps_bm25s, 3) if qps_bm25s else None,
        "qps_ratio_rank_bm25": round(qps_ours / qps_rank, 1) if qps_rank else None,
        "top10_agreement": rows[3]["top10_agreement_with_kairos"],
        "top10_agreement_rank_bm25": rows[4]["top10_agreement_with_kairos"],
        "insert_p50_ms": rows[0]["insert_p50_ms"],
        "insert_p95_ms": rows[0]["insert_p95_ms"],
        "target_qps_ratio_bm25s": 1.0,
        "target_top10_agreement": 0.95,
    }
    params = {
        "data": str(folder),
        "turns": len(turns),
        "docs": n_docs,
        "queries": len(picked),
        "rank_bm25_queries": n_rank,
        "repeats": repeats,
        "k": K,
        "k1": K1,
        "b": B,
        "tokens": "peers: FTS5 porter unicode61 tokens (read back through fts5vocab); ours: tantivy's analyzer "
        "(Unicode words, lower case, ASCII folding, Snowball English stems)",
        "bm25": "k1 1.2, b 0.75 everywhere; tantivy uses Lucene's idf and one-byte document lengths",
        "agreement": "tie-aware: ours in the top 10 when the peer scores it >= its own 10th score",
        "threads": "one (bm25s n_threads=1; SQLite and a tantivy search are single-threaded per query)",
        "quick": quick,
    }
    return {"bench": "bm25-speed", "params": params, "rows": rows, "summary": summary}
