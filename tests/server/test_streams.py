"""SSE and WebSocket streams on a real uvicorn: resume from a cursor misses nothing, repeats nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

import kairos.runtime.bus
from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.runtime import Runtime
from kairos.server import create_app
from kairos.testing import ScriptedModel, reply
from tests.server.conftest import TOKEN, live, until
from tests.support.models import Gated

WAIT = 30


async def _sse(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Parsed SSE frames: {"id", "event", "data", "comment"}."""
    frame: dict[str, Any] = {}
    async for line in resp.aiter_lines():
        if line == "":
            if frame:
                yield frame
            frame = {}
        elif line.startswith(":"):
            frame["comment"] = line[1:].strip()
        else:
            key, _, value = line.partition(":")
            frame[key] = value.strip()


async def _records_until(
    client: httpx.AsyncClient,
    url: str,
    stop: str,
    headers: dict[str, str] | None = None,
    last: Callable[[dict[str, Any]], bool] = lambda record: True,
) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(WAIT), client.stream("GET", url, headers=headers) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        async for frame in _sse(resp):
            if "data" in frame and "id" in frame:
                record = json.loads(frame["data"])
                assert int(frame["id"]) == record["cursor"]
                seen.append(record)
                if record["type"] == stop and last(record):
                    return seen
    raise AssertionError(f"the stream ended before {stop}: {seen}")


async def test_sse_streams_a_turn_and_resumes_from_last_event_id(tmp_path: Path) -> None:
    model = ScriptedModel([reply("first answer"), reply("second answer")])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        app = create_app(rt, heartbeat_s=0.2)
        async with live(app) as (_, url), httpx.AsyncClient(base_url=url) as client:
            sid = (await client.post("/v1/sessions", json={"title": "s"})).json()["id"]
            await client.post(f"/v1/sessions/{sid}/messages", json={"text": "one"})
            first = await _records_until(client, f"/v1/sessions/{sid}/events", "agent.final")
            assert first[0]["type"] == "session.created" and first[-1]["data"]["text"] == "first answer"
            # disconnected; more happens; reconnect with the last cursor seen
            await client.post(f"/v1/sessions/{sid}/messages", json={"text": "two"})
            await rt.wait_idle(sid)
            last = str(first[-1]["cursor"])
            rest = await _records_until(client, f"/v1/sessions/{sid}/events", "agent.final", {"Last-Event-ID": last})
            everything = await _records_until(client, f"/v1/sessions/{sid}/events?after=0", "agent.final")
    assert rest[-1]["data"]["text"] == "second answer"
    cursors = [r["cursor"] for r in first + rest]
    assert cursors == sorted(set(cursors))  # nothing twice, in order
    # nothing missed: the two halves are the session's stream up to the second answer
    full = [r["cursor"] for r in everything]
    assert full[: len(first)] == [r["cursor"] for r in first]


async def test_sse_sends_heartbeats_and_refuses_bad_cursors(tmp_path: Path) -> None:
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt:
        app = create_app(rt, heartbeat_s=0.05)
        async with live(app) as (_, url), httpx.AsyncClient(base_url=url) as client:
            sid = (await client.post("/v1/sessions", json={})).json()["id"]
            async with asyncio.timeout(WAIT), client.stream("GET", f"/v1/sessions/{sid}/events?after=latest") as r:
                async for frame in _sse(r):
                    if frame.get("comment") == "keep-alive":
                        break
            bad = await client.get(f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": "abc"})
            assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request"
            assert (await client.get("/v1/sessions/nope/events")).status_code == 404


async def test_stopping_the_server_ends_open_streams_and_drains(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    rt = Runtime(Agent(ScriptedModel([reply("done")])), store)
    app = create_app(rt, heartbeat_s=0.2)  # the app's lifespan starts and drains this runtime
    async with live(app) as (server, url), httpx.AsyncClient(base_url=url) as client:
        sid = (await client.post("/v1/sessions", json={})).json()["id"]
        frames: list[dict[str, Any]] = []

        async def listen() -> None:
            async with client.stream("GET", f"/v1/sessions/{sid}/events") as resp:
                async for frame in _sse(resp):
                    frames.append(frame)

        listener = asyncio.create_task(listen())
        await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
        await until(lambda: any("agent.final" in f.get("data", "") for f in frames))
        server.stop()
        await asyncio.wait_for(listener, WAIT)  # the stream ended by itself
    assert frames[-1].get("event") == "error" and "stopping" in frames[-1]["data"]
    assert not rt.accepting
    assert [m.content for m in store.trajectories.load_messages(sid)] == ["hi", "done"]


async def test_websocket_streams_takes_messages_and_resumes(tmp_path: Path) -> None:
    model = ScriptedModel([reply("ws answer"), reply("second")])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        app = create_app(rt, token=TOKEN, heartbeat_s=0.5)
        async with live(app) as (_, url):
            ws_url = url.replace("http", "ws")
            auth = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx.AsyncClient(base_url=url, headers=auth) as client:
                sid = (await client.post("/v1/sessions", json={})).json()["id"]
            async with websockets.connect(f"{ws_url}/v1/sessions/{sid}/ws", additional_headers=auth) as ws:
                await ws.send(json.dumps({"resume": 0}))
                await ws.send("not json")
                await ws.send(json.dumps({"text": "hello", "ref": "r1"}))
                seen: list[dict[str, Any]] = []
                async with asyncio.timeout(WAIT):
                    while not any(f.get("type") == "agent.final" for f in seen):
                        seen.append(json.loads(await ws.recv()))
            kinds = [f["type"] for f in seen]
            assert "error" in kinds  # the bad frame was answered, the socket stayed open
            receipt = next(f for f in seen if f["type"] == "receipt")
            assert receipt["ref"] == "r1" and receipt["receipt"]["strategy"] == "queue"
            records = [f for f in seen if "cursor" in f]
            assert records[0]["type"] == "session.created"
            last = records[-1]["cursor"]
            async with websockets.connect(f"{ws_url}/v1/sessions/{sid}/ws?after={last}", additional_headers=auth) as ws:
                await ws.send(json.dumps({"text": "again"}))
                more: list[dict[str, Any]] = []
                async with asyncio.timeout(WAIT):
                    while not any(f.get("type") == "agent.final" for f in more):
                        more.append(json.loads(await ws.recv()))
            assert all(f["cursor"] > last for f in more if "cursor" in f)
            assert [f["data"]["text"] for f in more if f.get("type") == "agent.final"] == ["second"]
            # no token: refused at the handshake
            try:
                async with websockets.connect(f"{ws_url}/v1/sessions/{sid}/ws"):
                    raise AssertionError("connected without a token")
            except websockets.InvalidStatus as e:
                assert e.response.status_code == 403


async def test_a_client_that_falls_behind_is_cut_off_and_resumes_without_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kairos.runtime.bus, "_QUEUE_LIMIT", 5)
    async with (
        Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt,
        live(create_app(rt, heartbeat_s=5)) as (_, url),
        httpx.AsyncClient(base_url=url) as client,
    ):
        sid = rt.create_session()
        frames: list[dict[str, Any]] = []
        async with asyncio.timeout(WAIT), client.stream("GET", f"/v1/sessions/{sid}/events") as resp:
            async for frame in _sse(resp):
                frames.append(frame)
                if len(frames) == 2:  # retry hint, then session.created: the subscription is live
                    for i in range(100):  # all in one tick: the stream cannot keep up
                        rt.bus.publish(sid, "test.burst", {"i": i})
        assert frames[0] == {"retry": "3000"}
        assert frames[-1]["event"] == "error" and json.loads(frames[-1]["data"])["error"]["type"] == "too_slow"
        last = max(int(f["id"]) for f in frames if "id" in f)
        got = [f for f in frames if "id" in f]
        rest = await _records_until(
            client,
            f"/v1/sessions/{sid}/events",
            "test.burst",
            {"Last-Event-ID": str(last)},
            lambda record: record["data"]["i"] == 99,
        )
    burst = [json.loads(f["data"])["data"]["i"] for f in got[1:]] + [r["data"]["i"] for r in rest]
    assert burst == list(range(100))


async def test_while_a_slow_model_is_silent_the_session_stream_says_what_it_does_and_keeps_alive(
    tmp_path: Path,
) -> None:
    """Issue 24 §2: what a chat's status line shows reaches every front end, and the stream stays alive."""
    model = Gated([reply("at last")])
    async with (
        Runtime(Agent(model), SessionStore(tmp_path)) as rt,
        live(create_app(rt, heartbeat_s=0.2)) as (_, url),
        httpx.AsyncClient(base_url=url) as client,
    ):
        sid = (await client.post("/v1/sessions", json={})).json()["id"]
        await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})
        frames: list[dict[str, Any]] = []
        async with asyncio.timeout(WAIT), client.stream("GET", f"/v1/sessions/{sid}/events") as resp:
            async for frame in _sse(resp):
                frames.append(frame)
                if frame.get("comment") == "keep-alive" and not model.gate.is_set():
                    model.gate.set()  # silent long enough for a keep-alive: now the model answers
                if "data" in frame and json.loads(frame["data"])["type"] == "agent.final":
                    break
    records = [json.loads(f["data"]) for f in frames if "data" in f]
    activity = next(r for r in records if r["type"] == "agent.activity")
    assert activity["data"] == {
        "kind": "waiting",
        "done": 0,
        "total": 0,
        "detail": "",
        "text": "waiting for the first token",
    }
    keep_alive = next(i for i, f in enumerate(frames) if f.get("comment") == "keep-alive")
    text_at = next(i for i, f in enumerate(frames) if "data" in f and json.loads(f["data"])["type"] == "agent.text")
    assert keep_alive < text_at


async def test_a_websocket_frame_has_the_http_body_limit(tmp_path: Path) -> None:
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt:
        sid = rt.create_session("limits")
        async with live(create_app(rt, max_body=4096)) as (_, url):
            big = json.dumps({"text": "x" * 5000})
            async with httpx.AsyncClient(base_url=url) as client:
                posted = await client.post(f"/v1/sessions/{sid}/messages", content=big,
                                           headers={"Content-Type": "application/json"})  # fmt: skip
            assert posted.status_code == 413
            async with websockets.connect(url.replace("http", "ws") + f"/v1/sessions/{sid}/ws") as ws:
                await ws.send(big)
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), WAIT)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009  # message too big
        assert rt.store.trajectories.pending_events(sid) == []
