"""``async-agent`` (book Exp 6-2, scenarios 1-4) on the bundled model with real background commands.

Per trial: a fresh workspace holding small shell scripts and a runtime with a
:class:`~kairos.runtime.integrations.tasks.TaskManager`; each scenario runs in its own session. The agent is
the product's (:func:`kairos.app.build_agent`) plus the task tools (``start_command``,
``monitor_shell``, ``task_status``, ``cancel_task``, ``wait_task``); skills are off to keep the
prompt lean. The user's messages are plain requests (three phrasings, one per trial, since the
model decodes greedily); none names a tool. Events go through the default router (no classifier):
user messages queue, ``user.interrupt`` interrupts.

Each scenario has a budget of 180 s for all its waits (then the turn is interrupted and scored). As
under ``kairos serve``, a tool call still running after ``[runtime] background_after_s`` (30 s) goes
on as a task, so a job the model ran with ``bash`` can be cancelled too.

1. ``time``: "run ./analyse_logs.sh (it takes a while) and tell me the result"; once the task runs
   the user asks "What time is it?". Success: an answer giving the current UTC time (±2 min) comes
   before the command's result reaches the model, and an answer after it reports the result.
2. ``batch``: "run ./sales_report.sh and write a short report from its output"; once it runs, "Don't
   forget to reply in Japanese." and "Format it as a web page." arrive. Success: what the agent
   produced after the result (its last answer, or a file it wrote) is Japanese and HTML.
3. ``interrupt``: "rebuild the index with ./rebuild_index.sh"; 5 s after the task starts the user
   interrupts: "Never mind". Success: the task ends cancelled, and the trajectory holds the user's
   message and, after it, a ``cancel_task`` call for that task.
4. ``parallel``: three scripts printing ``progress N%`` at 3, 2 and 1 %/s (the book's rates; which
   script is which rotates per trial) are to be started at once; "when the first finishes, check
   the others, cancel any that hasn't passed 50%". Success: the 1 %/s task is cancelled below 50 %,
   the 2 %/s one is not cancelled, the 3 %/s one finished.

The scripts' durations (40 s, 30 s, 120 s, and 34/50/100 s for the jobs) keep a trial under
about six minutes on two cores while leaving the model seconds of slack for every decision.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.config import RuntimeConfig
from kairos.context.session import SessionStore
from kairos.models.base import Model
from kairos.models.types import Message
from kairos.runtime import Event, Runtime
from kairos.runtime.integrations.tasks import TaskManager, tools
from kairos_bench._agent_bench import (
    N_CTX,
    calls_in,
    calls_since,
    make_agent,
    run_trials,
    settle,
    success_summary,
    until,
    usage_since,
)
from kairos_bench._local import bench_model, model_name

SCENARIOS = ("time", "batch", "interrupt", "parallel")
ANALYSE = (
    "Please run ./analyse_logs.sh, it takes a while. Tell me its result when it is done.",
    "Can you analyse the logs with ./analyse_logs.sh? It is slow; report the result when it finishes.",
    "Start ./analyse_logs.sh (a slow log analysis) and let me know what it finds.",
)
REPORT = (
    "Run ./sales_report.sh (it takes a while) and write me a short sales report from its output.",
    "Please produce the sales figures with ./sales_report.sh, it is slow, then write a short report on them.",
    "Generate the sales data with ./sales_report.sh and give me a brief report about it when it is done.",
)
INDEX = (
    "Rebuild the search index with ./rebuild_index.sh; it takes a few minutes.",
    "Please run ./rebuild_index.sh to rebuild the index (it is slow).",
    "Start rebuilding the index: ./rebuild_index.sh. It runs for a few minutes.",
)
NEVER_MIND = ("Never mind.", "Never mind, I don't need it any more.", "Never mind, stop that.")
JOBS = ("north", "south", "east")
PARALLEL = (
    "Run these three scripts at once: ./north.sh, ./south.sh and ./east.sh. When the first one finishes, "
    "check the progress of the others and cancel any that hasn't passed 50%.",
    "Start ./north.sh, ./south.sh and ./east.sh together. As soon as one of them is done, look at how far the "
    "other two are and cancel those below 50%.",
    "Please launch ./north.sh, ./south.sh and ./east.sh in parallel. When the first completes, check the others' "
    "progress; cancel any that is not past 50%.",
)
JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
HTML = re.compile(r"<\s*(html|body|h1|h2|p|table|div|ul)\b", re.IGNORECASE)
START_S = 120.0
"""How long a scenario waits for the agent to start its first command."""
CLOCK = re.compile(r"(?<!\d)(\d{1,2}):(\d{2})(?!\d)")
"""A time of day, also inside an ISO timestamp (``2026-12-01T04:27:15``)."""


def write_scripts(ws: Path, trial: int, speed: float = 1.0) -> dict[str, Any]:
    """The trial's scripts (durations divided by ``speed``); returns what scoring needs (tokens, job rates)."""
    anomalies, units = 3 + trial * 4, 120 + trial * 35
    rates = dict(zip(JOBS, [(3, 2, 1), (1, 3, 2), (2, 1, 3)][trial % 3], strict=True))
    scripts = {
        "analyse_logs.sh": (
            f'echo "analysing 3 log files"\nsleep {40 / speed:g}\necho "analysis: {anomalies} anomalies"\n'
        ),
        "sales_report.sh": (
            f'echo "collecting Q3 sales"\nsleep {30 / speed:g}\necho "Q3 sales: {units} units, best product: kettle"\n'
        ),
        "rebuild_index.sh": (
            f'echo "indexing"\nfor i in $(seq 1 120); do sleep {1 / speed:g}; echo "indexed ${{i}}00 documents"; done\n'
        ),
    }
    tick = 1.0 / speed
    for name, rate in rates.items():
        scripts[f"{name}.sh"] = (
            f"p=0\nwhile [ $p -lt 100 ]; do sleep {tick:g}; p=$((p+{rate})); [ $p -gt 100 ] && p=100; "
            f'echo "progress $p%"; done\necho "{name}: {rate * 11} rows analysed"\n'
        )
    for name, text in scripts.items():
        path = ws / name
        path.write_text("#!/bin/sh\n" + text, encoding="utf-8")
        path.chmod(0o755)
    return {"anomalies": str(anomalies), "units": str(units), "rates": rates}


def _user(text: str, sid: str, kind: str = "user.input") -> Event:
    return Event(kind, text, {"type": "user"}, "bench", session=sid)


def _answers(messages: Sequence[Message]) -> list[tuple[int, str]]:
    """(index, text) of the assistant's answers (text without tool calls)."""
    return [(i, m.content) for i, m in enumerate(messages) if m.role == "assistant" and m.content.strip()]


def _first(messages: Sequence[Message], pred: Any, start: int = 0) -> int:
    return next((i for i, m in enumerate(messages) if i >= start and pred(m)), -1)


def _result_index(messages: Sequence[Message], token: str) -> int:
    """Where the command's result first reaches the model (a task result event or a wait_task result)."""
    return _first(messages, lambda m: m.role in ("user", "tool") and token in m.content)


def _clock_ok(text: str, lo: datetime, hi: datetime) -> bool:
    """Whether ``text`` gives a time of day between ``lo`` and ``hi`` (UTC, 12- or 24-hour)."""
    wanted: set[tuple[int, int]] = set()
    t = lo.replace(second=0, microsecond=0)
    while t <= hi:
        wanted |= {(t.hour, t.minute), (t.hour % 12 or 12, t.minute)}
        t += timedelta(minutes=1)
    return any((int(h), int(m)) in wanted for h, m in CLOCK.findall(text))


def score_time(messages: Sequence[Message], token: str, asked: datetime, task_status: str) -> dict[str, Any]:
    """Scenario 1: the time answered before the result arrived, the result reported after it."""
    q = _first(messages, lambda m: m.role == "user" and "What time is it?" in m.content)
    r = _result_index(messages, token)
    before = [t for i, t in _answers(messages) if q >= 0 and q < i and (r < 0 or i < r)]
    lo, hi = asked - timedelta(minutes=2), datetime.now(UTC) + timedelta(minutes=1)
    time_ok = any(_clock_ok(t, lo, hi) for t in before)
    reported = r >= 0 and any(token in t for i, t in _answers(messages) if i > r)
    checks = {"time_answered_first": time_ok, "result_reported": reported, "task": task_status}
    return {"success": time_ok and reported and task_status == "done", "checks": checks}


def score_batch(messages: Sequence[Message], token: str) -> dict[str, Any]:
    """Scenario 2: the output after the result is Japanese and HTML (answer text or a written file)."""
    r = _result_index(messages, f"Q3 sales: {token} units")
    outputs = [t for i, t in _answers(messages) if r >= 0 and i > r]
    last = outputs[-1] if outputs else ""
    writes = [(i, args) for i, name, args in calls_in(messages) if name == "write_file"]
    files = [str(args.get("content", "")) for i, args in writes if r >= 0 and i > r]
    candidates = [last, *files]
    both = any(JAPANESE.search(c) and HTML.search(c) for c in candidates)
    checks = {
        "result_seen": r >= 0,
        "japanese": any(JAPANESE.search(c) for c in candidates),
        "html": any(HTML.search(c) for c in candidates),
        "has_figure": any(token in c for c in candidates),
        "as_file": any(JAPANESE.search(c) and HTML.search(c) for c in files),
    }
    return {"success": both, "checks": checks}


def score_interrupt(messages: Sequence[Message], text: str, task_id: str, task_status: str) -> dict[str, Any]:
    """Scenario 3: cancelled, with the interrupt and (after it) the cancel_task call in the trajectory."""
    q = _first(messages, lambda m: m.role == "user" and text in m.content)
    cancels = [i for i, name, args in calls_in(messages) if name == "cancel_task" and args.get("task_id") == task_id]
    cancel_after = q >= 0 and any(i > q for i in cancels)
    checks = {"interrupt_recorded": q >= 0, "cancel_call": cancel_after, "task": task_status}
    return {"success": cancel_after and task_status == "cancelled", "checks": checks}


def score_parallel(
    tasks: Mapping[str, tuple[str, float | None]], rates: Mapping[str, int], statuses: int
) -> dict[str, Any]:
    """Scenario 4: by rate, (status, percent at the end) of each job's task; ``statuses``: task_status calls."""
    by_rate = {rate: tasks.get(name, ("missing", None)) for name, rate in rates.items()}
    fast, mid, slow = by_rate[3], by_rate[2], by_rate[1]
    slow_ok = slow[0] == "cancelled" and slow[1] is not None and slow[1] < 50
    ok = fast[0] == "done" and mid[0] != "cancelled" and mid[0] != "missing" and slow_ok
    checks = {
        "fast": fast[0],
        "mid": f"{mid[0]} at {mid[1]}%",
        "slow": f"{slow[0]} at {slow[1]}%",
        "started": sum(1 for s, _ in tasks.values() if s != "missing"),
        "status_queries": statuses,
    }
    return {"success": ok, "checks": checks}


async def _scenario(
    rt: Runtime, manager: TaskManager, scenario: str, trial: int, facts: dict[str, Any], timeout_s: float, speed: float
) -> dict[str, Any]:
    """Run one scenario in a new session; the row without trial fields."""
    v = trial % 3
    sid = rt.create_session(f"{scenario} {trial}")
    cursor = rt.bus.last_cursor()
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout_s

    def left(at_least: float = 5.0) -> float:
        """Seconds left of the scenario's budget (every wait shares it)."""
        return max(at_least, deadline - time.monotonic())

    def started(n: int = 1) -> bool:
        return len(manager.tasks_of(sid)) >= n

    def running() -> bool:
        return any(t.status == "running" for t in manager.tasks_of(sid))

    def started_or_turn_over() -> bool:
        """A task runs, or the agent ended its turn without starting one (a wrong turn is not waited for)."""
        return started() or (not rt.busy(sid) and usage_since(rt, sid, cursor).model_calls > 0)

    asked = datetime.now(UTC)
    if scenario == "time":
        await rt.submit(_user(ANALYSE[v], sid))
        if await until(started_or_turn_over, min(START_S, left())):
            asked = datetime.now(UTC)
            await rt.submit(_user("What time is it?", sid))
        await until(lambda: not running(), left())
    elif scenario == "batch":
        await rt.submit(_user(REPORT[v], sid))
        if await until(started_or_turn_over, min(START_S, left())):
            await rt.submit(_user("Don't forget to reply in Japanese.", sid))
            await rt.submit(_user("Format it as a web page.", sid))
        await until(lambda: not running(), left())
    elif scenario == "interrupt":
        await rt.submit(_user(INDEX[v], sid))
        if await until(started_or_turn_over, min(START_S, left())):
            await asyncio.sleep(5 / speed)
            await rt.submit(_user(NEVER_MIND[v], sid, "user.interrupt"))
    else:
        await rt.submit(_user(PARALLEL[v], sid))
        await until(started_or_turn_over, min(START_S, left()))
        await until(lambda: not running(), left())
    done = await settle(rt, sid, left(20.0))
    if scenario == "interrupt":  # a cancel requested at the very end may still be killing the group
        await until(lambda: not running(), 15)
    seconds = time.perf_counter() - t0
    messages = rt.store.trajectories.load_messages(sid)
    tasks = manager.tasks_of(sid)
    first = tasks[0] if tasks else None
    status = first.status if first else "not started"
    if scenario == "time":
        verdict = score_time(messages, f"{facts['anomalies']} anomalies", asked, status)
    elif scenario == "batch":
        verdict = score_batch(messages, facts["units"])
    elif scenario == "interrupt":
        verdict = score_interrupt(messages, NEVER_MIND[v], first.id if first else "", status)
    else:
        jobs = {}
        for t in tasks:
            name = next((j for j in JOBS if f"{j}.sh" in t.command), "")
            if name and name not in jobs:
                jobs[name] = (t.status, t.percent)
        n_status = sum(1 for _, name, _ in calls_in(messages) if name == "task_status")
        verdict = score_parallel(jobs, facts["rates"], n_status)
    for t in manager.tasks_of(sid):  # nothing outlives its scenario
        if t.status == "running":
            await manager.cancel(t.id)
    answers = _answers(messages)
    return {
        "scenario": scenario,
        "success": verdict["success"],
        "seconds": round(seconds, 2),
        **usage_since(rt, sid, cursor).to_record(),
        "timed_out": not done,
        "checks": verdict["checks"],
        "calls": calls_since(rt, sid, cursor),
        "answer": answers[-1][1][:300] if answers else "",
    }


async def run_trial(
    llm: Model,
    trial: int,
    root: Path,
    *,
    speed: float = 1.0,
    timeout_s: float = 180.0,
    scenarios: Sequence[str] = SCENARIOS,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """One trial: a workspace with the scripts, a runtime, the scenarios in turn (``speed`` > 1: shorter scripts)."""
    ws = root / f"trial{trial:02d}" / "ws"
    ws.mkdir(parents=True)
    facts = write_scripts(ws, trial, speed)
    store = SessionStore(ws, state_dir=ws.parent / "state")
    manager = TaskManager(poll_s=0.1, kill_grace_s=2, stop_on_exit=True)
    rows = []
    after_s = RuntimeConfig().background_after_s  # the product's default, as under kairos serve / chat
    async with Runtime(make_agent(llm, ws, tools()), store, components=[manager], background_after_s=after_s) as rt:
        await manager.ready()
        for scenario in scenarios:
            row = await _scenario(rt, manager, scenario, trial, facts, timeout_s, speed)
            rows.append({"trial": trial, "variant": trial % 3, **row})
            if progress is not None:
                progress()
    return rows


async def run_all(
    llm: Model, trials: int, root: Path, console: Console, speed: float, scenarios: Sequence[str]
) -> list[dict[str, Any]]:
    """Every trial in turn, with a progress bar (one step per scenario)."""

    def trial(i: int, step: Callable[[], None]) -> Awaitable[list[dict[str, Any]]]:
        return run_trial(llm, i, root, speed=speed, scenarios=scenarios, progress=step)

    return await run_trials(console, "async-agent", trials, len(scenarios), trial, "calls")


def run(
    console: Console | None = None,
    quick: bool = False,
    trials: int | None = None,
    model: str | Model | None = None,
    speed: float = 1.0,
    scenarios: Sequence[str] = SCENARIOS,
    **_: Any,
) -> dict[str, Any]:
    """Exp 6-2 scenarios 1-4 on ``model`` (default the bundled ``local``); ``quick`` runs one trial.

    ``speed`` divides every script duration (tests use it; the bench's numbers are at 1).
    """
    console = console or Console()
    n = trials if trials is not None else (1 if quick else 3)
    chosen: str | Model = model if model is not None else "local"
    with bench_model(chosen, N_CTX, console) as llm, tempfile.TemporaryDirectory() as d:
        rows = asyncio.run(run_all(llm, n, Path(d), console, speed, scenarios))
    return {
        "bench": "async-agent",
        "params": {
            "model": model_name(chosen),
            "trials": n,
            "n_ctx": N_CTX,
            "scenarios": list(scenarios),
            "speed": speed,
            "job_rates_pct_per_s": [3 * speed, 2 * speed, 1 * speed],
            "tools": "build_agent defaults + task tools; skills off",
            "router": "default rules (no classifier)",
        },
        "rows": rows,
        "summary": success_summary(rows, scenarios, "async_success"),
    }


if __name__ == "__main__":
    import json
    import sys

    out = run(quick="--quick" in sys.argv)
    print(json.dumps(out["summary"], indent=2))
