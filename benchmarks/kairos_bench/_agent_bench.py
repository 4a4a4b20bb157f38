"""What the two agent benches (``email-agent``, ``async-agent``) share: the product's agent, metering, waiting.

The agent is the product's (:func:`kairos.app.build_agent`: bundled system prompt, built-in tools,
default plugins) plus the runtime tools a scenario needs. One config change keeps the prompt lean
for the 1.5B model on two cores: skills are off (no catalog message and no ``load_skill`` /
``read_skill_file`` schemas); nothing else is removed. Costs are read back from the runtime's bus
(``agent.request`` / ``agent.tool_started`` records), so the benches measure what a front end sees.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from kairos.agent import Agent
from kairos.app import build_agent
from kairos.config import KairosConfig
from kairos.models.base import Model
from kairos.models.types import Message
from kairos.runtime import Runtime
from kairos.runtime.outbound import AgentRequest, AgentToolStarted
from kairos.tools.base import Tool

N_CTX = 8192


def bench_config(instructions: str = "", builtins: Sequence[str] | None = None) -> KairosConfig:
    """The default config with skills off; ``instructions`` is the operator's standing instruction.

    ``builtins``: ``[tools] builtins`` (None: the default, all of them).
    """
    data: dict[str, Any] = {"instructions": instructions, "skills": {"enabled": False}}
    if builtins is not None:
        data["tools"] = {"builtins": list(builtins)}
    return KairosConfig.model_validate(data)


def make_agent(
    model: Model, workspace: Path, tools: Sequence[Tool], instructions: str = "", builtins: Sequence[str] | None = None
) -> Agent:
    """The product's agent with the runtime tools ``tools`` added."""
    return build_agent(model, workspace, bench_config(instructions, builtins), tools=list(tools))


@dataclass(frozen=True, slots=True)
class Usage:
    """What a stretch of a session cost, from the bus."""

    model_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def to_record(self) -> dict[str, int]:
        """The row fields."""
        return {
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


def usage_since(rt: Runtime, session: str, cursor: int) -> Usage:
    """Model calls, tool calls and tokens the session published after ``cursor``."""
    calls = tools = prompt = completion = 0
    after = cursor
    history = getattr(rt.bus, "history", None)
    if history is None:
        return Usage()
    while True:
        page = history(session, after)
        for ev in page:
            match ev.payload:
                case AgentRequest() as req:
                    calls += 1
                    prompt += req.prompt_tokens
                    completion += req.completion_tokens
                case AgentToolStarted():
                    tools += 1
            after = ev.cursor
        if len(page) < 1000:
            return Usage(calls, tools, prompt, completion)


def calls_since(rt: Runtime, session: str, cursor: int, limit: int = 160) -> list[str]:
    """``name(arguments)`` of the tool calls the session started after ``cursor`` (arguments cut at ``limit``)."""
    history = getattr(rt.bus, "history", None)
    if history is None:
        return []
    started = [ev.payload for ev in history(session, cursor, 10_000)]
    return [f"{p.name}({p.arguments[:limit]})" for p in started if isinstance(p, AgentToolStarted)]


def calls_in(messages: Sequence[Message]) -> list[tuple[int, str, dict[str, Any]]]:
    """Every tool call of a trajectory: (message index, name, parsed arguments or {})."""
    found = []
    for i, m in enumerate(messages):
        for c in m.tool_calls:
            found.append((i, c.name, _args(c.arguments)))
    return found


def _args(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def until(check: Callable[[], bool], timeout_s: float, step_s: float = 0.2) -> bool:
    """Poll ``check`` until it holds (True) or ``timeout_s`` passes (False)."""
    try:
        async with asyncio.timeout(timeout_s):
            while not check():  # noqa: ASYNC110 (polls state in databases and servers)
                await asyncio.sleep(step_s)
    except TimeoutError:
        return False
    return True


async def settle(rt: Runtime, session: str, timeout_s: float) -> bool:
    """Wait until the session is idle; on timeout interrupt it and report False."""
    try:
        await rt.wait_idle(session, timeout_s)
    except TimeoutError:
        rt.interrupt(session, "the bench's time for this scenario ran out")
        try:
            await rt.wait_idle(session, 60)
        except TimeoutError:
            pass
        return False
    return True


def mean(values: Sequence[float]) -> float | None:
    """Rounded mean, None for no values."""
    return round(sum(values) / len(values), 3) if values else None


def median(values: Sequence[float]) -> float | None:
    """Rounded median, None for no values."""
    return round(statistics.median(values), 2) if values else None


def success_summary(rows: Sequence[dict[str, Any]], scenarios: Sequence[str], key: str) -> dict[str, Any]:
    """``key`` (mean success over scenarios × trials), per-scenario success, median seconds and costs."""
    summary: dict[str, Any] = {key: mean([1.0 if r["success"] else 0.0 for r in rows])}
    for name in scenarios:
        mine = [1.0 if r["success"] else 0.0 for r in rows if r["scenario"] == name]
        summary[f"{name}_success"] = mean(mine)
    summary["trials"] = len({r["trial"] for r in rows})
    summary["median_seconds"] = median([r["seconds"] for r in rows])
    summary["median_model_calls"] = median([r["model_calls"] for r in rows])
    summary["median_prompt_tokens"] = median([r["prompt_tokens"] for r in rows])
    return summary


__all__ = [
    "N_CTX",
    "Usage",
    "bench_config",
    "calls_in",
    "calls_since",
    "make_agent",
    "mean",
    "median",
    "settle",
    "success_summary",
    "until",
    "usage_since",
]


TrialFn = Callable[[int, Callable[[], None]], Awaitable[list[dict[str, Any]]]]
"""Runs trial ``i``, calling the progress function once per scenario; returns its rows."""


async def run_trials(
    console: Console, name: str, trials: int, per_trial: int, trial: TrialFn, shown: str
) -> list[dict[str, Any]]:
    """Every trial in turn, with a progress bar (one step per scenario) and one line per row."""
    rows: list[dict[str, Any]] = []
    with Progress(console=console, transient=False) as bar:
        task = bar.add_task(name, total=trials * per_trial)
        for i in range(trials):
            bar.update(task, description=f"{name} trial {i + 1}/{trials}")
            got = await trial(i, lambda: bar.advance(task))
            rows.extend(got)
            for r in got:
                verdict = "ok" if r["success"] else "FAIL"
                console.print(
                    f"  trial {i} {r['scenario']:9s} {verdict:4s} {r['seconds']:6.1f} s "
                    f"{r['model_calls']} calls  {r[shown]}  {r['checks']}"
                )
    return rows
