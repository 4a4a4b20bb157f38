"""``load``: signed webhooks to ≥ 1,000 sessions of the real ``kairos serve`` at a fixed rate (issue 9 §7).

One ``kairos serve`` process (with a webhook secret) and a zero-latency deterministic model
(:mod:`._fake_openai`, ``answer`` mode) on loopback. The sessions are created through the API and
each handles one event (the warm-up: its worker opens, as in a server that has been running; those
latencies are reported apart as ``warmup_dispatch_*``). Then a poster sends signed webhooks
(``POST /v1/events``) round-robin over them, open-loop: send ``k`` is stamped and queued at
``start + k / rate`` whatever the replies do, and goes out on the next free keep-alive connection.
Every event carries its send time (``EVT-<id>@<unix time>``); the model server notes when it first
sees each event in a request, so the **dispatch latency** is "webhook due → the agent's model call
with it" on one machine clock (queueing for a connection, HTTP, signature check, group commit,
routing, the worker waking, the run building its request).

After ``duration`` seconds the poster stops, the bench waits for the model to have seen every
accepted event (up to ``drain_s``), stops the server and reads its database: ``lost`` counts
accepted (2xx) events, warm-up included, the model never saw or that are missing from their
session's trajectory. Rows: one per 10-second window (rate achieved, dispatch p50/p99, server RSS).

``store``/``bus`` (:mod:`._backends`): ``postgresql``/``nats`` run the server on real PostgreSQL and
NATS JetStream (started on loopback by the bench), and ``lost`` reads that PostgreSQL.
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

from kairos.server.auth import sign
from kairos_bench._backends import Backends, backends, read_store, serve_args
from kairos_bench._fake_openai import EVENT_RE, DeterministicModel
from kairos_bench._serve_proc import ServeProcess
from kairos_bench._stats import percentile

SECRET = "load-bench-secret"
WINDOW_S = 10.0
CONNECTIONS = 32
"""Keep-alive connections the poster sends on (each carries one request at a time)."""


@dataclass
class _Poster:
    """The open-loop sender and what it saw.

    A few lines of HTTP/1.1 over keep-alive sockets instead of httpx: httpx's pool scans every
    connection on each request, and at 200 sends/s that made the bench, not the server, the
    bottleneck on a small machine. Scheduled sends wait in a queue (their wait counts in their
    latency, as a real sender's would) for one of ``CONNECTIONS`` connections.
    """

    url: str
    sessions: list[str]
    prefix: str = "L"
    """Of the event ids (``L7``), so the warm-up's events are told apart."""
    sent_at: dict[str, float] = field(default_factory=dict)
    accepted: dict[str, str] = field(default_factory=dict)
    """Event id → session, for every 2xx."""
    errors: dict[str, int] = field(default_factory=dict)
    """HTTP status (or exception name) → count, for everything else."""
    post_ms: list[float] = field(default_factory=list)
    retries: int = 0
    """Sends repeated after a transport error (a connection closed under the request)."""
    unsent: int = 0
    """Sends still queued when the time was up (the server fell behind): dropped, not counted as sent."""

    def schedule(self, k: int) -> tuple[str, str, float, bytes]:
        eid, sid, sent = f"{self.prefix}{k}", self.sessions[k % len(self.sessions)], time.time()
        self.sent_at[eid] = sent
        record = {"type": "ci.build", "content": f"build done EVT-{eid}@{sent:.6f}", "session": sid, "id": eid}
        return eid, sid, sent, json.dumps(record).encode()

    async def connection(self, queue: asyncio.Queue[tuple[str, str, float, bytes] | None]) -> None:
        """Send queued events one after another on one keep-alive connection (reconnecting when it drops)."""
        host, port = self.url.removeprefix("http://").split(":")
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while (item := await queue.get()) is not None:
                eid, sid, sent, body = item
                status, problem = 0, ""
                for attempt in range(3):  # a sender retries a dropped connection; the id makes that safe
                    try:
                        if conn is None:
                            conn = await asyncio.open_connection(host, int(port))
                        status, keep = await _post(*conn, host, body)
                        if not keep:
                            conn[1].close()
                            conn = None
                        break
                    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
                        problem = type(e).__name__
                        if conn is not None:
                            conn[1].close()
                            conn = None
                        if attempt < 2:
                            self.retries += 1
                if 200 <= status < 300:
                    self.accepted[eid] = sid
                    self.post_ms.append((time.time() - sent) * 1000)
                else:
                    key = str(status) if status else problem
                    self.errors[key] = self.errors.get(key, 0) + 1
        finally:
            if conn is not None:
                conn[1].close()

    async def run(self, rate: float, duration_s: float) -> float:
        """Send for ``duration_s`` at ``rate``/s; the seconds it took until every reply was in."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, str, float, bytes] | None] = asyncio.Queue()
        workers = [asyncio.create_task(self.connection(queue)) for _ in range(CONNECTIONS)]
        start = loop.time()
        k = 0
        while (due := start + k / rate) < start + duration_s:
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            queue.put_nowait(self.schedule(k))
            k += 1
        # Time is up: what is still queued was never sent (a server that fell behind); only the
        # requests in flight are waited for, so the run ends and reports instead of hanging.
        while not queue.empty():
            eid = queue.get_nowait()[0]  # type: ignore[index]  # only sends are queued so far
            del self.sent_at[eid]
            self.unsent += 1
        for _ in workers:
            queue.put_nowait(None)
        await asyncio.wait(workers, timeout=120)
        return loop.time() - start


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, body: bytes) -> tuple[int, bool]:
    """One signed ``POST /v1/events`` on an open connection; (status, whether it stays open)."""
    headers = "".join(f"{k}: {v}\r\n" for k, v in sign(SECRET, body).items())
    writer.write(
        f"POST /v1/events HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{headers}\r\n".encode()
        + body
    )
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split(" ", 2)[1])
    fields = {k.strip().lower(): v.strip().lower() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    await reader.readexactly(int(fields.get("content-length", "0")))
    return status, fields.get("connection") != "close"


async def _drained(poster: _Poster, model: DeterministicModel, timeout_s: float) -> float:
    """Until the model has seen every accepted event (at most ``timeout_s``); the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s and not set(poster.accepted) <= model.seen():  # noqa: ASYNC110
        await asyncio.sleep(0.2)  # the model server runs in another thread: no event to await
    return time.monotonic() - started


def _own_cpu_s() -> float:
    """CPU seconds of this process (the poster and the model server), to compare with the server's."""
    t = os.times()
    return t.user + t.system


async def create_sessions(client: httpx.AsyncClient, url: str, n: int, title: str = "load") -> list[str]:
    """``n`` new sessions of the server at ``url`` (16 requests at a time), titled ``<title> <i>``."""
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> str:
        async with sem:
            r = await client.post(url + "/v1/sessions", json={"title": f"{title} {i}"})
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


def _in_trajectories(workspace: Path, store_url: str, accepted: dict[str, str]) -> set[str]:
    """Accepted event ids found in their session's trajectory (read after the server stopped)."""
    wanted: dict[str, set[str]] = {}
    for eid, sid in accepted.items():
        wanted.setdefault(sid, set()).add(eid)
    found: set[str] = set()
    store = read_store(workspace, store_url)
    try:
        for sid, ids in wanted.items():
            for m in store.trajectories.load_messages(sid):
                if m.role == "user":
                    found.update(eid for eid, _ in EVENT_RE.findall(m.content) if eid in ids)
    finally:
        store.close()
    return found


async def _measure(root: Path, sessions: int, rate: float, duration_s: float, drain_s: float,
                   console: Console, where: Backends) -> dict[str, Any]:  # fmt: skip
    workspace = root / "ws"
    workspace.mkdir(parents=True)
    store = await asyncio.to_thread(where.store_for, "load")
    with DeterministicModel("answer") as model:
        server = ServeProcess(workspace, model.base_url, root, SECRET, serve_args(store, where.bus))
        url = await asyncio.to_thread(server.start)
        try:
            async with httpx.AsyncClient(timeout=60) as client:
                console.print(f"[dim]creating {sessions} sessions[/]")
                ids = await create_sessions(client, url, sessions)
                # Warm-up: every session handles one event first, so its worker is open (as in a
                # server that has been running: with 1,000 sessions at 200/s each gets an event every
                # 5 s, well inside the 300 s idle close). Its latencies are reported apart.
                console.print(f"[dim]warm-up: one event for each of the {sessions} sessions[/]")
                warm = _Poster(url, ids, prefix="W")
                await warm.run(rate, len(ids) / rate)
                await _drained(warm, model, drain_s)
                poster = _Poster(url, ids)
                rss: list[tuple[float, float]] = []
                stop = asyncio.Event()
                sampler = asyncio.create_task(_sample_rss(server, rss, stop))
                console.print(f"[dim]posting {rate:g} signed webhooks/s for {duration_s:g} s[/]")
                t0, cpu0, own0 = time.time(), server.cpu_s(), _own_cpu_s()
                took = await poster.run(rate, duration_s)
                cpu_s, own_s = server.cpu_s() - cpu0, _own_cpu_s() - own0
                drain_took = await _drained(poster, model, drain_s)
                stop.set()
                await sampler
            exit_code = await asyncio.to_thread(server.stop)
        finally:
            server.kill()
        seen = model.seen()
        in_db = _in_trajectories(workspace, store, {**warm.accepted, **poster.accepted})
        every = model.latencies_ms()
        latencies = {e: ms for e, ms in every.items() if e in poster.sent_at}
        warm_lat = [ms for e, ms in every.items() if e in warm.sent_at]
    lost = {e for e in [*warm.accepted, *poster.accepted] if e not in seen or e not in in_db}
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
            "warmup_dispatch_p50_ms": round(statistics.median(warm_lat), 2) if warm_lat else None,
            "warmup_dispatch_p99_ms": round(percentile(warm_lat, 0.99), 2) if warm_lat else None,
            "sent": len(poster.sent_at),
            "accepted": len(poster.accepted),
            "http_errors": sum(poster.errors.values()) + sum(warm.errors.values()),
            "http_error_kinds": dict(poster.errors),
            "post_p99_ms": round(percentile(poster.post_ms, 0.99), 2),
            "server_cpu_ms_per_event": round(cpu_s * 1000 / max(1, len(poster.accepted)), 2),
            "bench_cpu_ms_per_event": round(own_s * 1000 / max(1, len(poster.accepted)), 2),
            "retried_sends": poster.retries,
            "unsent_at_end": poster.unsent,
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
    store: str | None = None,
    bus: str | None = None,
) -> dict[str, Any]:
    """Post webhooks for ``duration`` s (600; ``quick``: 20) to ``sessions`` (1,000) at ``rate``/s (200).

    ``store``/``bus``: embedded (the default), ``postgresql``/``nats`` (started here) or URLs.
    """
    console = console or Console()
    duration_s = float(duration or (20 if quick else 600))
    sessions = sessions or 1000
    rate = rate or 200.0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kairos-load-bench-") as tmp, backends(store, bus) as where:
        result = asyncio.run(_measure(Path(tmp), sessions, rate, duration_s, drain_s, console, where))
    result["summary"]["wall_s"] = round(time.monotonic() - started, 1)
    return {
        "bench": "load",
        "params": {
            "duration_s": duration_s,
            "sessions": sessions,
            "rate_per_s": rate,
            "drain_s": drain_s,
            "connections": CONNECTIONS,
            "warmup": "one event per session before the clock starts",
            **where.params(),
        },  # fmt: skip
        **result,
    }
