"""``load``: signed webhooks to ≥ 1,000 sessions of the real ``kairos serve`` at a fixed rate (issue 9 §7).

One ``kairos serve`` process (with a webhook secret) and a zero-latency deterministic model
(:mod:`._fake_openai`, ``answer`` mode) on loopback. The sessions are created through the API;
then a poster sends signed webhooks (``POST /v1/events``) round-robin over them, open-loop: send
``k`` is scheduled at ``start + k / rate`` whatever the replies do, each request in its own task.
Every event carries its send time (``EVT-<id>@<unix time>``); the model server notes when it first
sees each event in a request, so the **dispatch latency** is "webhook sent → the agent's model call
with it" on one machine clock (HTTP, signature check, group commit, routing, the worker waking,
the run building its request).

After ``duration`` seconds the poster stops, the bench waits for the model to have seen every
accepted event (up to ``drain_s``), stops the server and reads its database: ``lost`` counts
accepted (2xx) events the model never saw or that are missing from their session's trajectory.
Rows: one per 10-second window (rate achieved, dispatch p50/p99, HTTP errors, server RSS).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from kairos.context.session import SessionStore
from kairos.server.auth import sign
from kairos_bench._fake_openai import EVENT_RE, DeterministicModel
from kairos_bench._serve_proc import ServeProcess, percentile

SECRET = "load-bench-secret"
WINDOW_S = 10.0


@dataclass
class _Poster:
    """The open-loop sender and what it saw."""

    url: str
    sessions: list[str]
    sent_at: dict[str, float] = field(default_factory=dict)
    accepted: dict[str, str] = field(default_factory=dict)
    """Event id → session, for every 2xx."""
    errors: dict[str, int] = field(default_factory=dict)
    """HTTP status (or exception name) → count, for everything else."""
    post_ms: list[float] = field(default_factory=list)
    retries: int = 0
    """Sends repeated after a transport error (a connection closed under the request)."""

    async def post(self, client: httpx.AsyncClient, k: int) -> None:
        eid = f"L{k}"
        sid = self.sessions[k % len(self.sessions)]
        sent = time.time()
        self.sent_at[eid] = sent
        record = {"type": "ci.build", "content": f"build done EVT-{eid}@{sent:.6f}", "session": sid, "id": eid}
        body = json.dumps(record).encode()
        for attempt in range(3):  # a sender retries a dropped connection; the id makes that safe
            headers = {"Content-Type": "application/json", **sign(SECRET, body)}
            try:
                r = await client.post(self.url + "/v1/events", content=body, headers=headers)
            except httpx.TransportError as e:
                key = type(e).__name__
                if attempt < 2:
                    self.retries += 1
                    continue
            else:
                if 200 <= r.status_code < 300:
                    self.accepted[eid] = sid
                    self.post_ms.append((time.time() - sent) * 1000)
                    return
                key = str(r.status_code)
            break
        self.errors[key] = self.errors.get(key, 0) + 1

    async def run(self, client: httpx.AsyncClient, rate: float, duration_s: float) -> float:
        """Send for ``duration_s`` at ``rate``/s; the seconds it took until every reply was in."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks: set[asyncio.Task[None]] = set()
        k = 0
        while (due := start + k / rate) < start + duration_s:
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(self.post(client, k))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            k += 1
        if tasks:
            await asyncio.wait(tasks, timeout=120)
        return loop.time() - start


def _own_cpu_s() -> float:
    """CPU seconds of this process (the poster and the model server), to compare with the server's."""
    t = os.times()
    return t.user + t.system


async def _create_sessions(client: httpx.AsyncClient, url: str, n: int) -> list[str]:
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> str:
        async with sem:
            r = await client.post(url + "/v1/sessions", json={"title": f"load {i}"})
            r.raise_for_status()
            return str(r.json()["id"])

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def _sample_rss(server: ServeProcess, into: list[tuple[float, float]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        into.append((time.time(), server.rss_mb()))
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass


def _in_trajectories(workspace: Path, accepted: dict[str, str]) -> set[str]:
    """Accepted event ids found in their session's trajectory (read after the server stopped)."""
    wanted: dict[str, set[str]] = {}
    for eid, sid in accepted.items():
        wanted.setdefault(sid, set()).add(eid)
    found: set[str] = set()
    store = SessionStore(workspace, state_dir=workspace / ".kairos")
    try:
        for sid, ids in wanted.items():
            for m in store.trajectories.load_messages(sid):
                if m.role == "user":
                    found.update(eid for eid, _ in EVENT_RE.findall(m.content) if eid in ids)
    finally:
        store.close()
    return found


async def _measure(root: Path, sessions: int, rate: float, duration_s: float, drain_s: float,
                   console: Console) -> dict[str, Any]:  # fmt: skip
    workspace = root / "ws"
    workspace.mkdir(parents=True)
    with DeterministicModel("answer") as model:
        server = ServeProcess(workspace, model.base_url, root, SECRET)
        url = await asyncio.to_thread(server.start)
        try:
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
            # No pool timeout: when the server falls behind, sends wait for a connection (and that
            # wait counts in their dispatch latency) instead of failing on the client's side.
            timeout = httpx.Timeout(60, pool=None)
            async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
                console.print(f"[dim]creating {sessions} sessions[/]")
                ids = await _create_sessions(client, url, sessions)
                poster = _Poster(url, ids)
                rss: list[tuple[float, float]] = []
                stop = asyncio.Event()
                sampler = asyncio.create_task(_sample_rss(server, rss, stop))
                console.print(f"[dim]posting {rate:g} signed webhooks/s for {duration_s:g} s[/]")
                t0, cpu0, own0 = time.time(), server.cpu_s(), _own_cpu_s()
                took = await poster.run(client, rate, duration_s)
                cpu_s, own_s = server.cpu_s() - cpu0, _own_cpu_s() - own0
                deadline = time.monotonic() + drain_s
                while time.monotonic() < deadline and not set(poster.accepted) <= model.seen():  # noqa: ASYNC110
                    await asyncio.sleep(0.2)  # the model server runs in another thread: no event to await
                drain_took = time.monotonic() - (deadline - drain_s)
                stop.set()
                await sampler
            exit_code = await asyncio.to_thread(server.stop)
        finally:
            server.kill()
        seen = model.seen()
        in_db = _in_trajectories(workspace, poster.accepted)
        latencies = model.latencies_ms()
    lost = {e for e in poster.accepted if e not in seen or e not in in_db}
    rows = []
    for w in range(int(-(-duration_s // WINDOW_S))):
        lo, hi = t0 + w * WINDOW_S, t0 + (w + 1) * WINDOW_S
        sent = [e for e, t in poster.sent_at.items() if lo <= t < hi]
        lat = [latencies[e] for e in sent if e in latencies]
        mem = [m for t, m in rss if lo <= t < hi]
        accepted = sum(1 for e in sent if e in poster.accepted)
        rows.append({
            "window_s": [round(w * WINDOW_S), round(min((w + 1) * WINDOW_S, duration_s))],
            "sent": len(sent),
            "accepted": accepted,
            "events_per_s": round(accepted / min(WINDOW_S, duration_s - w * WINDOW_S), 1),
            "dispatch_p50_ms": round(statistics.median(lat), 2) if lat else None,
            "dispatch_p99_ms": round(percentile(lat, 0.99), 2) if lat else None,
            "rss_mb": round(max(mem), 1) if mem else None,
        })  # fmt: skip
    all_lat = list(latencies.values())
    return {
        "rows": rows,
        "summary": {
            "lost": len(lost),
            "dispatch_p50_ms": round(statistics.median(all_lat), 2) if all_lat else None,
            "dispatch_p99_ms": round(percentile(all_lat, 0.99), 2) if all_lat else None,
            "dispatch_max_ms": round(max(all_lat), 2) if all_lat else None,
            "events_per_s": round(len(poster.accepted) / took, 1),
            "sessions": sessions,
            "sent": len(poster.sent_at),
            "accepted": len(poster.accepted),
            "http_errors": sum(poster.errors.values()),
            "http_error_kinds": dict(poster.errors),
            "post_p99_ms": round(percentile(poster.post_ms, 0.99), 2),
            "server_cpu_ms_per_event": round(cpu_s * 1000 / max(1, len(poster.accepted)), 2),
            "bench_cpu_ms_per_event": round(own_s * 1000 / max(1, len(poster.accepted)), 2),
            "retried_sends": poster.retries,
            "rss_mb_max": round(max((m for _, m in rss), default=0.0), 1),
            "model_requests": model.requests,
            "drain_s": round(drain_took, 2),
            "server_exit_code": exit_code,
            "lost_examples": sorted(lost)[:10],
        },
    }


def run(
    console: Console | None = None,
    quick: bool = False,
    duration: float | None = None,
    sessions: int | None = None,
    rate: float | None = None,
    drain_s: float = 60.0,
) -> dict[str, Any]:
    """Post webhooks for ``duration`` seconds (600; ``quick``: 20) to ``sessions`` (1,000) at ``rate``/s (200)."""
    console = console or Console()
    duration_s = float(duration or (20 if quick else 600))
    sessions = sessions or 1000
    rate = rate or 200.0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kairos-load-bench-") as tmp:
        result = asyncio.run(_measure(Path(tmp), sessions, rate, duration_s, drain_s, console))
    result["summary"]["wall_s"] = round(time.monotonic() - started, 1)
    return {
        "bench": "load",
        "params": {"duration_s": duration_s, "sessions": sessions, "rate_per_s": rate, "drain_s": drain_s},
        **result,
    }
