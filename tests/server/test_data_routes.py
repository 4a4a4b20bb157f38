"""The routes behind the web UI's memory, knowledge and tools pages, over HTTP (in process)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kairos.knowledge import HashEmbedder, KnowledgeBase
from kairos.memory import UserMemory
from kairos.models.types import Message
from kairos.testing import ScriptedModel, call, reply
from tests.server.conftest import api


def _is_error(resp: Any, status: int) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and isinstance(body["error"]["message"], str) and body["error"]["type"]
    return str(body["error"]["message"])


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[UserMemory]:
    """Two memories the user said in a session on 2026-01-05 (HashEmbedder: no model is loaded)."""
    extractor = ScriptedModel([reply("", call("save_memories", {"operations": [
        {"op": "add", "content": "The user lives in Oslo", "importance": 0.9},
        {"op": "add", "content": "The user likes tea"},
    ]}))])  # fmt: skip
    mem = UserMemory.open(tmp_path / "mem", HashEmbedder(), extractor)
    said = [Message.user("I live in Oslo and I like tea.")]
    await mem.ingest_session(said, session_id="s-old", at=datetime(2026, 1, 5, tzinfo=UTC))
    yield mem
    mem.close()


async def test_an_edit_writes_a_new_version_by_the_user_and_keeps_the_old_one(
    tmp_path: Path, memory: UserMemory
) -> None:
    async with api(tmp_path, ScriptedModel(), memory=memory) as (_, client):
        listed = (await client.get("/v1/memory")).json()["memories"]
        oslo = next(m for m in listed if "Oslo" in m["content"])
        resp = await client.put(f"/v1/memory/{oslo['id']}", json={"content": "  The user lives in Bergen  "})
        assert resp.status_code == 200, resp.text
        edited = resp.json()["memory"]
        assert edited["content"] == "The user lives in Bergen" and edited["version"] == 2
        assert edited["key"] == oslo["key"] and edited["status"] == "current" and edited["op"] == "update"
        by_user = {"session_id": "", "messages": [], "source": "user", "note": "edited by the user"}
        assert edited["provenance"] == by_user
        assert edited["importance"] == oslo["importance"] and edited["category"] == oslo["category"]
        now = [m["content"] for m in (await client.get("/v1/memory")).json()["memories"]]
        assert "The user lives in Bergen" in now and "The user lives in Oslo" not in now
        versions = [m for m in (await client.get("/v1/memory", params={"history": 1})).json()["memories"]
                    if m["key"] == oslo["key"]]  # fmt: skip
        assert [(m["version"], m["status"]) for m in versions] == [(1, "superseded"), (2, "current")]
        assert versions[0]["provenance"]["session_id"] == "s-old"
        # the agent's retrieval finds the new text
        found = await memory.search_memories("Bergen", 1)
        assert found and found[0][0].content == "The user lives in Bergen"
        # the superseded version cannot be edited: the current one is
        msg = _is_error(await client.put(f"/v1/memory/{oslo['id']}", json={"content": "x"}), 409)
        assert "superseded" in msg
        # forgetting the current version erases every version
        assert (await client.delete(f"/v1/memory/{edited['id']}")).json() == {"forgotten": 2}


async def test_the_same_text_again_writes_no_new_version(tmp_path: Path, memory: UserMemory) -> None:
    async with api(tmp_path, ScriptedModel(), memory=memory) as (_, client):
        tea = next(m for m in (await client.get("/v1/memory")).json()["memories"] if "tea" in m["content"])
        same = (await client.put(f"/v1/memory/{tea['id']}", json={"content": tea["content"]})).json()["memory"]
        assert same["id"] == tea["id"] and same["version"] == 1


async def test_an_edit_of_a_json_card_drops_the_value_the_old_text_restated(tmp_path: Path) -> None:
    from kairos.memory.records import MemoryIn

    mem = UserMemory.open(tmp_path / "mem", HashEmbedder(), None)
    try:
        card = MemoryIn("semantic", "json_card", "preference", "The user's favourite colour is blue",
                        {"path": "preference.colour.favourite", "value": "blue"})  # fmt: skip
        stored = mem.store.add(mem.user, card, mem.kb.embedder.embed_passages([card.content])[0])
        async with api(tmp_path, ScriptedModel(), memory=mem) as (_, client):
            resp = await client.put(f"/v1/memory/{stored.id}", json={"content": "The user's favourite colour is green"})
            assert resp.json()["memory"]["data"] == {"path": "preference.colour.favourite"}
    finally:
        mem.close()


async def test_bad_edits_are_refused(tmp_path: Path, memory: UserMemory) -> None:
    async with api(tmp_path, ScriptedModel(), memory=memory) as (_, client):
        some = (await client.get("/v1/memory")).json()["memories"][0]["id"]
        _is_error(await client.put("/v1/memory/999999", json={"content": "anything"}), 404)
        _is_error(await client.put(f"/v1/memory/{some}", json={"content": ""}), 422)
        _is_error(await client.put(f"/v1/memory/{some}", json={"content": "   "}), 400)
        _is_error(await client.put(f"/v1/memory/{some}", json={}), 422)
        _is_error(await client.put(f"/v1/memory/{some}", json={"content": "x" * 4001}), 422)
        _is_error(await client.put("/v1/memory/not-a-number", json={"content": "x"}), 422)
        assert len((await client.get("/v1/memory", params={"history": 1})).json()["memories"]) == 2  # nothing written
    async with api(tmp_path / "none", ScriptedModel()) as (_, client):
        off = await client.put("/v1/memory/1", json={"content": "x"})
        assert "[memory] enabled = false" in _is_error(off, 503) and off.json()["error"]["type"] == "not_enabled"
        for path in ("/v1/memory", "/v1/knowledge/documents", "/v1/knowledge/search?q=x"):
            assert (await client.get(path)).json()["error"]["type"] == "not_enabled"  # the UI says "not here"


async def test_documents_page_with_a_next_offset(tmp_path: Path) -> None:
    kb = KnowledgeBase.open(tmp_path / "kb", HashEmbedder())
    for i in range(3):
        (tmp_path / f"doc{i}.md").write_text(f"# Doc {i}\n\nParagraph number {i}.\n")
        kb.ingest([tmp_path / f"doc{i}.md"])
    try:
        async with api(tmp_path, ScriptedModel(), knowledge=kb) as (_, client):
            first = (await client.get("/v1/knowledge/documents", params={"limit": 2})).json()
            assert len(first["documents"]) == 2 and first["next_offset"] == 2
            assert first["embedder"] == HashEmbedder().name and first["chunks_without_vectors"] == 0
            rest = (await client.get("/v1/knowledge/documents", params={"limit": 2, "offset": 2})).json()
            assert len(rest["documents"]) == 1 and rest["next_offset"] is None
            seen = {d["source"] for d in first["documents"] + rest["documents"]}
            assert len(seen) == 3 and all(d["chunks"] >= 1 for d in first["documents"])
            _is_error(await client.get("/v1/knowledge/documents", params={"limit": 0}), 422)
            _is_error(await client.get("/v1/knowledge/documents", params={"offset": -1}), 422)
    finally:
        kb.close()


async def test_an_mcp_server_whose_listing_changed_says_which_tools(workspace: Path, tmp_path: Path) -> None:
    from kairos.mcp.client import McpServerSource
    from kairos.mcp.review import McpReview
    from kairos.security.review import ApprovalStore
    from tests.mcp.conftest import stdio_config

    review = McpReview(ApprovalStore(tmp_path / "approvals.json"))
    source = McpServerSource(stdio_config(timeout_s=20), workspace, review=review)
    try:
        await source.list_tools()
        async with api(tmp_path, ScriptedModel(), mcp=[source]) as (_, client):
            (fresh,) = (await client.get("/v1/mcp/servers")).json()["servers"]
            assert fresh["changes"] is None and fresh["diff"] == []  # never approved: nothing to compare with
            # what was approved before: echo said something else, boom was not there, "retired" was
            echo = next(t for t in source.listing if t.name == "echo")
            old = [t for t in source.listing if t.name not in ("echo", "boom")]
            old += [dataclasses.replace(echo, description="Echo."), dataclasses.replace(echo, name="retired")]
            review.approve(source.name, source.config.target, old)
            (server,) = (await client.get("/v1/mcp/servers")).json()["servers"]
            assert server["approval"] == "changed"
            assert server["changes"] == {"added": ["boom"], "removed": ["retired"], "changed": ["echo"]}
            assert any(line.startswith("-tool retired") for line in server["diff"])
            offered = {t["name"] for t in server["tools"] if t["offered"]}
            assert "echo" not in offered and "boom" not in offered and "big" in offered
            stale = await client.post("/v1/mcp/servers/bad/approve", params={"digest": "0" * 64})
            assert "changed its listing since it was shown" in _is_error(stale, 409)  # not what the user read
            assert (await client.get("/v1/mcp/servers")).json()["servers"][0]["approval"] == "changed"
            approved = (await client.post("/v1/mcp/servers/bad/approve", params={"digest": server["digest"]})).json()
            assert approved["approval"] == "approved" and all(t["offered"] for t in approved["tools"])
            assert approved["changes"] == {"added": [], "removed": [], "changed": []} and approved["diff"] == []
    finally:
        await source.aclose()
