"""``crash``: ``kairos serve`` killed with SIGKILL at random moments, restarted; nothing lost, nothing done twice.

Each run serves a fresh workspace with the real ``kairos serve`` process and a deterministic
model (:mod:`._fake_openai`, ``effect`` mode): for every event it is shown, the model calls
``bash`` to append the event's id to ``effects.log`` (pausing before and after, so kills often land
mid-tool), then answers. Two clients send events to a few sessions: user messages
(``POST /v1/sessions/{id}/messages`` with an ``Idempotency-Key``) and signed webhooks
(``POST /v1/events`` with an ``id``). At a random moment the server gets SIGKILL; it is restarted,
the clients send again every event that got no 2xx (and a few that did: keys must deduplicate),
a few new events follow, and once every session is idle the server is stopped and its database
read:

- ``lost_events``: acknowledged events missing from their session's trajectory;
- ``duplicated_side_effects``: event ids appearing more than once in ``effects.log``;
- ``unknown_effects_not_done``: ids absent from ``effects.log`` whose call was cut by the kill
  (the trajectory has the "may or may not have happened" placeholder for it: the book allows
  this, the model is told to check), and ``missing_effects``: absent without such a placeholder;
- ``trajectory_problems``: tool-call protocol violations (:func:`kairos.testing.trajectory_problems`).

``store``/``bus`` (:mod:`._backends`): ``postgresql``/``nats`` run the server on real PostgreSQL (a
new database per run) and NATS JetStream, and the verification reads that PostgreSQL.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from kairos.context.session import INTERRUPTED_TOOL_RESULT
from kairos.testing import trajectory_problems
from kairos_bench._backends import Backends, backends, read_store, serve_args
from kairos_bench._fake_openai import EFFECT_RE, EFFECTS_FILE, EVENT_RE, DeterministicModel
from kairos_bench._serve_proc import ServeProcess, post_webhook

SECRET = "crash-bench-secret"
CUT_MARK = "may or may not have happened"
"""In the placeholder a side-effecting call cut by the kill after it started gets."""


@dataclass
class _Sent:
    """One event and what the clients know of it."""

    id: str
    session: str
    channel: str
    acked: bool = False
    tries: int = 0


@dataclass
class _Run:
    """The clients' side of one run."""

    url: str
    sessions: list[str]
    rng: random.Random
    prefix: str
    events: dict[str, _Sent] = field(default_factory=dict)
    duplicates: int = 0

    async def send(self, client: httpx.AsyncClient, ev: _Sent) -> bool:
        """Send (or resend) one event; True on a 2xx."""
        ev.tries += 1
        text = f"please handle EVT-{ev.id}"
        if ev.channel == "webhook":
            record = {"type": "ticket.created", "content": text, "session": ev.session, "id": ev.id}
            status = await post_webhook(client, self.url, SECRET, record)
        else:
            try:
                r = await client.post(
                    f"{self.url}/v1/sessions/{ev.session}/messages",
                    json={"text": text},
                    headers={"Idempotency-Key": ev.id},
                )
                status = r.status_code
                if status == 202 and r.json().get("duplicate"):
                    self.duplicates += 1
            except httpx.HTTPError:
                status = 0
        if status == 200 and ev.channel == "webhook":
            self.duplicates += 1  # 200 (not 202): a duplicate id
        ok = 200 <= status < 300
        ev.acked = ev.acked or ok
        return ok

    def new_event(self, channel: str) -> _Sent:
        n = len(self.events)
        ev = _Sent(f"{self.prefix}-e{n}", self.sessions[n % len(self.sessions)], channel)
        self.events[ev.id] = ev
        return ev

    async def produce(self, client: httpx.AsyncClient, channel: str) -> None:
        """Send new events with small random gaps until one is not acknowledged (the server is gone)."""
        while await self.send(client, self.new_event(channel)):  # noqa: ASYNC110  (a send rate, not a wait)
            await asyncio.sleep(self.rng.uniform(0.02, 0.12))


async def _idle(client: httpx.AsyncClient, url: str, sessions: list[str], timeout_s: float) -> bool:
    """Until every session has nothing pending and nothing running (twice in a row)."""
    deadline = time.monotonic() + timeout_s
    calm = 0
    while time.monotonic() < deadline:
        states = [(await client.get(f"{url}/v1/sessions/{s}")).json() for s in sessions]
        calm = calm + 1 if all(st["pending"] == 0 and not st["busy"] for st in states) else 0
        if calm >= 2:
            return True
        await asyncio.sleep(0.1)
    return False


def _verify(workspace: Path, store_url: str, run: _Run) -> dict[str, Any]:
    """Read the stopped server's store and effects log (see the module docstring)."""
    store = read_store(workspace, store_url)
    try:
        shown: dict[str, set[str]] = {}
        cut: set[str] = set()
        unstarted: set[str] = set()
        problems: list[str] = []
        for sid in run.sessions:
            messages = store.trajectories.load_messages(sid)
            problems += [f"{sid}: {p}" for p in trajectory_problems(messages)]
            shown[sid] = {eid for m in messages if m.role == "user" for eid, _ in EVENT_RE.findall(m.content)}
            results = {m.tool_call_id: m.content for m in messages if m.role == "tool"}
            for m in messages:
                for call in m.tool_calls:
                    result = results.get(call.id, "")
                    if CUT_MARK in result:
                        cut.update(EFFECT_RE.findall(call.arguments))
                    elif result == INTERRUPTED_TOOL_RESULT:
                        unstarted.update(EFFECT_RE.findall(call.arguments))
    finally:
        store.close()
    log = workspace / EFFECTS_FILE
    counts = Counter(log.read_text().split()) if log.exists() else Counter()
    acked = [e for e in run.events.values() if e.acked]
    not_done = [e.id for e in acked if counts[e.id] == 0]
    return {
        "lost": sorted(e.id for e in acked if e.id not in shown.get(e.session, set())),
        "duplicated": sorted(eid for eid, n in counts.items() if n > 1),
        "cut_calls": len(cut),
        "unstarted_calls": len(unstarted),
        "unknown_not_done": sum(1 for e in not_done if e in cut),
        "unstarted_not_done": sum(1 for e in not_done if e in unstarted and e not in cut),
        "missing": sorted(e for e in not_done if e not in cut and e not in unstarted),
        "problems": problems,
    }


async def _one_run(
    index: int, root: Path, base_url: str, rng: random.Random, n_sessions: int, max_kill_s: float, where: Backends
) -> dict[str, Any]:
    workspace = root / f"run-{index}" / "ws"
    workspace.mkdir(parents=True)
    store = await asyncio.to_thread(where.store_for, f"crash{index}")
    server = ServeProcess(workspace, base_url, workspace.parent, SECRET, serve_args(store, where.bus))
    url = await asyncio.to_thread(server.start)
    limits = httpx.Limits(max_connections=8)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        sessions = [(await client.post(url + "/v1/sessions", json={"title": f"s{i}"})).json()["id"]
                    for i in range(n_sessions)]  # fmt: skip
        run = _Run(url, sessions, rng, f"r{index}")
        producers = [asyncio.create_task(run.produce(client, ch)) for ch in ("message", "webhook")]
        kill_after = rng.uniform(0.2, max_kill_s)
        await asyncio.sleep(kill_after)
        server.kill()
        async with asyncio.timeout(60):
            await asyncio.gather(*producers)
    acked_before = sum(e.acked for e in run.events.values())
    sent_before = len(run.events)
    started = time.monotonic()
    try:
        run.url = url = await asyncio.to_thread(server.start)
    except RuntimeError as e:  # it did not come back: what it had stored is still verified
        return _row(index, kill_after, sent_before, acked_before, [], time.monotonic() - started, run, workspace,
                    store, [f"restart failed: {e}"])  # fmt: skip
    restart_s = time.monotonic() - started
    async with httpx.AsyncClient(timeout=30) as client:
        unacked = [e for e in run.events.values() if not e.acked]
        acked = [e for e in run.events.values() if e.acked]
        again = unacked + rng.sample(acked, min(2, len(acked)))
        for ev in again:
            await run.send(client, ev)
        for channel in ("message", "webhook", "message"):
            await run.send(client, run.new_event(channel))
        idle = await _idle(client, url, sessions, timeout_s=120)
    exit_code = await asyncio.to_thread(server.stop)
    problems = [] if idle else ["sessions still busy 120 s after the restart"]
    if exit_code != 0:
        problems.append(f"kairos serve exited with {exit_code} on SIGTERM")
    problems += [f"event {e.id} never acknowledged after {e.tries} tries" for e in run.events.values()
                 if not e.acked]  # fmt: skip
    return _row(index, kill_after, sent_before, acked_before, again, restart_s, run, workspace, store, problems)


def _row(
    index: int,
    kill_after: float,
    sent_before: int,
    acked_before: int,
    again: list[_Sent],
    restart_s: float,
    run: _Run,
    workspace: Path,
    store: str,
    problems: list[str],
) -> dict[str, Any]:
    """One run's row: what the clients saw and what the stopped server's state shows."""
    found = _verify(workspace, store, run)
    problems = [*found["problems"], *problems]
    return {
        "run": index,
        "kill_after_s": round(kill_after, 3),
        "events": len(run.events),
        "sent_before_kill": sent_before,
        "acked_before_kill": acked_before,
        "resent": len(again),
        "duplicates_acked": run.duplicates,
        "restart_ok": not any(p.startswith("restart failed") for p in problems),
        "restart_s": round(restart_s, 2),
        "cut_side_effect_calls": found["cut_calls"],
        "cut_before_start_calls": found["unstarted_calls"],
        "lost_events": len(found["lost"]),
        "duplicated_side_effects": len(found["duplicated"]),
        "unknown_effects_not_done": found["unknown_not_done"],
        "unstarted_effects_not_done": found["unstarted_not_done"],
        "missing_effects": len(found["missing"]),
        "detail": {k: found[k][:10] for k in ("lost", "duplicated", "missing")},
        "problems": problems[:10],
    }


def run(
    console: Console | None = None,
    quick: bool = False,
    runs: int | None = None,
    seed: int = 0,
    sessions: int = 3,
    store: str | None = None,
    bus: str | None = None,
) -> dict[str, Any]:
    """Kill and restart ``kairos serve`` ``runs`` times (100; ``quick``: 10) on ``store``/``bus`` (embedded)."""
    console = console or Console()
    runs = runs or (10 if quick else 100)
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="kairos-crash-bench-") as tmp,
        DeterministicModel("effect") as model,
        backends(store, bus) as where,
    ):
        base_url = model.base_url
        for i in range(runs):
            row = asyncio.run(_one_run(i, Path(tmp), base_url, rng, sessions, 2.5, where))
            rows.append(row)
            flag = "" if not (row["lost_events"] or row["duplicated_side_effects"] or row["problems"]) else " [red]!"
            console.print(f"[dim]run {i + 1}/{runs}: killed after {row['kill_after_s']:.2f} s, "
                          f"{row['events']} events, {row['cut_side_effect_calls']} calls cut[/]{flag}")  # fmt: skip
    counted = ("events", "lost_events", "duplicated_side_effects", "unknown_effects_not_done",
               "unstarted_effects_not_done", "missing_effects", "cut_side_effect_calls", "cut_before_start_calls",
               "duplicates_acked")  # fmt: skip
    total = {k: sum(int(r[k]) for r in rows) for k in counted}
    return {
        "bench": "crash",
        "params": {
            "runs": runs,
            "seed": seed,
            "sessions": sessions,
            "kill_after_s": [0.2, 2.5],
            "effect_pause_s": model.pause_s,
            **where.params(),
        },  # fmt: skip
        "rows": rows,
        "summary": {
            **total,
            "runs": runs,
            "runs_with_problems": sum(1 for r in rows if r["problems"]),
            "failed_restarts": sum(1 for r in rows if not r["restart_ok"]),
            "restart_s_median": round(statistics.median(r["restart_s"] for r in rows), 2),
            "model_requests": model.requests,
            "wall_s": round(time.monotonic() - started, 1),
        },
    }
