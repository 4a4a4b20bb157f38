"""``kairos bench bfcl``: BFCL v4 on the bundled model, kairos constrained decoding vs the plain template.

Five categories of the Berkeley Function Calling Leaderboard (simple, multiple, parallel,
parallel_multiple, irrelevance), read from the ``bfcl-eval`` wheel's ``data/`` and
``data/possible_answer/`` (installed ``--no-deps``: ``make`` does it; we only read its files).
Each case runs two ways on ONE loaded GGUF:

* ``kairos``: one :class:`~kairos.models.local.LocalModel` request with the functions as
  ``ToolSpec``s; the reply's tool calls (its grammar allows several calls or a plain answer).
* ``kairos_gate``: the same reply behind the tool-relevance gate (``[tools.relevance_gate]``,
  :mod:`kairos.plugins.relevance`): when the model's own ``P(call)`` at the reply's branch point is
  below the threshold the reply is text only, i.e. no call. Derived from ``kairos`` plus one
  scoring pass on the same prompt (no second generation: a gated reply has no call by construction).
* ``plain``: the GGUF's own chat template rendered with the tools (Qwen2.5's ``<tool_call>``
  convention), greedy decoding without a grammar, calls parsed generously from the text.

``--calibrate`` scores ``P(call)`` on the next ``limit`` cases of each category (disjoint from the
scored ones) and reports the threshold that best separates irrelevance from the rest.

Scored like BFCL's AST checker (:mod:`kairos_bench._bfcl_score`). For irrelevance, correct means
no call. ``--limit N`` takes the first N cases of each category.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.errors import ConfigError
from kairos.models.base import Model
from kairos.models.local import LocalModel
from kairos.models.types import Message, ModelRequest, ResponseDone, ToolSpec
from kairos.plugins.relevance import gate_p_call
from kairos.tools.toolsets.config import RelevanceConfig
from kairos_bench._bfcl_score import CATEGORIES, Call, parse_calls, score

WAYS = ("kairos", "kairos_gate", "plain")
DEFAULT_LIMIT = 25
MAX_TOKENS = 256
_FILES = {"simple": "simple_python"}
_TYPES = {
    "integer": "integer",
    "float": "number",
    "number": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "dict": "object",
    "object": "object",
    "any": "string",
}


@dataclass(frozen=True, slots=True)
class Case:
    """One BFCL test case: its messages, functions and possible answers (None for irrelevance)."""

    id: str
    category: str
    messages: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    answers: list[dict[str, Any]] | None


def data_dir() -> Path:
    """The ``data/`` folder of the installed ``bfcl-eval`` wheel (found without importing it)."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "the bfcl bench reads the bfcl-eval wheel's data: pip install --no-deps bfcl-eval (make does it)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def load_cases(category: str, limit: int | None, root: Path | None = None, offset: int = 0) -> list[Case]:
    """``limit`` cases of a category (all when None) after the first ``offset``, each with its possible answers."""
    root = root or data_dir()
    stem = f"BFCL_v4_{_FILES.get(category, category)}.json"
    answers: dict[str, list[dict[str, Any]]] = {}
    if category != "irrelevance":
        answers = {a["id"]: a["ground_truth"] for a in _lines(root / "possible_answer" / stem)}
    cases: list[Case] = []
    for i, raw in enumerate(_lines(root / stem)):
        if limit is not None and len(cases) >= limit:
            break
        if i < offset:
            continue
        turns = raw["question"]
        cases.append(Case(raw["id"], category, list(turns[0]), raw["function"], answers.get(raw["id"])))
    return cases


def json_schema(gorilla: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter schema (``dict``, ``float``, ``tuple``, ``any`` ...) as JSON Schema."""
    out = {k: v for k, v in gorilla.items() if k not in ("type", "properties", "items", "optional")}
    out["type"] = _TYPES.get(str(gorilla.get("type", "string")), "string")
    if isinstance(gorilla.get("properties"), dict):
        out["properties"] = {k: json_schema(v) for k, v in gorilla["properties"].items()}
    if isinstance(gorilla.get("items"), dict):
        out["items"] = json_schema(gorilla["items"])
    return out


def tool_specs(functions: list[dict[str, Any]]) -> tuple[ToolSpec, ...]:
    """The case's functions as kairos sees tools (names unchanged: dots are allowed here)."""
    return tuple(ToolSpec(f["name"], f.get("description", ""), json_schema(f.get("parameters", {}))) for f in functions)


# ---- the two ways --------------------------------------------------------------------------


def kairos_request(case: Case) -> ModelRequest:
    """The case as one request with its functions as tools."""
    system = "\n\n".join(m["content"] for m in case.messages if m["role"] == "system")
    messages = tuple(
        Message.user(m["content"]) if m["role"] == "user" else Message.assistant(m["content"])
        for m in case.messages
        if m["role"] != "system"
    )
    return ModelRequest(system, "", tool_specs(case.functions), messages, max_tokens=MAX_TOKENS)


async def kairos_way(model: Model, case: Case) -> tuple[list[Call], str]:
    """One constrained request; the reply's tool calls (none when it answered in text)."""
    done = None
    async for event in model.stream(kairos_request(case)):
        if isinstance(event, ResponseDone):
            done = event
    assert done is not None
    message = done.response.message
    calls: list[Call] = []
    for c in message.tool_calls:
        try:
            args = json.loads(c.arguments)
        except ValueError:
            args = {"<unparsed>": c.arguments}
        calls.append((c.name, args if isinstance(args, dict) else {"<not an object>": args}))
    return calls, message.raw or message.content


class PlainWay:
    """The GGUF's own chat template with the tools, on the same ``Llama`` as the LocalModel."""

    def __init__(self, model: LocalModel) -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        model.load()
        self.llm: Any = model._llm  # one Llama for both ways (2 GB each); used only between its calls
        meta = self.llm.metadata
        template = meta.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(f"{model.name} has no chat template in its GGUF metadata")
        eos = self.llm.detokenize([self.llm.token_eos()], special=True).decode()
        self.stop = [eos, "<|im_end|>", "<|endoftext|>"]
        self.format = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token="")
        self.lock = model._lock  # the KV cache is shared state: never generate beside the LocalModel

    def prompt(self, case: Case) -> str:
        """The template's rendering of the case's messages with its tools (OpenAI tool form)."""
        tools = [s.to_openai() for s in tool_specs(case.functions)]
        rendered: str = self.format(messages=case.messages, tools=tools).prompt  # type: ignore[arg-type]
        return rendered

    def __call__(self, case: Case) -> tuple[list[Call], str]:
        with self.lock:
            tokens = self.llm.tokenize(self.prompt(case).encode(), add_bos=False, special=True)
            out = self.llm.create_completion(
                tokens, max_tokens=MAX_TOKENS, temperature=0.0, repeat_penalty=1.0, stop=self.stop
            )
        text: str = out["choices"][0]["text"]
        return parse_calls(text), text


# ---- the bench -----------------------------------------------------------------------------


def _row(category: str, way: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(results)
    return {
        "category": category,
        "way": way,
        "n": n,
        "correct": sum(r["ok"] for r in results),
        "accuracy": round(sum(r["ok"] for r in results) / n, 3) if n else None,
        "median_latency_s": round(statistics.median(r["latency_s"] for r in results), 3) if n else None,
    }


def summarise(rows: list[dict[str, Any]], categories: tuple[str, ...] = CATEGORIES) -> dict[str, Any]:
    """Accuracy per category and way; ``lift_overall`` (points) and ``no_category_below_plain`` per kairos way.

    ``lift_overall``/``no_category_below_plain`` are kairos's defaults (gate off); the ``_gate`` keys the same
    with the relevance gate on.
    """
    acc = {(r["category"], r["way"]): r["accuracy"] for r in rows}
    summary: dict[str, Any] = {}
    for cat in categories:
        for way in WAYS:
            summary[f"{cat}_{way}"] = acc.get((cat, way))
    for way, suffix in (("kairos", ""), ("kairos_gate", "_gate")):
        pairs = [(acc.get((c, way)), acc.get((c, "plain"))) for c in categories]
        lifts = [k - p for k, p in pairs if k is not None and p is not None]
        summary[f"lift_overall{suffix}"] = round(100 * statistics.fmean(lifts), 1) if lifts else None
        summary[f"no_category_below_plain{suffix}"] = bool(lifts) and all(x >= 0 for x in lifts)
    return summary


Way = Callable[[Case], tuple[list[Call], str]]


Gate = Callable[[Case], float]
"""``P(call)`` of the kairos request of a case (:func:`kairos.plugins.relevance.gate_p_call`)."""


def evaluate(
    case: Case, ways: dict[str, Way], console: Console, gate: Gate | None = None, threshold: float = 0.5
) -> list[dict[str, Any]]:
    """One case every way: the verdict, the calls, the raw reply and the latency; ``kairos_gate`` from ``kairos``."""
    results = []
    for way, fn in ways.items():
        t0 = time.perf_counter()
        calls, raw = fn(case)
        latency = time.perf_counter() - t0
        results.append(_result(case, way, calls, raw, latency, console))
        if way == "kairos" and gate is not None:
            t0 = time.perf_counter()
            p_call = gate(case)  # after the generation: the prompt's KV state is still there
            results.append(gated(case, results[-1], p_call, time.perf_counter() - t0, threshold, console))
    return results


def _result(case: Case, way: str, calls: list[Call], raw: str, latency: float, console: Console) -> dict[str, Any]:
    verdict = score(case.category, case.functions, calls, case.answers)
    console.log(f"{case.id:24s} {way:11s} {'ok ' if verdict.ok else 'BAD'} {latency:5.1f}s {verdict.reason}")
    return {
        "id": case.id,
        "category": case.category,
        "way": way,
        "ok": verdict.ok,
        "reason": verdict.reason,
        "calls": [{"name": n, "arguments": a} for n, a in calls],
        "raw": raw[:600],
        "latency_s": round(latency, 3),
    }


def gated(
    case: Case, kairos: dict[str, Any], p_call: float, score_s: float, threshold: float, console: Console
) -> dict[str, Any]:
    """The ``kairos_gate`` result from the ``kairos`` one: no call when ``p_call < threshold``, else the same."""
    calls = [(c["name"], c["arguments"]) for c in kairos["calls"]] if p_call >= threshold else []
    raw = kairos["raw"] if p_call >= threshold else "(text only: the gate found no tool relevant)"
    latency = score_s + kairos["latency_s"]
    return {**_result(case, "kairos_gate", calls, raw, latency, console), "p_call": round(p_call, 4)}


def run_rounds(
    rounds: list[list[Case]],
    ways: dict[str, Way],
    console: Console,
    duration: float | None = None,
    checkpoint: Callable[[list[dict[str, Any]]], None] | None = None,
    gate: Gate | None = None,
    threshold: float = 0.5,
) -> tuple[list[dict[str, Any]], int]:
    """Round k runs case k of every category; no new round starts once ``duration`` seconds passed.

    Returns the results and how many rounds completed, so a cut-short run is still the first N
    cases of every category (what ``--limit N`` would have run).
    """
    results: list[dict[str, Any]] = []
    t0 = time.monotonic()
    done = 0
    for k, cases in enumerate(rounds):
        if duration is not None and k and time.monotonic() - t0 > duration:
            console.log(f"--duration {duration:.0f}s reached after {k} rounds")
            break
        for case in cases:
            results += evaluate(case, ways, console, gate, threshold)
        done = k + 1
        if checkpoint is not None:
            checkpoint(results)
    return results, done


def report(
    results: list[dict[str, Any]],
    limit: int,
    model: str,
    categories: tuple[str, ...] = CATEGORIES,
    threshold: float | None = None,
) -> dict[str, Any]:
    """The bench's JSON from per-case results: rows per category x way, failures, summary."""
    ran = [w for w in WAYS if any(r["way"] == w for r in results)]
    rows = [
        _row(cat, way, [r for r in results if r["category"] == cat and r["way"] == way])
        for cat in categories
        for way in ran
    ]
    failures = [{k: r[k] for k in ("id", "way", "reason", "calls")} for r in results if not r["ok"]]
    return {
        "bench": "bfcl",
        "params": {
            "model": model,
            "limit_per_category": limit,
            "categories": list(categories),
            "cases": "the first N of each category in bfcl-eval 2026.3.23's BFCL_v4 data (simple = simple_python)",
            "decoding": "greedy (temperature 0) both ways; kairos = LocalModel's reply grammar, plain = the GGUF's "
            "chat template with the tools, no grammar, calls parsed generously",
            "max_tokens": MAX_TOKENS,
            "accuracy": "fraction correct (BFCL AST rules; irrelevance: no call); lift_overall in points",
            "gate": "kairos_gate = kairos with [tools.relevance_gate] on: no call when P(call) < min_p_call "
            f"({threshold}); its latency adds the scoring pass",
        },
        "rows": rows,
        "failures": failures,
        "summary": {**summarise(rows, categories), "limit": limit},
    }


def _local_gate(local: LocalModel) -> Gate:
    def gate(case: Case) -> float:
        return asyncio.run(gate_p_call(local, kairos_request(case)))

    return gate


def run(
    console: Console | None = None,
    quick: bool = False,
    model: str = "local",
    limit: int | None = None,
    duration: float | None = None,
    categories: tuple[str, ...] = CATEGORIES,
    details_path: Path | None = None,
    calibrate: bool | None = None,
) -> dict[str, Any]:
    """``limit`` cases per category (3 when quick, else 25) every way, fewer if ``duration`` runs out.

    ``calibrate``: instead, ``P(call)`` of the next ``limit`` cases of each category (see :func:`calibration`).
    """
    console = console or Console()
    limit = limit or (3 if quick else DEFAULT_LIMIT)
    if calibrate:
        return calibration(console, model, limit, categories)
    threshold = RelevanceConfig().min_p_call
    by_cat = [load_cases(cat, limit) for cat in categories]
    rounds = [[cases[k] for cases in by_cat if k < len(cases)] for k in range(limit)]
    local = LocalModel(model, n_ctx=8192, prefix_cache=False)
    with console.status(f"loading {model} ..."):
        plain = PlainWay(local)

    def kairos(case: Case) -> tuple[list[Call], str]:
        return asyncio.run(kairos_way(local, case))

    def checkpoint(results: list[dict[str, Any]]) -> None:
        if details_path is not None:
            details_path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")

    ways: dict[str, Way] = {"kairos": kairos, "plain": plain}
    try:
        results, done = run_rounds(rounds, ways, console, duration, checkpoint, _local_gate(local), threshold)
    finally:
        local.close()
    return report(results, done, model, categories, threshold)


MAX_RELEVANT_LOSS = 0.01
"""Calibration: at most this share of held-out relevant cases may be limited to text."""


def best_threshold(scores: list[tuple[bool, float]], max_loss: float = MAX_RELEVANT_LOSS) -> tuple[float, float, float]:
    """The highest ``P(call)`` threshold that limits at most ``max_loss`` of the relevant cases to text.

    ``scores``: (irrelevant?, P(call)) per case. A relevant case limited to text loses an action the user
    needed; an irrelevant case let through only costs what no gate costs. So the gate is set by the
    relevant side and blocks what irrelevance it can under it. Returns the threshold and the shares of
    irrelevant cases blocked and relevant cases lost.
    """
    irrelevant = [p for irr, p in scores if irr]
    relevant = sorted(p for irr, p in scores if not irr)
    if not irrelevant or not relevant:
        raise ValueError("calibration needs both irrelevance and relevant cases")
    allowed = int(max_loss * len(relevant))  # relevant cases that may fall below the threshold
    threshold = relevant[allowed]  # block p < threshold: exactly `allowed` relevant cases (ties aside)
    blocked = sum(p < threshold for p in irrelevant) / len(irrelevant)
    lost = sum(p < threshold for p in relevant) / len(relevant)
    return round(threshold, 4), round(blocked, 3), round(lost, 3)


def calibration(console: Console, model: str, limit: int, categories: tuple[str, ...]) -> dict[str, Any]:
    """``P(call)`` on cases ``limit+1 .. 2*limit`` of each category: held out from the scored first ``limit``."""
    local = LocalModel(model, n_ctx=8192, prefix_cache=False)
    gate = _local_gate(local)
    rows: list[dict[str, Any]] = []
    try:
        for cat in categories:
            for case in load_cases(cat, limit, offset=limit):
                t0 = time.perf_counter()
                p = gate(case)
                rows.append(
                    {"id": case.id, "category": cat, "p_call": round(p, 4), "s": round(time.perf_counter() - t0, 3)}
                )
                console.log(f"{case.id:24s} P(call) {p:.4f}")
    finally:
        local.close()
    threshold, blocked, lost = best_threshold([(r["category"] == "irrelevance", r["p_call"]) for r in rows])
    medians = {
        f"median_p_call_{cat}": round(statistics.median(r["p_call"] for r in rows if r["category"] == cat), 4)
        for cat in categories
        if any(r["category"] == cat for r in rows)
    }
    return {
        "bench": "bfcl-gate-calibration",
        "params": {
            "model": model,
            "cases": f"cases {limit + 1}-{2 * limit} of each category (held out)",
            "rule": f"the highest threshold limiting at most {MAX_RELEVANT_LOSS:.0%} of the relevant cases to text",
        },
        "rows": rows,
        "summary": {"threshold": threshold, "irrelevance_blocked": blocked, "relevant_lost": lost, **medians},
    }
