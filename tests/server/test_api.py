"""The HTTP API in process: sessions, messages, errors as JSON, auth, the outbox routes."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kairos.models.types import Message
from kairos.testing import ScriptedModel, call, reply
from kairos.testing.runtime import gather_answers
from kairos.tools.function import tool
from tests.server.conftest import TOKEN, api


def _is_error(resp: Any, status: int) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and isinstance(body["error"]["message"], str) and body["error"]["type"]


async def test_sessions_are_created_listed_and_read(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel()) as (rt, client):
        created = await client.post("/v1/sessions", json={"title": "support"})
        assert created.status_code == 201
        sid = created.json()["id"]
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert [(s["id"], s["title"], s["busy"]) for s in listed] == [(sid, "support", False)]
        one = (await client.get(f"/v1/sessions/{sid}")).json()
        assert one["id"] == sid and one["messages"] == 0 and one["pending"] == 0
        _is_error(await client.get("/v1/sessions/nope"), 404)
        assert (await client.post("/v1/sessions")).status_code == 201  # the body is optional


async def test_a_message_is_queued_answered_and_deduplicated_by_idempotency_key(tmp_path: Path) -> None:
    model = ScriptedModel([reply("hello from kairos")])
    async with api(tmp_path, model) as (rt, client):
        sid = (await client.post("/v1/sessions", json={})).json()["id"]
        answers = asyncio.create_task(gather_answers(rt, sid, lambda a: len(a) == 1, timeout_s=30))
        await asyncio.sleep(0)
        sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}, headers={"Idempotency-Key": "k1"})
        assert sent.status_code == 202 and sent.json()["strategy"] == "queue" and sent.json()["seq"] is not None
        again = await client.post(
            f"/v1/sessions/{sid}/messages", json={"text": "hi"}, headers={"Idempotency-Key": "k1"}
        )
        assert again.status_code == 202 and again.json()["duplicate"] is True
        assert await answers == ["hello from kairos"]
        await rt.wait_idle(sid)
        messages = rt.store.trajectories.load_messages(sid)
    assert [m.content for m in messages] == ["hi", "hello from kairos"]  # the retry was not queued again
    assert len(model.requests) == 1


async def test_interrupt_of_an_idle_session_says_nothing_ran(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel()) as (rt, client):
        sid = (await client.post("/v1/sessions", json={})).json()["id"]
        assert (await client.post(f"/v1/sessions/{sid}/interrupt")).json() == {"interrupted": False}
        _is_error(await client.post("/v1/sessions/unknown/interrupt"), 404)


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (b"{not json", {"content-type": "application/json"}, 400),
        (b'{"text": 5}', {"content-type": "application/json"}, 422),
        (b'{"text": ""}', {"content-type": "application/json"}, 422),
        (b'{"text": "x", "strategy": "explode"}', {"content-type": "application/json"}, 422),
        (b"[]", {"content-type": "application/json"}, 422),
        (b"\xff\xfe\x00garbage", {"content-type": "application/json"}, 400),
        (b"text=hi", {"content-type": "application/x-www-form-urlencoded"}, 422),
        (b"x" * (64 * 1024 + 1), {"content-type": "application/json"}, 413),
        (b"{}", {"content-type": "application/json", "content-length": "abc"}, 400),
    ],
)
async def test_bad_requests_get_a_4xx_with_a_json_error_and_queue_nothing(
    tmp_path: Path, body: bytes, headers: dict[str, str], status: int
) -> None:
    async with api(tmp_path, ScriptedModel(), max_body=64 * 1024) as (rt, client):
        sid = (await client.post("/v1/sessions", json={})).json()["id"]
        resp = await client.post(f"/v1/sessions/{sid}/messages", content=body, headers=headers)
        _is_error(resp, status)
        assert rt.store.trajectories.pending_events(sid) == []
        assert (await client.get("/v1/health")).json()["ok"] is True  # still serving


async def test_a_chunked_body_over_the_limit_is_413(tmp_path: Path) -> None:
    async def chunks() -> Any:
        for _ in range(20):
            yield b"x" * 1024

    async with api(tmp_path, ScriptedModel(), max_body=4096) as (rt, client):
        sid = (await client.post("/v1/sessions", json={})).json()["id"]
        _is_error(await client.post(f"/v1/sessions/{sid}/messages", content=chunks()), 413)


async def test_unknown_routes_and_methods_are_json_errors(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel()) as (rt, client):
        _is_error(await client.get("/v1/nothing-here"), 404)
        _is_error(await client.delete("/v1/sessions"), 405)
        _is_error(await client.get("/v1/sessions", params={"limit": "many"}), 422)


async def test_a_bug_in_a_route_is_a_500_json_and_the_server_keeps_serving(tmp_path: Path) -> None:
    class BrokenOutbox:
        def messages(self, *, unread_only: bool = False, limit: int = 100) -> list[dict[str, Any]]:
            raise ZeroDivisionError("boom")

    async with api(tmp_path, ScriptedModel(), outbox=BrokenOutbox()) as (rt, client):
        resp = await client.get("/v1/outbox")
        _is_error(resp, 500)
        assert "boom" not in resp.text  # internals are logged, not sent
        assert (await client.get("/v1/health")).status_code == 200


async def test_bearer_token_is_required_everywhere_but_health(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel(), token=TOKEN) as (rt, client):
        assert (await client.get("/v1/health")).status_code == 200
        for path in ("/v1/sessions", "/v1/models"):  # /docs and /openapi.json are open: see the docs test
            _is_error(await client.get(path), 401)
            _is_error(await client.get(path, headers={"Authorization": "Bearer wrong"}), 401)
            _is_error(await client.get(path, headers={"Authorization": TOKEN}), 401)  # no scheme
        ok = await client.get("/v1/sessions", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        _is_error(await client.post("/v1/sessions", json={}), 401)
        assert rt.store.list() == []


async def test_the_openapi_document_lists_the_routes(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel()) as (rt, client):
        paths = (await client.get("/openapi.json")).json()["paths"]
    for path in ("/v1/sessions", "/v1/sessions/{session_id}/messages", "/v1/events", "/v1/chat/completions"):
        assert path in paths


class MemoryOutbox:
    """An outbox kept in memory, with async methods (the routes take sync or async ones)."""

    def __init__(self) -> None:
        self.items = [{"id": "m1", "text": "build finished", "read": False}, {"id": "m2", "text": "hi", "read": True}]
        self.open = {"q1": "deploy now?"}
        self.answers: dict[str, str] = {}

    async def messages(self, *, unread_only: bool = False, limit: int = 100) -> list[dict[str, Any]]:
        return [m for m in self.items if not (unread_only and m["read"])][:limit]

    async def mark_read(self, ids: Sequence[str]) -> int:
        changed = [m for m in self.items if m["id"] in ids and not m["read"]]
        for m in changed:
            m["read"] = True
        return len(changed)

    def questions(self, *, open_only: bool = True) -> list[dict[str, Any]]:
        return [{"id": k, "text": v} for k, v in self.open.items()]

    def answer(self, question_id: str, text: str) -> bool:
        if question_id not in self.open:
            return False
        del self.open[question_id]
        self.answers[question_id] = text
        return True


async def test_outbox_and_questions_routes(tmp_path: Path) -> None:
    outbox = MemoryOutbox()
    async with api(tmp_path, ScriptedModel(), outbox=outbox) as (rt, client):
        unread = (await client.get("/v1/outbox", params={"unread": "1"})).json()["messages"]
        assert [m["id"] for m in unread] == ["m1"]
        assert (await client.post("/v1/outbox/read", json={"ids": ["m1", "zz"]})).json() == {"marked": 1}
        assert (await client.get("/v1/outbox", params={"unread": "1"})).json()["messages"] == []
        assert (await client.get("/v1/questions")).json()["questions"] == [{"id": "q1", "text": "deploy now?"}]
        assert (await client.post("/v1/questions/q1/answer", json={"text": "yes"})).json() == {"answered": True}
        _is_error(await client.post("/v1/questions/q1/answer", json={"text": "again"}), 404)
        _is_error(await client.post("/v1/questions/q2/answer", json={}), 422)
    assert outbox.answers == {"q1": "yes"}


async def test_outbox_routes_without_an_outbox_say_so(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel()) as (rt, client):
        _is_error(await client.get("/v1/outbox"), 503)
        _is_error(await client.get("/v1/questions"), 503)


async def test_the_docs_page_works_offline_and_with_a_token(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel(), token="secret-token") as (_, client):
        page = await client.get("/docs")  # a browser sends no bearer token
        assert page.status_code == 200 and "swagger-ui-bundle.js" in page.text
        assert not re.search(r"(src|href)=['\"]https?://", page.text)  # nothing from a CDN
        for asset in re.findall(r"(?:src|href)=['\"](/docs-assets/[^'\"]+)", page.text):
            loaded = await client.get(asset)
            assert loaded.status_code == 200 and len(loaded.content) > 1000, asset
        schema = (await client.get("/openapi.json")).json()
        assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"  # the Authorize button
        assert (await client.get("/v1/sessions")).status_code == 401  # the API itself still needs the token


async def test_a_message_longer_than_the_window_is_refused_and_the_session_stays_usable(tmp_path: Path) -> None:
    model = ScriptedModel([reply("short answer")])
    model.context_window = 4096
    async with api(tmp_path, model) as (rt, client):
        sid = (await client.post("/v1/sessions", json={})).json()["id"]
        huge = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "word " * 5000})  # ~6,250 tokens
        assert huge.status_code == 413 and "save it to a file" in huge.json()["error"]["message"]
        fine = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "a normal question"})
        assert fine.status_code == 202
        await rt.wait_idle(sid)
        assert [m.content for m in rt.store.trajectories.load_messages(sid)] == ["a normal question", "short answer"]


@tool
def lookup(key: str) -> str:
    """Look a value up."""
    return f"{key}=42"


async def test_a_sessions_messages_and_requests_can_be_read(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel([reply("", call("lookup", {"key": "x"})), reply("x is 42")]),
                   tools=[lookup]) as (rt, client):  # fmt: skip
        sid = (await client.post("/v1/sessions", json={})).json()["id"]
        await client.post(f"/v1/sessions/{sid}/messages", json={"text": "what is x?"})
        await rt.wait_idle(sid)
        messages = (await client.get(f"/v1/sessions/{sid}/messages")).json()["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[1]["tool_calls"][0][1] == "lookup" and messages[-1]["content"] == "x is 42"
        page = (await client.get(f"/v1/sessions/{sid}/messages", params={"offset": 2, "limit": 1})).json()
        assert page["offset"] == 2 and [m["role"] for m in page["messages"]] == ["tool"]
        requests = (await client.get(f"/v1/sessions/{sid}/requests")).json()["requests"]
        assert len(requests) == 2 and all("prompt_tokens" in r and "prefix_ok" in r for r in requests)
        for path in ("messages", "requests"):
            _is_error(await client.get(f"/v1/sessions/nope/{path}"), 404)


async def test_memories_are_listed_with_their_provenance_and_one_can_be_forgotten(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from kairos.knowledge import HashEmbedder
    from kairos.memory import UserMemory

    extractor = ScriptedModel([reply("", call("save_memories", {"operations": [
        {"op": "add", "content": "The user is allergic to penicillin", "importance": 0.9},
        {"op": "add", "content": "The user lives in Oslo"},
    ]}))])  # fmt: skip
    memory = UserMemory.open(tmp_path / "mem", HashEmbedder(), extractor)
    said = [Message.user("I'm allergic to penicillin and I live in Oslo.")]
    await memory.ingest_session(said, session_id="old", at=datetime(2026, 1, 5, tzinfo=UTC))
    try:
        async with api(tmp_path, ScriptedModel(), memory=memory) as (_, client):
            listed = (await client.get("/v1/memory")).json()["memories"]
            assert [m["content"] for m in listed][0] == "The user is allergic to penicillin"  # most important first
            assert listed[0]["provenance"]["source"] == "user"
            oslo = next(m["id"] for m in listed if "Oslo" in m["content"])
            assert (await client.delete(f"/v1/memory/{oslo}")).json() == {"forgotten": 1}
            _is_error(await client.delete(f"/v1/memory/{oslo}"), 404)
            assert [m["content"] for m in (await client.get("/v1/memory")).json()["memories"]] == [
                "The user is allergic to penicillin"
            ]
        async with api(tmp_path / "none", ScriptedModel()) as (_, client):
            _is_error(await client.get("/v1/memory"), 503)
    finally:
        memory.close()


async def test_the_knowledge_base_can_be_searched_and_listed(tmp_path: Path) -> None:
    from kairos.knowledge import HashEmbedder, KnowledgeBase

    kb = KnowledgeBase.open(tmp_path / "kb", HashEmbedder())
    (tmp_path / "deploy.md").write_text("# Deploy\n\nDeploys run every Friday at noon.\n")
    (tmp_path / "later.md").write_text("# Later\n\nThe walrus meeting moved to Tuesday.\n")
    kb.ingest([tmp_path / "deploy.md"])
    kb.ingest([tmp_path / "later.md"], vectors=False)  # searchable by text, its vector not made yet
    try:
        async with api(tmp_path, ScriptedModel(), knowledge=kb) as (_, client):
            found = (await client.get("/v1/knowledge/search", params={"q": "when do deploys run", "k": 1})).json()
            (hit,) = found["hits"]
            assert hit["source"].endswith("deploy.md") and hit["bm25_rank"] == 1 and hit["dense_rank"] is not None
            walrus = (await client.get("/v1/knowledge/search", params={"q": "walrus", "mode": "bm25"})).json()
            assert walrus["hits"][0]["source"].endswith("later.md")
            listed = (await client.get("/v1/knowledge/documents")).json()
            assert len(listed["documents"]) == 2 and listed["chunks_without_vectors"] == 1
            _is_error(await client.get("/v1/knowledge/search", params={"q": "x", "mode": "magic"}), 422)
        async with api(tmp_path / "none", ScriptedModel()) as (_, client):
            _is_error(await client.get("/v1/knowledge/search", params={"q": "x"}), 503)
    finally:
        kb.close()


async def test_a_sessions_timeline_pages_through_what_happened(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel([reply("first"), reply("second")])) as (rt, client):
        sid = (await client.post("/v1/sessions", json={})).json()["id"]
        for text in ("one", "two"):
            await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
            await rt.wait_idle(sid)
        records = (await client.get(f"/v1/sessions/{sid}/timeline")).json()["records"]
        types = [r["type"] for r in records]
        assert types[0] == "session.created" and types.count("event.accepted") == 2 and types.count("agent.final") == 2
        cursor = records[2]["cursor"]
        rest = (await client.get(f"/v1/sessions/{sid}/timeline", params={"after": cursor, "limit": 2})).json()
        assert [r["cursor"] for r in rest["records"]] == [r["cursor"] for r in records[3:5]]
        _is_error(await client.get("/v1/sessions/nope/timeline"), 404)
