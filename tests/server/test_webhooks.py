"""Signed webhooks: HMAC over "<timestamp>.<body>", a replay window, nothing queued when refused."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kairos.context.inbox import ExternalContent
from kairos.context.store import StoredEvent
from kairos.runtime import Runtime
from kairos.server import sign
from kairos.server.auth import REPLAY_WINDOW_S
from kairos.testing import ScriptedModel, reply
from tests.server.conftest import SECRET, TOKEN, api


def _body(**fields: Any) -> bytes:
    return json.dumps({"type": "ci.build", "content": "build 42 failed", "source": {"sender": "ci"}, **fields}).encode()


def _pending(rt: Runtime, sid: str) -> list[StoredEvent]:
    return rt.store.trajectories.pending_events(sid)


async def test_a_signed_event_is_queued_as_external_content(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel([reply("noted")]), webhook_secret=SECRET, token=TOKEN) as (rt, client):
        sid = rt.create_session("ops")
        body = _body(session=sid, id="evt-1", context={"build": 42})
        resp = await client.post("/v1/events", content=body, headers=sign(SECRET, body))  # no bearer needed
        assert resp.status_code == 202, resp.text
        assert resp.json()["session"] == sid and resp.json()["duplicate"] is False
        again = await client.post("/v1/events", content=body, headers=sign(SECRET, body))
        assert again.status_code == 202 and again.json()["duplicate"] is True  # as for messages
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
    assert len(messages) == 2  # one event, taken up once
    assert messages[0].content.startswith("<external_content") and "build 42 failed" in messages[0].content
    assert messages[0].origin is not None and messages[0].origin.kind == "external"


async def test_an_urgent_event_is_routed_as_an_interrupt(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel([reply("on it")]), webhook_secret=SECRET) as (rt, client):
        sid = rt.create_session()
        body = _body(session=sid, urgent=True)
        resp = await client.post("/v1/events", content=body, headers=sign(SECRET, body))
        assert resp.status_code == 202 and resp.json()["strategy"] == "interrupt"
        await rt.wait_idle(sid)


@pytest.mark.parametrize(
    "case",
    ["no_headers", "wrong_secret", "tampered_body", "stale", "future", "bad_timestamp", "bad_scheme", "empty_sig"],
)
async def test_a_bad_signature_is_401_and_nothing_is_queued(tmp_path: Path, case: str) -> None:
    async with api(tmp_path, ScriptedModel(), webhook_secret=SECRET) as (rt, client):
        sid = rt.create_session()
        body = _body(session=sid)
        headers = {
            "no_headers": {},
            "wrong_secret": sign("not-the-secret", body),
            "tampered_body": sign(SECRET, body.replace(b"failed", b"passed")),
            "stale": sign(SECRET, body, int(time.time()) - REPLAY_WINDOW_S - 60),
            "future": sign(SECRET, body, int(time.time()) + REPLAY_WINDOW_S + 60),
            "bad_timestamp": {**sign(SECRET, body), "X-Kairos-Timestamp": "yesterday"},
            "bad_scheme": {**sign(SECRET, body), "X-Kairos-Signature": "md5=abc"},
            "empty_sig": {**sign(SECRET, body), "X-Kairos-Signature": ""},
        }[case]
        resp = await client.post("/v1/events", content=body, headers=headers)
        assert resp.status_code == 401, resp.text
        assert resp.json()["error"]["type"] == "unauthorized" and SECRET not in resp.text
        assert _pending(rt, sid) == [] and rt.active_sessions() == []


async def test_without_a_secret_webhooks_are_refused_with_how_to_enable_them(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel()) as (rt, client):
        body = _body()
        resp = await client.post("/v1/events", content=body, headers=sign("anything", body))
        assert resp.status_code == 503 and "KAIROS_WEBHOOK_SECRET" in resp.json()["error"]["message"]
        assert rt.store.list() == []  # not even the default session was made


@pytest.mark.parametrize(
    ("fields", "raw", "status"),
    [
        ({"type": "user.input"}, None, 400),
        ({"type": "user.interrupt"}, None, 400),
        ({"type": "timer.trigger"}, None, 400),  # would reach the model as kairos's own <timer> block
        ({"type": "async.result", "context": {"task_id": "t1"}}, None, 400),  # ... or as a <task_result>
        ({"type": "supervisor.instruction"}, None, 400),
        ({"source": {"type": "user", "sender": "me"}}, None, 400),  # "user from me" in the wrapper
        ({"source": {"type": "Kairos"}}, None, 400),
        ({"type": ""}, None, 400),
        ({"content": 7}, None, 400),
        ({"source": "ci"}, None, 400),
        ({"urgent": "yes"}, None, 400),
        ({"session": "no-such-session"}, None, 404),
        ({}, b"[1, 2]", 400),
        ({}, b"not json at all", 400),
    ],
)
async def test_signed_but_invalid_events_are_4xx_and_not_queued(
    tmp_path: Path, fields: dict[str, Any], raw: bytes | None, status: int
) -> None:
    async with api(tmp_path, ScriptedModel(), webhook_secret=SECRET) as (rt, client):
        sid = rt.create_session()
        body = raw if raw is not None else _body(**{"session": sid, **fields})
        resp = await client.post("/v1/events", content=body, headers=sign(SECRET, body))
        assert resp.status_code == status, resp.text
        assert "error" in resp.json()
        assert _pending(rt, sid) == []


async def test_an_event_without_a_session_goes_to_the_default_one(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel([reply("ok")]), webhook_secret=SECRET) as (rt, client):
        body = _body()
        resp = await client.post("/v1/events", content=body, headers=sign(SECRET, body))
        assert resp.status_code == 202 and resp.json()["session"] == rt.default_session()
        await rt.wait_idle(resp.json()["session"])


def test_the_inbox_event_is_external() -> None:
    from kairos.runtime.events import Event, inbox_event

    assert isinstance(inbox_event(Event("ci.build", "x", {"type": "user"}, "webhook"), "queue"), ExternalContent)


async def test_a_replayed_webhook_without_an_id_is_queued_once(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel([reply("noted")] * 3), webhook_secret=SECRET) as (rt, client):
        sid = rt.create_session()
        body = _body(session=sid)  # no id: the sender relies on the signature
        headers = sign(SECRET, body)
        first = await client.post("/v1/events", content=body, headers=headers)
        replays = [await client.post("/v1/events", content=body, headers=headers) for _ in range(3)]
        assert first.json()["duplicate"] is False and all(r.json()["duplicate"] for r in replays)
        later = await client.post("/v1/events", content=body, headers=sign(SECRET, body, int(time.time()) + 1))
        assert later.json()["duplicate"] is False  # the same event sent again later is a new event
        await rt.wait_idle(sid)


async def test_idempotency_keys_are_scoped_per_session_and_route(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel([reply("ok")] * 6), webhook_secret=SECRET) as (rt, client):
        a, b = rt.create_session("a"), rt.create_session("b")
        key = {"Idempotency-Key": "k2"}
        assert (await client.post(f"/v1/sessions/{a}/messages", json={"text": "hi"}, headers=key)).json()["seq"]
        other = await client.post(f"/v1/sessions/{b}/messages", json={"text": "hi"}, headers=key)
        assert other.status_code == 202 and other.json()["duplicate"] is False  # another session: another request
        body = _body(session=a, id="k2")  # a webhook whose id is a user's key: another route
        hook = await client.post("/v1/events", content=body, headers=sign(SECRET, body))
        assert hook.status_code == 202 and hook.json()["duplicate"] is False
        changed = await client.post(f"/v1/sessions/{a}/messages", json={"text": "bye"}, headers=key)
        assert changed.status_code == 422 and changed.json()["error"]["type"] == "idempotency_conflict"
        same = await client.post(f"/v1/sessions/{a}/messages", json={"text": "hi"}, headers=key)
        assert same.status_code == 202 and same.json()["duplicate"] is True
        for sid in (a, b):
            await rt.wait_idle(sid)
