"""``kairos serve`` on NATS JetStream and PostgreSQL, a real subprocess: events go through the stream (SSE resumes
from it), sessions into the database."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.kairos_cli import KairosProcess, run_kairos
from tests.support.openai_server import OpenAIServer, text_reply

pytest.importorskip("nats", reason="nats-py is not installed: pip install -e '.[scale]'")

from kairos.runtime.bus_nats import NatsBus


def _records_until(
    client: httpx.Client,
    sid: str,
    finals: int,
    last_event_id: int | None = None,
    on_first: Callable[[], None] = lambda: None,
) -> list[dict[str, Any]]:
    """SSE records of the session until the ``finals``-th ``agent.final`` (each frame's id is its record's cursor).

    ``on_first`` runs once the first record arrived (the subscription is live by then).
    """
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    seen: list[dict[str, Any]] = []
    frame: dict[str, str] = {}
    deadline = time.monotonic() + 60
    with client.stream("GET", f"/v1/sessions/{sid}/events", headers=headers) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            assert time.monotonic() < deadline, f"no {finals} answers in 60 s: {seen}"
            if line:
                key, _, value = line.partition(":")
                frame[key] = value.strip()
                continue
            if "data" in frame and "id" in frame:
                record = json.loads(frame["data"])
                assert int(frame["id"]) == record["cursor"] and record["session"] == sid
                seen.append(record)
                if len(seen) == 1:
                    on_first()
                if sum(r["type"] == "agent.final" for r in seen) == finals:
                    return seen
            frame = {}
    raise AssertionError(f"the stream ended early: {seen}")


def _answers(client: httpx.Client, sid: str) -> int:
    messages = client.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    return sum(1 for m in messages if m["role"] == "assistant" and m["content"])


def test_serve_on_nats_streams_events_and_resumes_from_the_stream(
    workspace: Path, user_config_dir: Path, tmp_path: Path, nats_url: str, nats_stream: str
) -> None:
    (user_config_dir / "config.toml").write_text(f'[storage]\ndeployment = "{nats_stream}"\n', encoding="utf-8")
    with OpenAIServer() as model:
        model.script(text_reply("first answer"), text_reply("second answer"), text_reply("third answer"))
        args = ("serve", "--port", "0", "-w", workspace, "--model", "openai:fake", "--base-url", model.openai_base_url)
        with KairosProcess(*args, "--bus", nats_url, config_dir=user_config_dir, logs=tmp_path / "logs") as proc:
            proc.wait_until("serving", lambda: " on http://" in proc.stdout)
            match = re.search(r"on (http://[\d.]+:\d+)", proc.stdout)
            assert match is not None
            proc.wait_until("the storage line", lambda: "events on NATS" in proc.stdout)
            assert f"events on NATS {nats_url} (stream {nats_stream})" in proc.stdout
            with httpx.Client(base_url=match.group(1), timeout=30) as client:
                shown = client.get("/v1/settings").json()["settings"]["storage"]  # the flag over the user config
                assert shown == {"store": "embedded", "bus": nats_url, "deployment": nats_stream, "leader_retry_s": 5.0}
                sid = client.post("/v1/sessions", json={"title": "on nats"}).json()["id"]
                assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "one"}).status_code == 202
                first = _records_until(client, sid, 1)  # from the start of the session
                assert first[0]["type"] == "session.created" and first[-1]["data"]["text"] == "first answer"
                # disconnected: a second turn happens meanwhile
                assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "two"}).status_code == 202
                deadline = time.monotonic() + 60
                while _answers(client, sid) < 2:
                    assert time.monotonic() < deadline, proc.stderr
                    time.sleep(0.05)
                # reconnect from the last cursor seen: the missed turn from the stream, then a live one
                last = first[-1]["cursor"]

                def third() -> None:
                    with httpx.Client(base_url=match.group(1), timeout=30) as other:
                        assert other.post(f"/v1/sessions/{sid}/messages", json={"text": "three"}).status_code == 202

                rest = _records_until(client, sid, 2, last_event_id=last, on_first=third)
            proc.send(signal.SIGTERM)
            assert proc.wait() == 0, proc.stderr
    finals = [r["data"]["text"] for r in first + rest if r["type"] == "agent.final"]
    assert finals == ["first answer", "second answer", "third answer"]
    cursors = [r["cursor"] for r in first + rest]
    assert cursors == sorted(set(cursors)) and rest[0]["cursor"] > last  # nothing twice, in order
    bus = NatsBus(nats_url, nats_stream, create=False)  # the records are JetStream's, not SQLite's
    try:
        stored = bus.history(sid, 0)
    finally:
        bus.close()
    upto = [e for e in stored if e.cursor <= cursors[-1]]
    assert [(e.cursor, e.type, e.data) for e in upto] == [(r["cursor"], r["type"], r["data"]) for r in first + rest]


def test_serve_with_an_unreachable_bus_says_how_to_start_one(
    workspace: Path, user_config_dir: Path, tmp_path: Path
) -> None:
    from kairos.testing.servers import free_port

    url = f"nats://kairos:s3cr3t-pw@127.0.0.1:{free_port()}"
    code, out, err = run_kairos(
        "serve", "--port", "0", "-w", workspace, "--model", "openai:fake", "--base-url", "http://127.0.0.1:9/v1",
        "--bus", url, config_dir=user_config_dir, logs=tmp_path / "logs",
    )  # fmt: skip
    assert code == 1
    assert "cannot reach NATS at nats://kairos:***@127.0.0.1:" in err and "nats-server -js" in err
    assert "s3cr3t-pw" not in out + err


def test_serve_on_postgresql_and_nats_answers_and_keeps_the_trajectory_in_postgresql(
    workspace: Path, user_config_dir: Path, tmp_path: Path, nats_url: str, nats_stream: str, postgres_url: str
) -> None:
    from kairos.context.session import SessionStore

    (user_config_dir / "config.toml").write_text(
        f'[storage]\nstore = "{postgres_url}"\nbus = "{nats_url}"\ndeployment = "{nats_stream}"\n', encoding="utf-8"
    )
    with OpenAIServer() as model:
        model.script(text_reply("kept in postgres"))
        args = ("serve", "--port", "0", "-w", workspace, "--model", "openai:fake", "--base-url", model.openai_base_url)
        with KairosProcess(*args, config_dir=user_config_dir, logs=tmp_path / "logs") as proc:
            proc.wait_until("serving", lambda: " on http://" in proc.stdout)
            match = re.search(r"on (http://[\d.]+:\d+)", proc.stdout)
            assert match is not None
            proc.wait_until("the storage line", lambda: "events on NATS" in proc.stdout)
            assert f"sessions in {postgres_url}, events on NATS {nats_url} (stream {nats_stream})" in proc.stdout
            with httpx.Client(base_url=match.group(1), timeout=30) as client:
                sid = client.post("/v1/sessions", json={"title": "scaled"}).json()["id"]
                assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}).status_code == 202
                records = _records_until(client, sid, 1)
            proc.send(signal.SIGTERM)
            assert proc.wait() == 0, proc.stderr
    assert records[-1]["data"]["text"] == "kept in postgres"
    assert not (workspace / ".kairos" / "kairos.db").exists()  # the sessions are not in SQLite
    store = SessionStore(workspace, db_path=postgres_url)
    try:
        contents = [m.content for m in store.trajectories.load_messages(sid)]
    finally:
        store.close()
    assert any("hi" in c for c in contents) and "kept in postgres" in contents
