"""Context twins: the contextualised copy of a document searched beside it (kairos.knowledge.twins)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from kairos.knowledge import HashEmbedder, KnowledgeBase, Turn
from kairos.knowledge.base import fuse
from kairos.knowledge.contextual import ContextWriter, add_conversation
from kairos.knowledge.records import ChunkHit
from kairos.knowledge.store import Filters
from kairos.knowledge.tools import knowledge_tools
from kairos.models.types import ModelRequest, ModelResponse
from kairos.testing import ScriptedModel, reply
from kairos.tools.base import ToolContext

MAY = 1_683_500_000.0
TURNS = [
    Turn("Ann", "We finally got him home!", "D1:1", MAY, "8 May, 2023"),
    Turn("Bo", "Congrats, what breed is he?", "D1:2", MAY, "8 May, 2023"),
    Turn("Ann", "He sleeps on the sofa all day.", "D1:3", MAY, "8 May, 2023"),
]


def greyhound(request: ModelRequest) -> ModelResponse:
    """A context naming what the turn is about, in words the turn itself does not have."""
    part = request.messages[1].content
    return reply("Ann adopted a greyhound puppy." if "home" in part else "Small talk about a new pet.")


def add(kb: KnowledgeBase, source: str = "conv", owner: str | None = None, turns: list[Turn] = TURNS) -> Any:
    writer = ContextWriter(ScriptedModel([greyhound] * len(turns)))
    return asyncio.run(add_conversation(kb, writer, source, turns, owner=owner))


def turns(hits: Any) -> list[str]:
    return [h.chunk.meta["turn_id"] for h in hits]


def hit(chunk_id: int, score: float, position: int = 0) -> ChunkHit:
    return ChunkHit(chunk_id, 1, "doc", 1, position, f"text {chunk_id}", score, {})


def test_each_retriever_weight_is_split_between_plain_and_contextual_lists() -> None:
    plain_bm25, plain_dense = [hit(1, 9.0), hit(2, 1.0)], [hit(2, 0.9), hit(1, 0.1)]
    alone = fuse(plain_bm25, plain_dense)
    assert [(h.chunk.chunk_id, round(h.score, 3)) for h in alone] == [(1, 0.6), (2, 0.4)]
    # chunk 3 only the contextual lists found: it joins, and chunk 2 (second in both contextual lists) overtakes 1
    ctx_bm25, ctx_dense = [hit(3, 5.0), hit(2, 4.0), hit(1, 1.0)], [hit(3, 0.8), hit(2, 0.7), hit(1, 0.2)]
    four = fuse(plain_bm25, plain_dense, contextual=(ctx_bm25, ctx_dense))
    scores = {h.chunk.chunk_id: round(h.score, 3) for h in four}
    assert scores == {1: 0.3, 2: 0.592, 3: 0.5}  # 2: 0.2 + 0.3 * 0.75 + 0.2 * 5/6
    by_id = {h.chunk.chunk_id: h for h in four}
    assert (by_id[3].bm25_rank, by_id[3].dense_rank, by_id[3].context_rank) == (None, None, 1)
    assert (by_id[1].bm25_rank, by_id[1].context_rank) == (1, 3)


def test_hybrid_finds_a_turn_by_its_context_and_returns_it_as_said(kb: KnowledgeBase) -> None:
    assert add(kb).status == "added"
    found = kb.search("a greyhound puppy", k=3).hits
    top = found[0]
    assert top.chunk.meta["turn_id"] == "D1:1" and top.chunk.text == "[8 May, 2023] Ann: We finally got him home!"
    assert top.chunk.meta["context"] == "Ann adopted a greyhound puppy." and top.context_rank == 1
    # without its twin the document is searched as it is
    kb.remove("conv#contexts")
    assert kb.store.find_current("conv") is not None
    assert all("context" not in h.chunk.meta for h in kb.search("greyhound", k=3).hits)


def test_a_twin_shows_nothing_its_document_would_not(kb: KnowledgeBase, tmp_path: Path) -> None:
    add(kb, "chat", owner="ann")  # a user's past conversation: private to the agent's kb tools
    kb.add_text("pets.md", "Greyhounds are gentle sighthounds that love the sofa.", owner="bo")
    assert turns(kb.search("greyhound", k=5, filters=Filters(owner="ann")).hits)[0] == "D1:1"
    # another owner's search, and the kb tools (which leave conversations out), never reach the twin's turns
    assert {h.chunk.source for h in kb.search("greyhound puppy", k=5, filters=Filters(owner="bo")).hits} == {"pets.md"}
    tools = {t.name: t for t in knowledge_tools(kb)}

    def call(name: str, **args: Any) -> Any:
        result = asyncio.run(tools[name].call(args, ToolContext(tmp_path)))
        return result.is_error, json.loads(result.content) if not result.is_error else result.content

    _, found = call("kb_search", query="greyhound puppy adopted")
    assert {r["source"] for r in found["results"]} == {"pets.md"}
    _, listed = call("kb_list")
    assert [d["source"] for d in listed["documents"]] == ["pets.md"]
    is_error, message = call("kb_get_document", source="chat#contexts")
    assert is_error and "no document" in message
    assert [d.source for d in kb.list_documents(Filters(kind="context"))] == ["chat#contexts"]  # when asked by kind
    assert (kb.stats()["documents"], kb.stats()["context_twins"]) == (3, 1)  # stats say what the third one is


def test_a_changed_document_without_contexts_leaves_its_old_twin_behind(kb: KnowledgeBase) -> None:
    add(kb)
    changed = [*TURNS[:2], Turn("Ann", "He chewed the remote.", "D1:3", MAY, "8 May, 2023")]
    assert kb.add_conversation("conv", changed).status == "updated"
    # the twin names version 1: current-version searches drop it, searches of every version still use it
    assert all("context" not in h.chunk.meta for h in kb.search("greyhound remote", k=3).hits)
    old = kb.search("greyhound", k=1, filters=Filters(all_versions=True)).hits[0].chunk
    assert old.version == 1 and old.meta["context"] == "Ann adopted a greyhound puppy."
    # re-adding with contexts: the same text, a new twin for its version
    assert add(kb, turns=changed).status == "updated"
    top = kb.search("greyhound", k=1).hits[0].chunk
    assert (top.version, top.meta["context"]) == (2, "Ann adopted a greyhound puppy.")


def test_removing_a_document_removes_its_twin(kb: KnowledgeBase) -> None:
    add(kb)
    assert kb.remove("conv") == 1
    assert kb.store.find_current("conv#contexts") is None and kb.search("greyhound", k=3).hits == []
    assert kb.store.check()["orphan_chunks"] == 0


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_every_mode_works_with_twins_on_another_embedder(tmp_path: Path, mode: str) -> None:
    kb = KnowledgeBase.open(tmp_path / "s", HashEmbedder(dim=64))
    try:
        add(kb)
        hits = kb.search("greyhound puppy", k=3, mode=mode).hits  # type: ignore[arg-type]
        assert hits and all(h.chunk.source == "conv" and not h.chunk.text.startswith("Context:") for h in hits)
    finally:
        kb.close()
