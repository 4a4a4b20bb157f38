"""Several workers (issue 26 §3): a ``kairos serve --no-worker`` front end and two ``kairos worker`` processes
on PostgreSQL and NATS JetStream, real subprocesses with a scripted model.

Every message is answered exactly once (counted in the PostgreSQL store), and a worker killed with
SIGKILL in the middle of a turn hands the session to the other one, which finishes the turn.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.models.fake_servers import Recorded, Reply
from tests.support.kairos_cli import KairosProcess
from tests.support.openai_server import OpenAIServer, text_reply

pytest.importorskip("nats", reason="nats-py is not installed: pip install -e '.[scale]'")
pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[scale]'")

ACK_WAIT_S = 2.0
_QUESTION = re.compile(r"q:[\w-]+")


class AnsweringModel(OpenAIServer):
    """Answers ``a:<question>`` to the newest ``q:…`` in the conversation; a ``q:slow…`` question's first
    request hangs (until its client goes away), so a test can kill the worker that waits on it."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[str] = []
        self.hanging = threading.Event()

    def _next(self, path: str, headers: dict[str, str], body: Any) -> Reply:
        with self._lock:
            self.requests.append(Recorded(path, headers, body))
        messages = body.get("messages", []) if isinstance(body, dict) else []
        question = next(
            (m.group(0) for msg in reversed(messages) if (m := _QUESTION.search(str(msg.get("content") or "")))), "?"
        )
        if question.startswith("q:slow") and question not in self.held:
            self.held.append(question)
            self.hanging.set()
            return Reply(events=[], hold_open=True)
        return text_reply(f"a:{question}")

    def __enter__(self) -> AnsweringModel:
        super().__enter__()
        return self


def _config(user_config_dir: Path, postgres_url: str, nats_url: str, stream: str) -> None:
    (user_config_dir / "config.toml").write_text(
        f'[storage]\nstore = "{postgres_url}"\nbus = "{nats_url}"\ndeployment = "{stream}"\n', encoding="utf-8"
    )


@contextlib.contextmanager
def _deployment(
    workspace: Path, user_config_dir: Path, logs: Path, model: OpenAIServer, workers: int = 2, idle_close_s: float = 30
) -> Iterator[tuple[str, list[KairosProcess]]]:
    """A front end and ``workers`` workers; yields the front end's URL and the workers."""
    args = ("-w", workspace, "--model", "openai:fake", "--base-url", model.openai_base_url)
    flags = ("--ack-wait", str(ACK_WAIT_S), "--idle-close", str(idle_close_s))
    with contextlib.ExitStack() as stack:
        started = [
            stack.enter_context(KairosProcess("worker", *args, *flags, config_dir=user_config_dir, logs=logs))
            for _ in range(workers)
        ]
        for w in started:
            w.wait_until("the worker", lambda w=w: "kairos worker" in w.stdout)  # type: ignore[misc]
        front = stack.enter_context(
            KairosProcess("serve", "--no-worker", "--port", "0", *args, config_dir=user_config_dir, logs=logs)
        )
        front.wait_until("serving", lambda: " on http://" in front.stdout)
        match = re.search(r"on (http://[\d.]+:\d+)", front.stdout)
        assert match is not None
        front.wait_until("the front end's line", lambda: "a front end: turns run in kairos worker" in front.stdout)
        yield match.group(1), started
        for proc in (front, *started):
            if proc.proc.poll() is None:
                proc.send(signal.SIGTERM)
        assert front.wait() == 0, front.stderr
        for w in started:
            if w.proc.returncode is None or w.proc.returncode >= 0:
                assert w.wait() == 0, w.stderr


def _trajectories(postgres_url: str, sids: list[str]) -> dict[str, list[tuple[str, str]]]:
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            "SELECT session_id, record FROM messages WHERE session_id = ANY(%s) ORDER BY session_id, seq", (sids,)
        ).fetchall()
    out: dict[str, list[tuple[str, str]]] = {sid: [] for sid in sids}
    for sid, record in rows:
        data = json.loads(record)
        out[sid].append((str(data.get("role")), str(data.get("content") or "")))
    return out


def _wait(what: str, ready: Callable[[], bool], timeout_s: float, procs: list[KairosProcess]) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s\n" + "\n".join(p.stderr for p in procs)
        time.sleep(0.05)


def _answers(trajectory: list[tuple[str, str]]) -> list[str]:
    return [content for role, content in trajectory if role == "assistant" and content]


def _questions(trajectory: list[tuple[str, str]]) -> list[str]:
    return [q for role, content in trajectory if role == "user" for q in _QUESTION.findall(content)]


def test_two_workers_answer_every_message_of_twenty_sessions_exactly_once(
    workspace: Path, user_config_dir: Path, tmp_path: Path, postgres_url: str, nats_url: str, nats_stream: str
) -> None:
    _config(user_config_dir, postgres_url, nats_url, nats_stream)
    with AnsweringModel() as model, _deployment(workspace, user_config_dir, tmp_path / "logs", model) as (url, ws):
        with httpx.Client(base_url=url, timeout=30) as client:
            sids = [client.post("/v1/sessions", json={"title": f"s{i}"}).json()["id"] for i in range(20)]
            started = time.monotonic()
            for n in range(1, 4):  # each session's next message once its last one is answered
                for i, sid in enumerate(sids):
                    sent = client.post(f"/v1/sessions/{sid}/messages", json={"text": f"q:s{i}-m{n}"})
                    assert sent.status_code == 202, sent.text
                _wait(
                    f"{n} answers in every session",
                    lambda n=n: all(len(_answers(t)) >= n for t in _trajectories(postgres_url, sids).values()),  # type: ignore[misc]
                    20,
                    ws,
                )
            took = time.monotonic() - started
            owners = [_holder_pid(postgres_url, sid) for sid in sids]  # workers keep their sessions while idle
        holders = {w.pid: w.stderr for w in ws}
    assert set(owners) <= set(holders), owners  # one owner per session, a worker
    trajectories = _trajectories(postgres_url, sids)
    for i, sid in enumerate(sids):
        wanted = [f"q:s{i}-m{n}" for n in range(1, 4)]
        assert _questions(trajectories[sid]) == wanted, trajectories[sid]  # each message once, in order
        assert _answers(trajectories[sid]) == [f"a:{q}" for q in wanted], trajectories[sid]  # each answered once
    shares = sorted(owners.count(pid) for pid in holders)
    print(f"\n60 messages in 20 sessions answered by 2 workers in {took:.2f} s (sessions per worker: {shares})")
    assert all("Traceback" not in err for err in holders.values()), holders


def _holder_pid(postgres_url: str, sid: str) -> int | None:
    """The pid of the process whose lease holds ``sid`` (from its PostgreSQL application name)."""
    import psycopg

    sql = (
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended('kairos.session:' || %s, 0)"
    )
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        row = conn.execute(sql, (sid,)).fetchone()
    match = re.match(r"kairos pid (\d+)", str(row[0])) if row else None
    return int(match.group(1)) if match else None


def test_a_worker_killed_mid_turn_hands_the_session_to_the_other_which_finishes_the_turn(
    workspace: Path, user_config_dir: Path, tmp_path: Path, postgres_url: str, nats_url: str, nats_stream: str
) -> None:
    _config(user_config_dir, postgres_url, nats_url, nats_stream)
    with (
        AnsweringModel() as model,
        _deployment(workspace, user_config_dir, tmp_path / "logs", model) as (url, ws),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        sid = client.post("/v1/sessions", json={"title": "handover"}).json()["id"]
        assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "q:warm"}).status_code == 202
        _wait("the first answer", lambda: _answers(_trajectories(postgres_url, [sid])[sid]) == ["a:q:warm"], 20, ws)
        assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "q:slow-1"}).status_code == 202
        _wait("the slow request", model.hanging.is_set, 20, ws)
        owner_pid = _holder_pid(postgres_url, sid)
        owner = next(w for w in ws if w.pid == owner_pid)
        other = next(w for w in ws if w is not owner)
        owner.send(signal.SIGKILL)
        killed = time.monotonic()
        assert owner.wait() == -signal.SIGKILL
        _wait(
            "the turn finished on the other worker",
            lambda: "a:q:slow-1" in _answers(_trajectories(postgres_url, [sid])[sid]),
            20,
            ws,
        )
        handover_s = time.monotonic() - killed
        assert _holder_pid(postgres_url, sid) in (other.pid, None)
        # the session goes on as usual on the worker left
        assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "q:after"}).status_code == 202
        _wait("the next answer", lambda: "a:q:after" in _answers(_trajectories(postgres_url, [sid])[sid]), 20, ws)
    trajectory = _trajectories(postgres_url, [sid])[sid]
    assert _questions(trajectory) == ["q:warm", "q:slow-1", "q:after"]  # nothing lost or repeated
    assert _answers(trajectory) == ["a:q:warm", "a:q:slow-1", "a:q:after"], trajectory
    assert sum("kairos worker" in content and "another worker took" in content for _, content in trajectory) == 1
    print(f"\nhandover after kill -9: the turn finished {handover_s:.2f} s later (ack_wait {ACK_WAIT_S:g} s)")
    assert handover_s < ACK_WAIT_S + 10


def test_serve_with_workers_starts_them_beside_a_front_end_and_stops_them_with_it(
    workspace: Path, user_config_dir: Path, tmp_path: Path, postgres_url: str, nats_url: str, nats_stream: str
) -> None:
    _config(user_config_dir, postgres_url, nats_url, nats_stream)
    args = ("serve", "--workers", "2", "--port", "0", "-w", workspace, "--model", "openai:fake")
    with (
        AnsweringModel() as model,
        KairosProcess(*args, "--base-url", model.openai_base_url, config_dir=user_config_dir, logs=tmp_path) as front,
    ):
        front.wait_until("serving", lambda: " on http://" in front.stdout)
        match = re.search(r"on (http://[\d.]+:\d+)", front.stdout)
        pids = re.search(r"started 2 kairos worker processes \(pids (\d+), (\d+)\)", front.stdout)
        assert match is not None and pids is not None, front.stdout
        with httpx.Client(base_url=match.group(1), timeout=30) as client:
            sids = [client.post("/v1/sessions", json={"title": f"s{i}"}).json()["id"] for i in range(4)]
            for i, sid in enumerate(sids):
                assert client.post(f"/v1/sessions/{sid}/messages", json={"text": f"q:w{i}"}).status_code == 202
            _wait(
                "an answer in every session",
                lambda: all(_answers(t) for t in _trajectories(postgres_url, sids).values()),
                20,
                [front],
            )
        front.send(signal.SIGTERM)
        assert front.wait() == 0, front.stderr
    answers = [_answers(t) for t in _trajectories(postgres_url, sids).values()]
    assert sorted(answers) == [[f"a:q:w{i}"] for i in range(4)]
    for pid in (int(pids.group(1)), int(pids.group(2))):  # the workers stopped with the front end
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_worker_and_no_worker_need_postgresql_and_nats(workspace: Path, user_config_dir: Path, tmp_path: Path) -> None:
    from tests.support.kairos_cli import run_kairos

    model = ("--model", "openai:fake", "--base-url", "http://127.0.0.1:9/v1")
    for args in (("worker", "-w", workspace, *model), ("serve", "--no-worker", "--port", "0", "-w", workspace, *model)):
        code, _, err = run_kairos(*args, config_dir=user_config_dir, logs=tmp_path / "logs")
        assert code == 1 and "--store postgresql://… and --bus nats://…" in err, err
    assert not (workspace / ".kairos" / "kairos.db").exists()  # refused before anything was opened


def test_the_stop_button_of_a_front_end_stops_the_turn_in_the_worker_that_runs_it(
    workspace: Path, user_config_dir: Path, tmp_path: Path, postgres_url: str, nats_url: str, nats_stream: str
) -> None:
    _config(user_config_dir, postgres_url, nats_url, nats_stream)
    with (
        AnsweringModel() as model,
        _deployment(workspace, user_config_dir, tmp_path / "logs", model, workers=2) as (url, ws),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        sid = client.post("/v1/sessions", json={"title": "stop"}).json()["id"]
        idle = client.post(f"/v1/sessions/{sid}/interrupt").json()
        assert idle == {"interrupted": False}  # nothing runs: no worker answers
        assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "q:slow-stop"}).status_code == 202
        _wait("the slow request", model.hanging.is_set, 20, ws)
        # the front end runs no turn, yet its session list shows the worker's (the run's heartbeat row)
        assert client.get(f"/v1/sessions/{sid}").json()["busy"] is True
        listed = {s["id"]: s for s in client.get("/v1/sessions").json()["sessions"]}
        assert listed[sid]["busy"] is True and listed[sid]["active"] is True
        stopped = client.post(f"/v1/sessions/{sid}/interrupt", json={"reason": "the user pressed stop"}).json()
        assert stopped == {"interrupted": True}  # the front end runs no turn: the worker that does stopped it
        assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "q:after"}).status_code == 202
        _wait("the next answer", lambda: "a:q:after" in _answers(_trajectories(postgres_url, [sid])[sid]), 20, ws)
        _wait("the turn shown ended", lambda: client.get(f"/v1/sessions/{sid}").json()["busy"] is False, 10, ws)
    trajectory = _trajectories(postgres_url, [sid])[sid]
    assert "a:q:slow-stop" not in _answers(trajectory)  # cut, never answered


def test_a_worker_lets_an_idle_session_go_so_its_postgresql_connection_is_freed(
    workspace: Path, user_config_dir: Path, tmp_path: Path, postgres_url: str, nats_url: str, nats_stream: str
) -> None:
    """Each held session holds a lease on a connection of its own: idle ones must not pile up."""
    _config(user_config_dir, postgres_url, nats_url, nats_stream)
    with (
        AnsweringModel() as model,
        _deployment(workspace, user_config_dir, tmp_path / "logs", model, workers=1, idle_close_s=0.5) as (url, ws),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        sid = client.post("/v1/sessions", json={"title": "idle"}).json()["id"]
        assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "q:once"}).status_code == 202
        _wait("the answer", lambda: _answers(_trajectories(postgres_url, [sid])[sid]) == ["a:q:once"], 20, ws)
        _wait("the lease let go", lambda: _holder_pid(postgres_url, sid) is None, 20, ws)
        assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "q:again"}).status_code == 202
        _wait("the next answer", lambda: "a:q:again" in _answers(_trajectories(postgres_url, [sid])[sid]), 20, ws)
