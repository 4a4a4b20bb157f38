"""``lexical``: the knowledge base's lexical search when the store is PostgreSQL — full-text search in
the database, or the embedded tantivy BM25 index kept beside the rows (issue 26 §2).

Why a bench: PostgreSQL's ``ts_rank``/``ts_rank_cd`` are not BM25 (no idf, no length saturation),
so the question is whether they find what kairos's BM25 finds, not only how fast. Corpus: every
LoCoMo turn one chunk (``[date] speaker: text``, as the knowledge base writes it), all
conversations in one table, each question searched within its own conversation (the owner filter);
truth is the question's evidence turns. Engines: ``embedded`` (``TantivyBM25``, what kairos runs,
an OR of the question's terms), ``pg_fts_or_cd`` (``to_tsquery('english', 'a | b | …')`` ranked by
``ts_rank_cd``), ``pg_fts_or`` (same, ``ts_rank``) and ``pg_fts_web`` (``websearch_to_tsquery``,
AND semantics, ``ts_rank_cd``). Agreement is against the embedded top 10.
"""

from __future__ import annotations

import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.knowledge.bm25 import TantivyBM25
from kairos.testing.servers import PostgresServer
from kairos_bench._locomo import DEFAULT_DATA, conversation_files, norm_id, read_conversation
from kairos_bench._stats import percentile

K = 10
ENGINES = ("embedded", "pg_fts_or_cd", "pg_fts_or", "pg_fts_web")
_WORD = re.compile(r"[a-z0-9]+")
_DDL = (
    "CREATE TABLE chunks (id bigint PRIMARY KEY, owner text NOT NULL, text text NOT NULL, "
    "tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED)"
)
_SQL = {
    "pg_fts_or_cd": "SELECT id FROM chunks, to_tsquery('english', %s) q WHERE owner = %s AND tsv @@ q "
    "ORDER BY ts_rank_cd(tsv, q) DESC, id LIMIT %s",
    "pg_fts_or": "SELECT id FROM chunks, to_tsquery('english', %s) q WHERE owner = %s AND tsv @@ q "
    "ORDER BY ts_rank(tsv, q) DESC, id LIMIT %s",
    "pg_fts_web": "SELECT id FROM chunks, websearch_to_tsquery('english', %s) q WHERE owner = %s AND tsv @@ q "
    "ORDER BY ts_rank_cd(tsv, q) DESC, id LIMIT %s",
}

Chunk = tuple[int, str, str, str]
"""``(id, owner, dia_id, text)``."""
Query = tuple[str, str, set[str]]
"""``(owner, question, evidence dia_ids)``."""


def corpus(data: Path, names: Sequence[str] | None, limit: int | None) -> tuple[list[Chunk], list[Query]]:
    """Every turn of the chosen conversations as a chunk, and their questions (``limit`` per conversation)."""
    chunks: list[Chunk] = []
    queries: list[Query] = []
    for path in conversation_files(data, names):
        conv = read_conversation(path)
        for t in conv.turns:
            when = f"[{t.when}] " if t.when else ""
            chunks.append((len(chunks) + 1, conv.name, t.turn_id, f"{when}{t.speaker}: {t.text}"))
        qs = [q for q in conv.qa if q.get("evidence") and q.get("question")]
        for q in qs[:limit] if limit else qs:
            evidence = {norm_id(str(e)) for e in q["evidence"]}
            queries.append((conv.name, str(q["question"]), evidence))
    return chunks, queries


def or_query(question: str) -> str:
    """``a | b | c`` for ``to_tsquery``: BM25's OR semantics (plainto/websearch AND every word)."""
    return " | ".join(dict.fromkeys(_WORD.findall(question.lower()))) or "nothing"


def _recall(ids: list[int], evidence: set[str], dia: dict[int, str]) -> float:
    return len({dia[i] for i in ids[:K]} & evidence) / len(evidence)


def _embedded(chunks: list[Chunk], queries: list[Query]) -> tuple[dict[str, Any], list[list[int]]]:
    folder = Path(tempfile.mkdtemp(prefix="kairos-lexical-bench-"))
    try:
        index = TantivyBM25(folder / "bm25")
        t0 = time.perf_counter()
        index.rebuild(((c[0], c[3], c[1], c[1], "conversation") for c in chunks), len(chunks))
        ingest_s = time.perf_counter() - t0
        ms: list[float] = []
        ranked: list[list[int]] = []
        for owner, question, _ in queries:
            t0 = time.perf_counter()
            terms = index.terms(_WORD.findall(question.lower()))
            hits = index.search(index.query(terms, owner, (), None, ()), K) if terms else []
            ms.append((time.perf_counter() - t0) * 1000)
            ranked.append([i for i, _ in hits])
        return {"ingest_s": ingest_s, "ms": ms}, ranked
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _pg(url: str, chunks: list[Chunk], queries: list[Query]) -> tuple[dict[str, Any], dict[str, list[list[int]]]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS chunks")
        conn.execute(_DDL)
        conn.execute("CREATE INDEX chunks_tsv ON chunks USING gin (tsv)")
        conn.execute("CREATE INDEX chunks_owner ON chunks (owner)")
        t0 = time.perf_counter()
        with conn.transaction(), conn.cursor().copy("COPY chunks (id, owner, text) FROM STDIN") as copy:
            for c in chunks:
                copy.write_row((c[0], c[1], c[3]))
        ingest_s = time.perf_counter() - t0
        conn.execute("ANALYZE chunks")
        ms: dict[str, list[float]] = {e: [] for e in _SQL}
        ranked: dict[str, list[list[int]]] = {e: [] for e in _SQL}
        for engine, sql in _SQL.items():
            for owner, question, _ in queries:
                arg = or_query(question) if engine != "pg_fts_web" else question
                t0 = time.perf_counter()
                rows = conn.execute(sql, (arg, owner, K)).fetchall()
                ms[engine].append((time.perf_counter() - t0) * 1000)
                ranked[engine].append([int(r[0]) for r in rows])
    return {"ingest_s": ingest_s, "ms": ms}, ranked


def _plain_rows_s(url: str, chunks: list[Chunk]) -> float:
    """Rows/s of the same rows into PostgreSQL without a tsvector or GIN index (the embedded design's table)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS plain")
        conn.execute("CREATE TABLE plain (id bigint PRIMARY KEY, owner text NOT NULL, text text NOT NULL)")
        t0 = time.perf_counter()
        with conn.transaction(), conn.cursor().copy("COPY plain (id, owner, text) FROM STDIN") as copy:
            for c in chunks:
                copy.write_row((c[0], c[1], c[3]))
        return len(chunks) / (time.perf_counter() - t0)


def _agreement(a: list[int], b: list[int]) -> tuple[float, float, float]:
    """Top-10 overlap (|A∩B|/10), Jaccard, and whether the first hits agree."""
    sa, sb = set(a[:K]), set(b[:K])
    union = sa | sb
    return len(sa & sb) / K, (len(sa & sb) / len(union) if union else 1.0), float(a[:1] == b[:1])


def run(
    console: Console | None = None,
    data: Path | None = None,
    conversations: Sequence[str] | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """Index every LoCoMo turn in both engines, search every question, compare."""
    console = console or Console()
    chunks, queries = corpus(Path(data or DEFAULT_DATA), conversations, limit)
    dia = {c[0]: c[2] for c in chunks}
    console.print(f"lexical: {len(chunks)} chunks, {len(queries)} questions")
    emb, emb_ranked = _embedded(chunks, queries)
    server = PostgresServer.start(settings={"fsync": "off", "shared_buffers": "256MB"})
    try:
        pg, pg_ranked = _pg(server.url, chunks, queries)
        plain_rows_s = _plain_rows_s(server.url, chunks)
    finally:
        server.stop()
    ranked = {"embedded": emb_ranked, **pg_ranked}
    ms = {"embedded": emb["ms"], **pg["ms"]}
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"chunks": len(chunks), "questions": len(queries)}
    for engine in ENGINES:
        recall = [_recall(r, q[2], dia) for r, q in zip(ranked[engine], queries, strict=True)]
        agree = [_agreement(r, e) for r, e in zip(ranked[engine], emb_ranked, strict=True)]
        ingest_s = emb["ingest_s"] if engine == "embedded" else pg["ingest_s"]
        row = {
            "engine": engine,
            "recall_at_10": round(statistics.fmean(recall), 4),
            "top10_overlap": round(statistics.fmean(a[0] for a in agree), 4),
            "top10_jaccard": round(statistics.fmean(a[1] for a in agree), 4),
            "top1_agree": round(statistics.fmean(a[2] for a in agree), 4),
            "empty_results": sum(not r for r in ranked[engine]),
            "query_ms_p50": round(percentile(ms[engine], 0.5), 3),
            "query_ms_p95": round(percentile(ms[engine], 0.95), 3),
            "ingest_rows_per_s": round(len(chunks) / ingest_s, 1),
        }
        rows.append(row)
        summary[f"recall10_{engine}"] = row["recall_at_10"]
        summary[f"query_ms_p50_{engine}"] = row["query_ms_p50"]
        summary[f"query_ms_p95_{engine}"] = row["query_ms_p95"]
        summary[f"top10_overlap_{engine}"] = row["top10_overlap"]
        console.print(row)
    summary["pg_plain_rows_per_s"] = round(plain_rows_s, 1)
    best_pg = max(ENGINES[1:], key=lambda e: summary[f"recall10_{e}"])
    summary["best_pg_fts"] = best_pg
    summary["recall10_pg_fts"] = summary[f"recall10_{best_pg}"]
    summary["top10_overlap"] = summary[f"top10_overlap_{best_pg}"]
    summary["query_ms_p50_pg_fts"] = summary[f"query_ms_p50_{best_pg}"]
    # Embedded unless PostgreSQL's best FTS is at least as good at recall (it then needs no per-process index).
    summary["chosen"] = "pg_fts" if summary["recall10_pg_fts"] >= summary["recall10_embedded"] else "embedded"
    params = {"data": "locomo", "conversations": list(conversations or []), "limit": limit, "k": K}
    return {"bench": "lexical", "params": params, "rows": rows, "summary": summary}
