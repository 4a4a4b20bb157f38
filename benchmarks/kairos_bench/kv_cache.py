"""``kv-cache`` (book Exp 2-3): what context layout does to prefix-cache reuse and latency.

One 6-turn tool-using session on the bundled model, run in five variants:

- ``kairos``: the product agent (``build_agent`` with the default config and every default plugin:
  stable prefix, append-only trajectory, trailing status, skills catalog, defences, compression);
- ``timestamp``: the same, with the current time (microseconds) at the head of the system prompt;
- ``reorder``: the same, with the tool list rotated on every request;
- ``window``: the same, sending only the last 6 trajectory messages;
- ``flatten``: the same, with the trajectory flattened into one "USER:/ASSISTANT:/TOOL:" text message.

The two prefix anti-patterns are what a careless harness would send, so they are applied to the
request on its way to the model; the two trajectory ones are views (plugins). The status bar
reads a simulated clock, so every variant sees the same times.

Per request we record prompt tokens, tokens llama.cpp actually reused, tokens a perfect prefix
cache could have reused (longest common prefix with what the previous request left in the KV
cache), TTFT and total time. The model decides its own tool calls in every variant, so the
trajectories may differ: that is part of what the experiment shows.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.agent import Agent, Plugin
from kairos.agent.events import FinalAnswer, RequestStats, ToolCallFinished
from kairos.app import build_agent
from kairos.config import KairosConfig
from kairos.context.session import SessionStore, SessionView
from kairos.models.local import LocalModel
from kairos.models.types import Message, ModelRequest, StreamEvent
from kairos.plugins.status_bar import StatusBarConfig
from kairos.tools.builtins.clock import CLOCK_RESOURCE
from kairos.tools.function import tool
from kairos_bench._observe import ViewPlugin

VARIANTS = ("kairos", "timestamp", "reorder", "window", "flatten")
TURNS = (
    "What time is it in Tokyo right now?",
    "What is the weather in Paris?",
    "List the files in the notes folder.",
    "Read notes/todo.txt and tell me the first item on it.",
    "And what is the weather in Oslo?",
    "Which two cities did I ask about the weather for?",
)
FIXED_NOW = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)
WEATHER = {"paris": "14 °C, light rain", "oslo": "-3 °C, snow", "tokyo": "11 °C, clear"}


@tool
def get_weather(city: str) -> str:
    """Current weather of a city (temperature and conditions). Use it for any weather question.

    Args:
        city: city name, e.g. "Paris"
    """
    return f"{city}: {WEATHER.get(city.strip().lower(), '18 °C, cloudy')}"


def timestamp_first(req: ModelRequest, n: int) -> ModelRequest:
    """Anti-pattern 1: ``Current time: <now>`` at the head of the system prompt."""
    stamp = f"Current time: {datetime.now():%Y-%m-%d %H:%M:%S.%f}\n\n"
    return _replace(req, system_static=stamp + req.system_static)


def rotate_tools(req: ModelRequest, n: int) -> ModelRequest:
    """Anti-pattern 3: tools reordered on every request (here: rotated by one per request)."""
    k = n % max(len(req.tools), 1)
    return _replace(req, tools=req.tools[k:] + req.tools[:k])


REWRITES = {"timestamp": timestamp_first, "reorder": rotate_tools}


class WindowView:
    """Anti-pattern 5: a sliding window of the last ``n`` messages."""

    def __init__(self, n: int = 6) -> None:
        self.n = n

    def apply(self, session: SessionView, messages: Sequence[Message]) -> Sequence[Message]:
        """The last ``n`` messages."""
        return messages[-self.n :]


class FlattenView:
    """Anti-pattern 6: the whole trajectory hand-concatenated into one user message."""

    def apply(self, session: SessionView, messages: Sequence[Message]) -> Sequence[Message]:
        """One user message with the whole history as text."""
        lines = []
        for m in messages:
            if m.role == "assistant" and m.tool_calls:
                calls = "; ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
                lines.append(f"ASSISTANT: {m.content} [calls: {calls}]".replace(":  [", ": ["))
            else:
                lines.append(f"{m.role.upper()}: {m.content}")
        return [Message.user("\n".join(lines))]


def _replace(req: ModelRequest, **changes: Any) -> ModelRequest:
    from dataclasses import replace

    return replace(req, **changes)


class MeasuredModel:
    """Wraps the local model: applies a variant's request anti-pattern (what a careless harness would
    send) and records, before each call, what a perfect prefix cache could reuse."""

    def __init__(self, inner: LocalModel) -> None:
        self.inner = inner
        self.name = inner.name
        self.context_window = inner.context_window
        self.reasoning_policy = inner.reasoning_policy
        self.perfect: list[int] = []
        self.variant = "kairos"
        self.calls = 0

    def _sent(self, request: ModelRequest) -> ModelRequest:
        rewrite = REWRITES.get(self.variant)
        return rewrite(request, self.calls) if rewrite is not None else request

    def count_tokens(self, request: ModelRequest) -> int:
        return self.inner.count_tokens(self._sent(request))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        sent = self._sent(request)
        self.calls += 1
        self.perfect.append(self.inner.common_prefix_with_cache(sent))
        async for event in self.inner.stream(sent):
            yield event


def make_agent(variant: str, model: MeasuredModel, workspace: Path) -> Agent:
    """The product agent (default config, every default plugin) with the variant's anti-pattern."""
    model.variant, model.calls = variant, 0
    config = KairosConfig(status_bar=StatusBarConfig(clock_start=FIXED_NOW))
    views: dict[str, list[Plugin]] = {"window": [ViewPlugin(WindowView(6))], "flatten": [ViewPlugin(FlattenView())]}
    return build_agent(model, workspace, config, tools=[get_weather], plugins=views.get(variant, []))


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "todo.txt").write_text("1. buy milk\n2. call the bank\n3. book flights to Oslo\n")
    (ws / "notes" / "ideas.md").write_text("# Ideas\n- a garden on the roof\n")
    return ws


async def run_variant(variant: str, model: MeasuredModel, root: Path, console: Console) -> list[dict[str, Any]]:
    ws = root / variant
    ws.mkdir()
    ws = _workspace(ws)
    store = SessionStore(ws)
    session = store.new(variant)
    session.tool_context.put(CLOCK_RESOURCE, lambda: FIXED_NOW)
    agent = make_agent(variant, model, ws)
    model.inner.reset_cache()
    model.perfect.clear()
    rows: list[dict[str, Any]] = []
    try:
        for turn, text in enumerate(TURNS, start=1):
            tools_called: list[str] = []
            answer = ""
            async for event in agent.run(session, text):
                if isinstance(event, RequestStats):
                    u = event.usage
                    rows.append(
                        {
                            "variant": variant,
                            "turn": turn,
                            "request": event.index,
                            "prompt_tokens": u.prompt_tokens,
                            "cached_tokens": u.cached_prompt_tokens,
                            "perfect_reusable_tokens": model.perfect[event.index],
                            "ttft_s": round(u.ttft_s or 0.0, 3),
                            "total_s": round(u.total_s, 3),
                            "prefix_ok": event.audit.ok,
                        }
                    )
                elif isinstance(event, ToolCallFinished):
                    tools_called.append(event.call.name)
                elif isinstance(event, FinalAnswer):
                    answer = event.text
            console.print(f"kv-cache  {variant:9s} turn {turn}: tools {tools_called or '-'} → {answer[:70]!r}")
            for row in rows:
                if row["turn"] == turn:
                    row["answer"] = answer[:200]
                    row["tools"] = tools_called
    finally:
        await session.aclose()
        store.close()
    return rows


def _share(rows: list[dict[str, Any]], num: str, den: str) -> float:
    later = [r for r in rows if r["turn"] >= 2]
    d = sum(r[den] for r in later)
    return round(sum(r[num] for r in later) / d, 4) if d else 0.0


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by = {v: [r for r in rows if r["variant"] == v] for v in VARIANTS}
    by = {v: rs for v, rs in by.items() if rs}

    def ttft(v: str) -> float:
        return float(statistics.median(r["ttft_s"] for r in by[v] if r["turn"] >= 2))

    summary: dict[str, Any] = {}
    if "kairos" in by:
        summary["cached_share_kairos"] = _share(by["kairos"], "cached_tokens", "prompt_tokens")
        summary["reuse_efficiency_kairos"] = _share(by["kairos"], "cached_tokens", "perfect_reusable_tokens")
    if "kairos" in by and "timestamp" in by:
        summary["ttft_ratio_timestamp"] = round(ttft("timestamp") / max(ttft("kairos"), 1e-6), 2)
    for v, rs in by.items():
        summary[f"cached_share_{v}"] = _share(rs, "cached_tokens", "prompt_tokens")
        summary[f"median_ttft_s_{v}"] = round(ttft(v), 3)
        summary[f"total_s_{v}"] = round(sum(r["total_s"] for r in rs), 1)
    return summary


async def _first_request_ttft(model: LocalModel, root: Path) -> float:
    """TTFT of a brand-new process's first request (a fresh LocalModel stands in for the process)."""
    ws = _workspace(root)
    store = SessionStore(ws)
    session = store.new()
    agent = make_agent("kairos", MeasuredModel(model), ws)
    ttft = 0.0
    try:
        async for event in agent.run(session, TURNS[0]):
            if isinstance(event, RequestStats):
                ttft = event.usage.ttft_s or 0.0
                session.interrupt()  # one request is enough
    finally:
        await session.aclose()
        store.close()
    return ttft


def disk_prefix_rows(model_name: str, root: Path, console: Console) -> list[dict[str, Any]]:
    """Cold first request vs. one that loads the system prefix's KV state from disk."""
    rows = []
    for label, use_disk in (("prime", True), ("disk_prefix", True), ("cold", False)):
        m = LocalModel(model_name, n_ctx=8192, prefix_cache=use_disk)
        m.load()
        d = root / f"first-{label}"
        d.mkdir()
        ttft = asyncio.run(_first_request_ttft(m, d))
        m.close()
        if label != "prime":
            rows.append({"variant": f"first_request_{label}", "ttft_s": round(ttft, 3)})
            console.print(f"kv-cache  first request ({label}): TTFT {ttft:.2f} s")
    return rows


def run(
    console: Console | None = None, quick: bool = False, model: str = "local", variants: Sequence[str] = VARIANTS
) -> dict[str, Any]:
    console = console or Console()
    inner = LocalModel(model, n_ctx=8192, prefix_cache=False)  # measure in-process reuse only
    with console.status(f"loading {model} ..."):
        inner.load()
    measured = MeasuredModel(inner)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        for variant in variants:
            rows += asyncio.run(run_variant(variant, measured, Path(d), console))
        inner.close()
        first = disk_prefix_rows(model, Path(d), console)
    return {
        "bench": "kv-cache",
        "params": {
            "model": model,
            "turns": list(TURNS),
            "variants": list(variants),
            "window_messages": 6,
            "n_ctx": 8192,
            "summary_over": "turns >= 2",
        },
        "rows": rows + first,
        "summary": {**summarise(rows), **{f"{r['variant']}_ttft_s": r["ttft_s"] for r in first}},
    }
