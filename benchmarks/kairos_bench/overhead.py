"""``overhead``: harness time per turn, model time excluded, at 10/100/1,000 history messages.

The same turn (one tool call, then an answer) on a zero-latency fake model, for kairos and,
side by side in the same process, openai-agents' ``Runner`` and LangGraph's prebuilt ReAct
agent. ``kairos`` is the product agent (``build_agent``: default config, every default plugin on:
defences, status bar, skills, compression); ``kairos_core`` is a bare ``Agent`` without plugins.
Both include what kairos always does: persisting every message and inbox event to SQLite, the
prefix audit and the token budget check.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.agent import Agent
from kairos.app import build_agent
from kairos.config import KairosConfig
from kairos.context.session import SessionStore
from kairos.models.base import TokenEstimator
from kairos.models.types import (
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningPolicy,
    ResponseDone,
    StreamEvent,
    SystemPrompt,
    ToolCall,
)
from kairos.tools.function import tool
from kairos_bench import _peers

SIZES = (10, 100, 1000)


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


class ZeroLatencyModel:
    """Answers instantly: a tool call on odd calls, a final answer on even ones."""

    name = "zero-latency"
    context_window = 10_000_000
    reasoning_policy = ReasoningPolicy.KEEP_ALL

    def __init__(self) -> None:
        self.calls = 0
        self.model_s = 0.0
        self.count_tokens = TokenEstimator()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        t0 = time.perf_counter()
        self.calls += 1
        if self.calls % 2 == 1:
            msg = Message.assistant("", (ToolCall(f"c{self.calls}", "echo", '{"text": "hi"}'),))
        else:
            msg = Message.assistant("done")
        event = ResponseDone(ModelResponse(msg))
        self.model_s += time.perf_counter() - t0
        yield event


def kairos_runner(history_pairs: int, tmp: Path, product: bool = True) -> Any:
    model = ZeroLatencyModel()
    ws = tmp / f"ws-{history_pairs}-{product}"
    ws.mkdir()
    if product:
        agent = build_agent(model, ws, KairosConfig(), tools=[echo])
    else:
        agent = Agent(model, tools=[echo], system=SystemPrompt("You are a test agent."))
    store = SessionStore(ws)
    session = store.new()
    for i in range(history_pairs):
        session.append(
            Message.user(f"question {i}: " + "lorem ipsum " * 8),
            Message.assistant(f"answer {i}: " + "dolor sit amet " * 8),
        )

    async def turn() -> float:
        before = model.model_s
        async for _ in agent.run(session, "next"):
            pass
        return model.model_s - before

    return turn


async def _measure(turn: Any, repeats: int) -> list[float]:
    await turn()  # warm-up: imports, caches, first-request audit
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model_s = await turn()
        times.append(time.perf_counter() - t0 - model_s)
    return times


def run(console: Console | None = None, quick: bool = False, sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    console = console or Console()
    repeats = 5 if quick else 30
    peers: dict[str, Any] = {
        "kairos": None,
        "kairos_core": None,
        "openai_agents": _peers.openai_agents_runner,
        "langgraph": _peers.langgraph_runner,
    }
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        for messages in sizes:
            for harness, factory in peers.items():
                pairs = messages // 2
                product = harness == "kairos"
                turn = kairos_runner(pairs, Path(d), product) if factory is None else factory(pairs)
                times = asyncio.run(_measure(turn, repeats))
                med = statistics.median(times)
                rows.append(
                    {
                        "harness": harness,
                        "history_messages": messages,
                        "repeats": repeats,
                        "median_ms": round(med * 1000, 3),
                        "p90_ms": round(sorted(times)[int(0.9 * (len(times) - 1))] * 1000, 3),
                    }
                )
                console.print(f"overhead  {harness:14s} {messages:5d} msgs  median {med * 1000:8.2f} ms/turn")
    at_max = {r["harness"]: r["median_ms"] for r in rows if r["history_messages"] == max(sizes)}
    summary = {
        "kairos_ms_at_max": at_max["kairos"],
        "kairos_core_ms_at_max": at_max["kairos_core"],
        "ratio_openai_agents": round(at_max["openai_agents"] / at_max["kairos"], 2),
        "ratio_langgraph": round(at_max["langgraph"] / at_max["kairos"], 2),
    }
    return {
        "bench": "overhead",
        "params": {
            "sizes": list(sizes),
            "repeats": repeats,
            "turn": "one tool call + answer",
            "unit": "ms/turn",
            "kairos": "product agent (build_agent, default config, every default plugin)",
        },
        "rows": rows,
        "summary": summary,
    }
