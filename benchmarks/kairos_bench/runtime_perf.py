"""``runtime``: interrupt-to-stop latency, dispatch throughput and memory of the event runtime (issue 9 §7).

- **interrupt**: a session is busy (a model streaming a delta every millisecond, or a tool that
  would sleep for an hour); an urgent user message is submitted at a random moment; the latency is
  from ``submit`` to the moment the stream is closed or the tool is cancelled. p50/p99 of ``trials``.
- **dispatch**: ``events`` user events submitted round-robin to ``sessions`` sessions on a
  zero-latency model, by one producer awaiting each submit and by 64 concurrent producers (as HTTP
  requests and sources arrive; they share group commits); events/s from the first submit until
  every event is in its trajectory (accepted, persisted, routed, drained at a safe point, answered).
- **memory**: RSS of a fresh process holding 10,000 sessions that each handled one event and are
  now idle, once with their workers still open (inside ``idle_close_s``) and once after they closed.

Models here are zero-latency doubles on purpose: the bench measures the runtime, not a model.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.models.base import TokenEstimator
from kairos.models.types import (
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningPolicy,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ToolCall,
    Usage,
)
from kairos.runtime import Event, Runtime
from kairos.tools.base import Resource, ToolContext, ToolResult
from kairos.tools.function import tool
from kairos_bench._stats import percentile

STOP = "STOP-NOW"
_STOPPED: Resource[Callable[[float], None]] = Resource("kairos_bench.stopped")


class BenchModel:
    """A double: ``zero`` answers at once; ``hold`` once released; ``stream`` streams until stopped;
    ``tool`` calls ``wait_forever``.

    A request whose last message contains :data:`STOP` (or is a tool result) is answered at once in every mode.
    """

    context_window = 10_000_000
    reasoning_policy = ReasoningPolicy.KEEP_ALL

    def __init__(self, mode: str) -> None:
        self.name = f"bench-{mode}"
        self.mode = mode
        self.count_tokens = TokenEstimator()
        self.started = asyncio.Event()
        self.stopped_at = 0.0
        self.stopped = asyncio.Event()
        self.release = asyncio.Event()
        self.holding = 0
        self.hold_target = 0
        self.all_held = asyncio.Event()

    def _done(self, message: Message) -> ResponseDone:
        return ResponseDone(ModelResponse(message, Usage(prompt_tokens=1, completion_tokens=1)))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """See the class docstring."""
        last = [m for m in request.messages[-3:] if not m.content.startswith("<agent_status>")][-1]
        if self.mode == "hold" and not self.release.is_set():
            self.holding += 1
            if self.holding >= self.hold_target:
                self.all_held.set()
            await self.release.wait()
        if self.mode in ("zero", "hold") or STOP in last.content or last.role == "tool":
            yield self._done(Message.assistant("ok"))
            return
        if self.mode == "tool":
            self.started.set()
            yield self._done(Message.assistant("", (ToolCall(f"c{time.monotonic_ns()}", "wait_forever", "{}"),)))
            return
        self.started.set()
        try:
            while True:
                yield TextDelta("x")
                await asyncio.sleep(0.001)
        finally:
            self.stopped_at = time.perf_counter()
            self.stopped.set()


@tool(timeout_s=7200)
async def wait_forever(*, ctx: ToolContext) -> ToolResult:
    """Wait for an hour (until interrupted)."""
    try:
        await asyncio.sleep(3600)
    finally:
        stopped = ctx.get(_STOPPED)
        if stopped is not None:
            stopped(time.perf_counter())
    return ToolResult("waited")


async def _interrupt_latencies(mode: str, trials: int, root: Path) -> list[float]:
    model = BenchModel(mode)
    store = SessionStore(root / f"interrupt-{mode}")
    out: list[float] = []
    rng = random.Random(7)
    async with Runtime(Agent(model, tools=[wait_forever]), store) as rt:
        sid = rt.create_session("interrupt")
        for i in range(trials):
            model.started.clear()
            model.stopped.clear()
            stopped = asyncio.get_running_loop().create_future()

            def mark(at: float, fut: asyncio.Future[float] = stopped) -> None:
                if not fut.done():
                    fut.set_result(at)

            await rt.submit(Event("user.input", f"task {i}", {"type": "user"}, "bench", session=sid))
            await asyncio.wait_for(model.started.wait(), 30)
            session = rt.open_session(sid)
            assert session is not None
            session.tool_context.put(_STOPPED, mark)
            await asyncio.sleep(rng.uniform(0.002, 0.02))
            t0 = time.perf_counter()
            await rt.submit(Event("user.input", f"{STOP}: do something else", {"type": "user"}, "bench", session=sid,
                                  strategy="interrupt"))  # fmt: skip
            if mode == "stream":
                await asyncio.wait_for(model.stopped.wait(), 30)
                end = model.stopped_at
            else:
                end = await asyncio.wait_for(stopped, 30)
            out.append((end - t0) * 1000)
            await rt.wait_idle(sid, 60)
    return out


async def _dispatch(sessions: int, events: int, root: Path, producers: int) -> dict[str, float]:
    """Events arrive while every session's agent is busy (a model call held open), then the agents finish.

    ``events_per_s``: submitted, persisted and handed to the session's worker (what ``submit``
    acknowledges); ``end_to_end_per_s``: until every event is also drained into its trajectory and
    answered, turns included (events that queued up during a turn are taken up together).
    """
    model = BenchModel("hold")
    model.hold_target = sessions
    store = SessionStore(root / "dispatch")
    async with Runtime(Agent(model), store, idle_close_s=3600) as rt:
        ids = [rt.create_session(f"s{i}") for i in range(sessions)]
        for sid in ids:
            await rt.submit(Event("user.input", "start", {"type": "user"}, "bench", session=sid))
        await asyncio.wait_for(model.all_held.wait(), 600)

        async def produce(first: int) -> None:
            for i in range(first, events, producers):
                await rt.submit(Event("user.input", f"event {i}", {"type": "user"}, "bench", session=ids[i % sessions]))

        t0 = time.perf_counter()
        await asyncio.gather(*(produce(p) for p in range(producers)))
        dispatched = time.perf_counter() - t0
        model.release.set()
        for sid in ids:
            await rt.wait_idle(sid, 600)
        elapsed = time.perf_counter() - t0
        pending = sum(len(store.trajectories.pending_events(s)) for s in ids)
    return {
        "events": events,
        "sessions": sessions,
        "producers": producers,
        "events_per_s": events / dispatched,
        "end_to_end_per_s": events / elapsed,
        "pending_after": pending,
    }


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _memory(n: int, root: Path, idle_close_s: float) -> dict[str, float]:
    store = SessionStore(root)
    base = _rss_mb()
    async with Runtime(Agent(BenchModel("zero")), store, idle_close_s=idle_close_s) as rt:
        ids = [rt.create_session(f"s{i}") for i in range(n)]
        for sid in ids:
            await rt.submit(Event("user.input", "hello", {"type": "user"}, "bench", session=sid))
        for sid in ids:
            await rt.wait_idle(sid, 600)
        for _ in range(600):  # with a short idle_close_s: until every worker closed
            if idle_close_s > 60 or not rt.active_sessions():
                break
            await asyncio.sleep(0.1)
        return {"sessions": n, "open_workers": len(rt.active_sessions()), "rss_base_mb": base, "rss_mb": _rss_mb()}


def _memory_in_child(n: int, root: Path, idle_close_s: float) -> dict[str, float]:
    """Measure in a fresh interpreter, so nothing else this bench did is in the RSS."""
    code = "from kairos_bench.runtime_perf import memory_main; memory_main()"
    env = {
        **os.environ,
        "KAIROS_BENCH_N": str(n),
        "KAIROS_BENCH_ROOT": str(root),
        "KAIROS_BENCH_CLOSE": str(idle_close_s),
    }
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode:
        raise RuntimeError(f"memory child failed: {proc.stderr[-2000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def memory_main() -> None:
    """Entry of the memory child process."""
    n = int(os.environ["KAIROS_BENCH_N"])
    root, close = Path(os.environ["KAIROS_BENCH_ROOT"]), float(os.environ["KAIROS_BENCH_CLOSE"])
    print(json.dumps(asyncio.run(_memory(n, root, close))))


def run(console: Console | None = None, quick: bool = False, trials: int | None = None) -> dict[str, Any]:
    """Run the three measurements; see the module docstring."""
    console = console or Console()
    trials = trials or (20 if quick else 200)
    sessions, events = (20, 2000) if quick else (100, 20_000)
    n_memory = 1000 if quick else 10_000
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kairos-runtime-bench-") as tmp:
        root = Path(tmp)
        for mode in ("stream", "tool"):
            console.print(f"[dim]interrupt while a {'model streams' if mode == 'stream' else 'tool runs'}: "
                          f"{trials} trials[/]")  # fmt: skip
            lat = asyncio.run(_interrupt_latencies(mode, trials, root))
            rows.append({"measure": f"interrupt_{mode}", "trials": trials, "p50_ms": statistics.median(lat),
                         "p99_ms": percentile(lat, 0.99), "max_ms": max(lat)})  # fmt: skip
        for producers in (1, 64):
            runs = []
            for rep in range(3):
                console.print(f"[dim]dispatch: {events} events to {sessions} sessions from {producers} producers, "
                              f"repeat {rep + 1}/3[/]")  # fmt: skip
                runs.append(asyncio.run(_dispatch(sessions, events, root / f"d{producers}-{rep}", producers)))
            median = sorted(runs, key=lambda r: r["events_per_s"])[1]
            rows.append({"measure": "dispatch", **median, "repeats": [round(r["events_per_s"]) for r in runs]})
        best = rows[-1]
        one = rows[-2]
        lost = sum(int(r["pending_after"]) for r in rows if r["measure"] == "dispatch")
        console.print(f"[dim]memory: {n_memory} idle sessions in a fresh process[/]")
        mem = _memory_in_child(n_memory, root / "memory-open", 3600)
        closed = _memory_in_child(n_memory, root / "memory-closed", 0.05)
        rows.append({"measure": "memory_workers_open", **mem})
        rows.append({"measure": "memory_workers_closed", **closed})
    interrupt_p99 = max(r["p99_ms"] for r in rows if str(r["measure"]).startswith("interrupt"))
    return {
        "bench": "runtime",
        "params": {"trials": trials, "sessions": sessions, "events": events, "memory_sessions": n_memory},
        "rows": rows,
        "summary": {
            "interrupt_p99_ms": round(interrupt_p99, 2),
            "events_per_s": round(best["events_per_s"]),
            "rss_mb_10k_sessions": round(mem["rss_mb"], 1),
            "rss_mb_10k_sessions_closed": round(closed["rss_mb"], 1),
            "events_per_s_one_producer": round(one["events_per_s"]),
            "end_to_end_per_s": round(best["end_to_end_per_s"]),
            "lost_events": lost,
        },
    }
