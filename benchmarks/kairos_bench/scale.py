"""``scale``: a front end and 1 or 2 ``kairos worker`` processes on PostgreSQL + NATS JetStream, kill -9 every 30 s.

Issue 26 §4. Each phase (``workers`` = 1, then 2) gets a fresh database, workspace and stream: a
``kairos serve --no-worker`` front end and N ``kairos worker`` processes (real subprocesses, the
``kairos`` this bench imports), a scripted model (:mod:`._fake_openai`, ``effect`` mode, a fixed
latency per reply): for each event it calls ``bash`` to append the event's id to ``effects.log``,
then answers. ``sessions`` sessions are created through the API; signed webhooks then go round-robin
over them at ``rate``/s (open loop) for ``duration`` s, while every 30 s a random worker gets SIGKILL
and is started again at once (the 2-worker phase keeps two workers).

- ``dispatch``: webhook due → the model first sees the event (one machine clock).
- ``handover``: per kill, for each event of a session the dead worker held (its PostgreSQL lease)
  that was not finished at the kill, kill → the model's final answer for it (on whichever worker).
- ``throughput``: after the steady part, ``burst`` events are posted as fast as the front end takes
  them (no kills); events finished per second, first send → last answer. The ratio 2 vs 1 is that.
- ``lost_events``: accepted (2xx) events missing from their session's trajectory in PostgreSQL or
  never shown to the model; ``duplicated_side_effects``: ids written more than once to ``effects.log``.

A held session keeps one PostgreSQL connection (its lease), so the bench's server allows 2,000.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from kairos_bench._backends import read_store
from kairos_bench._fake_openai import EFFECTS_FILE, EVENT_RE, STATUS_TAG, DeterministicModel
from kairos_bench._serve_proc import LAUNCH, ServeProcess, post_webhook
from kairos_bench._stats import percentile
from kairos_bench.load import create_sessions

SECRET = "scale-bench-secret"
KILL_EVERY_S = 30.0
ACK_WAIT_S = 3.0
PG_SETTINGS = {"max_connections": "2000", "shared_buffers": "128MB"}
_HELD = (
    "SELECT a.application_name, (l.classid::bigint << 32) | l.objid::bigint FROM pg_locks l "
    "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
)


class TimedModel(DeterministicModel):
    """The bench model, also noting when each event's turn got its final answer (:attr:`done_at`)."""

    def __init__(self, latency_s: float, pause_s: float) -> None:
        super().__init__("effect", pause_s=pause_s, latency_s=latency_s)
        self.done_at: dict[str, float] = {}

    def answer(self, body: Any) -> bytes:
        """As the parent; a reply with no new event (a final answer) finishes every event of the conversation."""
        reply = super().answer(body)
        if b'"tool_calls"' not in reply:
            now = time.time()
            text = " ".join(
                str(m.get("content") or "")
                for m in body.get("messages", [])
                if isinstance(m, dict) and m.get("role") == "user" and STATUS_TAG not in str(m.get("content") or "")
            )
            with self._lock:
                for eid, _ in EVENT_RE.findall(text):
                    self.done_at.setdefault(eid, now)
        return reply

    def __enter__(self) -> TimedModel:
        self.start()
        return self

    def done(self) -> dict[str, float]:
        with self._lock:
            return dict(self.done_at)


@dataclass
class _Deployment:
    """The front end and the workers of one phase."""

    workspace: Path
    home: Path
    store: str
    bus: str
    model_url: str
    n_workers: int
    front: ServeProcess | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    starts: int = 0

    def start_worker(self) -> subprocess.Popen[bytes]:
        assert self.front is not None
        self.starts += 1
        argv = [sys.executable, "-c", LAUNCH, "worker", "-w", str(self.workspace), "--model", "openai:bench",
                "--base-url", self.model_url, "--store", self.store, "--bus", self.bus,
                "--ack-wait", str(ACK_WAIT_S)]  # fmt: skip
        with (self.home / f"worker-{self.starts}.log").open("wb") as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.front.env(), cwd=self.home)

    def start(self) -> str:
        self.front = ServeProcess(self.workspace, self.model_url, self.home, SECRET,
                                  ["--no-worker", "--store", self.store, "--bus", self.bus])  # fmt: skip
        self.workers = [self.start_worker() for _ in range(self.n_workers)]
        deadline = time.monotonic() + 120
        while sum("kairos worker" in p.read_text(errors="replace") for p in self.home.glob("worker-*.log")) < len(
            self.workers
        ):
            if time.monotonic() > deadline or any(w.poll() is not None for w in self.workers):
                raise RuntimeError("kairos worker did not start: " + _tails(self.home))
            time.sleep(0.1)
        return self.front.start()

    def stop(self) -> int:
        code = self.front.stop() if self.front else 0
        for w in self.workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
        return code

    def kill_all(self) -> None:
        if self.front:
            self.front.kill()
        for w in self.workers:
            if w.poll() is None:
                w.kill()
            w.wait()


def _tails(home: Path) -> str:
    return " | ".join(p.read_text(errors="replace")[-600:] for p in sorted(home.glob("worker-*.log")))


def _held_by(store: str, pid: int, keys: dict[int, str]) -> set[str]:
    """Sessions whose lease the process ``pid`` holds now (from its PostgreSQL application name)."""
    import psycopg

    with psycopg.connect(store, autocommit=True) as conn:
        rows = conn.execute(_HELD).fetchall()
    return {keys[k] for name, k in rows if k in keys and str(name).startswith(f"kairos pid {pid} ")}


def _lease_keys(store: str, sids: list[str]) -> dict[int, str]:
    import psycopg

    with psycopg.connect(store, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT hashtextextended('kairos.session:' || s, 0), s FROM unnest(%s::text[]) s", (sids,)
        ).fetchall()
    return {int(k): str(s) for k, s in rows}


@dataclass
class _Sender:
    """Signed webhooks; what was accepted and when each was due."""

    url: str
    sessions: list[str]
    client: httpx.AsyncClient
    prefix: str
    sent_at: dict[str, float] = field(default_factory=dict)
    accepted: dict[str, str] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    k: int = 0

    async def send(self) -> None:
        eid, sid, sent = f"{self.prefix}{self.k}", self.sessions[self.k % len(self.sessions)], time.time()
        self.k += 1
        self.sent_at[eid] = sent
        record = {"type": "ci.build", "content": f"build done EVT-{eid}@{sent:.6f}", "session": sid, "id": eid}
        status = await post_webhook(self.client, self.url, SECRET, record)
        if 200 <= status < 300:
            self.accepted[eid] = sid
        else:
            self.errors[str(status)] += 1


async def _steady(dep: _Deployment, sender: _Sender, model: TimedModel, args: dict[str, Any],
                  keys: dict[int, str], rng: random.Random, console: Console) -> list[dict[str, Any]]:  # fmt: skip
    """Post at ``rate`` for ``duration_s``, killing a random worker every ``kill_every_s``; the kills."""
    loop = asyncio.get_running_loop()
    rate, duration_s, every = args["rate"], args["duration_s"], args["kill_every_s"]
    start, tasks, kills = loop.time(), set[asyncio.Task[None]](), list[dict[str, Any]]()
    next_kill = start + every
    n = 0
    while (due := start + n / rate) < start + duration_s:
        if due >= next_kill:
            next_kill += every
            i = rng.randrange(len(dep.workers))
            victim = dep.workers[i]
            held = await asyncio.to_thread(_held_by, dep.store, victim.pid, keys)
            done = model.done()
            open_events = [e for e, s in sender.accepted.items() if s in held and e not in done]
            victim.send_signal(signal.SIGKILL)
            killed = time.time()
            await asyncio.to_thread(victim.wait)
            dep.workers[i] = dep.start_worker()
            kills.append({"at_s": round(killed - sender.sent_at[f"{sender.prefix}0"], 1), "killed_at": killed,
                          "held_sessions": len(held), "open_events": open_events})  # fmt: skip
            console.print(f"[dim]kill -9 of worker {i} ({len(held)} sessions held, {len(open_events)} open events)[/]")
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(sender.send())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        n += 1
    if tasks:
        await asyncio.wait(tasks, timeout=60)
    return kills


async def _until_done(events: set[str], model: TimedModel, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if events <= set(model.done()):
            return True
        await asyncio.sleep(0.2)
    return False


async def _phase(root: Path, n_workers: int, pg_url: str, nats_url: str, args: dict[str, Any],
                 console: Console) -> dict[str, Any]:  # fmt: skip
    import psycopg

    db = f"scale_w{n_workers}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    store = pg_url.rsplit("/", 1)[0] + "/" + db
    home = root / f"w{n_workers}"
    workspace = home / "ws"
    workspace.mkdir(parents=True)
    rng = random.Random(args["seed"] + n_workers)
    with TimedModel(args["latency_s"], args["pause_s"]) as model:
        dep = _Deployment(workspace, home, store, nats_url, model.base_url, n_workers)
        try:
            url = await asyncio.to_thread(dep.start)
            limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                console.print(f"[dim]{n_workers} worker(s): creating {args['sessions']} sessions[/]")
                sids = await create_sessions(client, url, args["sessions"], "scale")
                keys = await asyncio.to_thread(_lease_keys, store, sids)
                console.print(f"[dim]posting {args['rate']:g}/s for {args['duration_s']:g} s, kill -9 every "
                              f"{args['kill_every_s']:g} s[/]")  # fmt: skip
                steady = _Sender(url, sids, client, "S")
                kills = await _steady(dep, steady, model, args, keys, rng, console)
                drained = await _until_done(set(steady.accepted), model, args["drain_s"])
                console.print(f"[dim]burst of {args['burst']} events (no kills)[/]")
                burst = _Sender(url, sids, client, "B")
                t0 = time.time()
                for _ in range(args["burst"] // 16):
                    await asyncio.gather(*(burst.send() for _ in range(16)))
                posted_s = time.time() - t0
                burst_drained = await _until_done(set(burst.accepted), model, args["drain_s"])
            exit_code = await asyncio.to_thread(dep.stop)
        finally:
            await asyncio.to_thread(dep.kill_all)
        done, seen, lat = model.done(), model.seen(), model.latencies_ms()
    accepted = {**steady.accepted, **burst.accepted}
    shown: set[str] = set()
    reader = read_store(workspace, store)
    try:
        for sid in sids:
            for m in reader.trajectories.load_messages(sid):
                if m.role == "user":
                    shown.update(e for e, _ in EVENT_RE.findall(m.content))
    finally:
        reader.close()
    log = workspace / EFFECTS_FILE
    effects = Counter(log.read_text().split()) if log.exists() else Counter()
    handover = [done[e] - k["killed_at"] for k in kills for e in k["open_events"] if e in done]
    unfinished_after_kill = sum(1 for k in kills for e in k["open_events"] if e not in done)
    steady_lat = [ms for e, ms in lat.items() if e in steady.accepted]
    burst_done = [done[e] for e in burst.accepted if e in done]
    tput = len(burst_done) / (max(burst_done) - t0) if burst_done else 0.0
    lost = sorted(e for e in accepted if e not in seen or e not in shown)
    return {
        "workers": n_workers,
        "sessions": len(sids),
        "sent": len(steady.sent_at),
        "accepted": len(steady.accepted),
        "http_errors": dict(steady.errors + burst.errors),
        "dispatch_p50_ms": round(statistics.median(steady_lat), 1) if steady_lat else None,
        "dispatch_p99_ms": round(percentile(steady_lat, 0.99), 1) if steady_lat else None,
        "kills": len(kills),
        "kill_times_s": [k["at_s"] for k in kills],
        "sessions_held_by_killed": [k["held_sessions"] for k in kills],
        "open_events_at_kills": sum(len(k["open_events"]) for k in kills),
        "handover_p50_s": round(statistics.median(handover), 2) if handover else None,
        "handover_p99_s": round(percentile(handover, 0.99), 2) if handover else None,
        "handover_max_s": round(max(handover), 2) if handover else None,
        "open_events_never_finished": unfinished_after_kill,
        "burst_events": len(burst.accepted),
        "burst_post_per_s": round(len(burst.accepted) / posted_s, 1) if posted_s else None,
        "throughput_events_per_s": round(tput, 1),
        "lost_events": len(lost),
        "lost_examples": lost[:10],
        "duplicated_side_effects": sum(1 for n in effects.values() if n > 1),
        "accepted_without_effect": sum(1 for e in accepted if effects[e] == 0),
        "drained": drained and burst_drained,
        "front_end_exit_code": exit_code,
        "worker_starts": dep.starts,
        "model_requests": model.requests,
    }


def run(
    console: Console | None = None,
    quick: bool = False,
    duration: float | None = None,
    sessions: int | None = None,
    rate: float | None = None,
    burst: int | None = None,
    workers: str = "1,2",
    latency_s: float = 0.2,
    kill_every_s: float = KILL_EVERY_S,
    seed: int = 0,
) -> dict[str, Any]:
    """Each worker count in ``workers``: ``duration`` s (95; quick 35) at ``rate``/s (10) over ``sessions`` (1,000)."""
    from kairos.testing.servers import NatsServer, PostgresServer

    console = console or Console()
    counts = [int(w) for w in str(workers).split(",") if w.strip()]
    args: dict[str, Any] = {
        "duration_s": float(duration or (35 if quick else 95)),
        "sessions": sessions or 1000,
        "rate": rate or 10.0,
        "burst": burst or (96 if quick else 480),
        "latency_s": latency_s,
        "pause_s": 0.05,
        "drain_s": 120.0,
        "kill_every_s": kill_every_s,
        "seed": seed,
    }
    started = time.monotonic()
    rows = []
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="kairos-scale-bench-") as tmp:
        pg = PostgresServer.start(settings=PG_SETTINGS)
        stack.callback(pg.stop)
        nats = NatsServer.start()
        stack.callback(nats.stop)
        for n in counts:
            rows.append(asyncio.run(_phase(Path(tmp), n, pg.url, nats.url, args, console)))
            console.print(f"[dim]{n} worker(s): {rows[-1]['throughput_events_per_s']} events/s, "
                          f"handover p99 {rows[-1]['handover_p99_s']} s[/]")  # fmt: skip
    by = {r["workers"]: r for r in rows}
    ratio = None
    if 1 in by and 2 in by and by[1]["throughput_events_per_s"]:
        ratio = round(by[2]["throughput_events_per_s"] / by[1]["throughput_events_per_s"], 2)
    handover = [r["handover_p99_s"] for r in rows if r["handover_p99_s"] is not None]
    dispatch = [r["dispatch_p99_ms"] for r in rows if r["dispatch_p99_ms"] is not None]
    return {
        "bench": "scale",
        "params": {
            **args,
            "workers": counts,
            "ack_wait_s": ACK_WAIT_S,
            "store": "postgresql (started by the bench, fsync off)",
            "bus": "nats (started by the bench)",
            "cpus": os.cpu_count(),
        },  # fmt: skip
        "rows": rows,
        "summary": {
            "lost_events": sum(r["lost_events"] for r in rows),
            "duplicated_side_effects": sum(r["duplicated_side_effects"] for r in rows),
            "dispatch_p99_ms": max(dispatch) if dispatch else None,
            "throughput_ratio_2_vs_1": ratio,
            "handover_p99_s": max(handover) if handover else None,
            "kills": sum(r["kills"] for r in rows),
            "throughput_events_per_s": {str(r["workers"]): r["throughput_events_per_s"] for r in rows},
            "wall_s": round(time.monotonic() - started, 1),
        },
    }
