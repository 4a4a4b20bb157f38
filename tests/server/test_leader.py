"""One leader per deployment (issue 26 §3): two ``kairos worker`` processes on PostgreSQL and NATS, one runs the timers.

The leader is whoever holds the deployment's advisory lock (its PostgreSQL application name carries its
pid); a timer fires once, and after ``kill -9`` of the leader the other worker takes the lease over within
``[storage] leader_retry_s`` and fires the timers due afterwards, once.
"""

from __future__ import annotations

import contextlib
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kairos.runtime.db_pg import PgRuntimeDB
from tests.server.test_workers import AnsweringModel, _answers, _questions, _trajectories, _wait
from tests.support.kairos_cli import KairosProcess

pytest.importorskip("nats", reason="nats-py is not installed: pip install -e '.[scale]'")
pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[scale]'")

RETRY_S = 1.0


def _leader_pids(postgres_url: str, deployment: str) -> list[int]:
    """The pids of the processes holding the deployment's leader lease (from their application names)."""
    import psycopg

    from kairos.runtime.leader import LEADER_KEY

    sql = (
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        f"AND ((l.classid::bigint << 32) | l.objid::bigint) = ({LEADER_KEY})"
    )
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        rows = conn.execute(sql, (deployment,)).fetchall()
    return [int(m.group(1)) for (name,) in rows if (m := re.match(r"kairos leader pid (\d+)", str(name)))]


def _session(postgres_url: str) -> str:
    from kairos.context.store_pg import PostgresTrajectoryStore

    store = PostgresTrajectoryStore(postgres_url)
    try:
        return store.create_session("timers")
    finally:
        store.close()


def _timer(url: str, session: str, message: str, after_s: float) -> None:
    """A one-shot timer written where the timers component keeps them: the deployment's PostgreSQL records
    (read by a leader when it starts)."""
    from kairos.runtime.integrations.timers import MIGRATIONS

    db = PgRuntimeDB(url)
    try:
        db.ensure("timers", MIGRATIONS)
        now = time.time()
        db.write(
            "INSERT INTO timers_timers (id, session, message, kind, every_s, cron, timezone, next_due, created) "
            "VALUES (?, ?, ?, 'once', 0, '', 'UTC', ?, ?)",
            (uuid.uuid4().hex[:12], session, message, now + after_s, now),
        )
    finally:
        db.close()


@contextlib.contextmanager
def _workers(workspace: Path, config_dir: Path, logs: Path, model: AnsweringModel) -> Iterator[list[KairosProcess]]:
    args = ("-w", workspace, "--model", "openai:fake", "--base-url", model.openai_base_url, "--ack-wait", "2")
    with contextlib.ExitStack() as stack:
        ws: list[KairosProcess] = []
        for _ in range(2):  # one after the other: two first opens of runtime.db at once can meet its lock
            w = stack.enter_context(KairosProcess("worker", *args, config_dir=config_dir, logs=logs))
            w.wait_until("the worker", lambda w=w: "kairos worker" in w.stdout)  # type: ignore[misc]
            ws.append(w)
        yield ws
        for w in ws:
            if w.proc.poll() is None:
                w.send(signal.SIGTERM)
                assert w.wait() == 0, w.stderr


@pytest.fixture(name="deployment")
def deployment_fixture(
    workspace: Path, user_config_dir: Path, postgres_url: str, nats_url: str, nats_stream: str
) -> tuple[Path, Path, str, str]:
    (user_config_dir / "config.toml").write_text(
        f'[storage]\nstore = "{postgres_url}"\nbus = "{nats_url}"\ndeployment = "{nats_stream}"\n'
        f"leader_retry_s = {RETRY_S}\n",
        encoding="utf-8",
    )
    return workspace, user_config_dir, postgres_url, nats_stream


def test_one_of_two_workers_leads_and_a_timer_fires_once(
    deployment: tuple[Path, Path, str, str], tmp_path: Path
) -> None:
    workspace, config_dir, url, stream = deployment
    sid = _session(url)
    _timer(url, sid, "q:timer-a", after_s=3.0)
    with AnsweringModel() as model, _workers(workspace, config_dir, tmp_path / "logs", model) as ws:
        _wait("a leader", lambda: len(_leader_pids(url, stream)) == 1, 10, ws)
        assert _leader_pids(url, stream)[0] in {w.pid for w in ws}
        _wait("the timer's answer", lambda: "a:q:timer-a" in _answers(_trajectories(url, [sid])[sid]), 20, ws)
        time.sleep(2 * RETRY_S)  # the other worker keeps trying and never takes it, nor fires again
        assert len(_leader_pids(url, stream)) == 1
    trajectory = _trajectories(url, [sid])[sid]
    assert _questions(trajectory) == ["q:timer-a"], trajectory  # fired once
    assert set(_answers(trajectory)) == {"a:q:timer-a"}, trajectory
    assert all("Traceback" not in w.stderr for w in ws)


def test_the_other_worker_takes_over_when_the_leader_is_killed(
    deployment: tuple[Path, Path, str, str], tmp_path: Path
) -> None:
    workspace, config_dir, url, stream = deployment
    sid = _session(url)
    _timer(url, sid, "q:timer-before", after_s=3.0)
    with AnsweringModel() as model, _workers(workspace, config_dir, tmp_path / "logs", model) as ws:
        _wait("the first timer", lambda: "a:q:timer-before" in _answers(_trajectories(url, [sid])[sid]), 20, ws)
        leader_pid = _leader_pids(url, stream)[0]
        leader = next(w for w in ws if w.pid == leader_pid)
        other = next(w for w in ws if w is not leader)
        _timer(url, sid, "q:timer-after", after_s=3.0)  # the leader read its timers when it started
        leader.send(signal.SIGKILL)
        killed = time.monotonic()
        assert leader.wait() == -signal.SIGKILL
        _wait("the other worker leads", lambda: _leader_pids(url, stream) == [other.pid], 10, ws)
        took_over_s = time.monotonic() - killed
        _wait("the second timer", lambda: "a:q:timer-after" in _answers(_trajectories(url, [sid])[sid]), 20, ws)
        time.sleep(1.0)
    trajectory = _trajectories(url, [sid])[sid]
    assert _questions(trajectory) == ["q:timer-before", "q:timer-after"], trajectory  # each fired once
    # each answered (a worker's handover note can make one answered twice: a race of the work queue's, not the timers')
    assert set(_answers(trajectory)) == {"a:q:timer-before", "a:q:timer-after"}, trajectory
    print(f"\nthe leader killed: the other worker took the lease {took_over_s:.2f} s later (retry {RETRY_S:g} s)")
    assert took_over_s < RETRY_S + 5
