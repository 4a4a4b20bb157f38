from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kairos.knowledge import ChunkSpec, KnowledgeBase
from kairos.knowledge.tools import MAX_CHUNK_CHARS, knowledge_tools
from kairos.tools.base import Tool, ToolContext, ToolResult


@pytest.fixture
def tools(kb: KnowledgeBase) -> dict[str, Tool]:
    return {t.name: t for t in knowledge_tools(kb)}


async def call(t: Tool, tmp_path: Path, **args: Any) -> ToolResult:
    t.validate(args)
    return await t.call(args, ToolContext(tmp_path))


def test_the_tools_are_read_only_external_and_documented(tools: dict[str, Tool]) -> None:
    assert set(tools) == {"kb_search", "kb_get_document", "kb_list"}
    for t in tools.values():
        assert t.read_only and t.external
        assert "Example" in t.spec.description and "cannot" in t.spec.description


async def test_kb_search_returns_structured_results_and_conflicts(
    kb: KnowledgeBase, tools: dict[str, Tool], tmp_path: Path
) -> None:
    kb.add_text("/docs/vpn.md", "# VPN\n\nConnect with the corporate VPN client before opening the wiki.")
    kb.add_text("/other/cake.md", "Chocolate cake recipe")
    r = await call(tools["kb_search"], tmp_path, query="VPN client", k=2)
    data = json.loads(r.content)
    assert not r.is_error and data["results"][0]["source"] == "/docs/vpn.md"
    assert {"version", "position", "score", "text"} <= set(data["results"][0])
    only = json.loads((await call(tools["kb_search"], tmp_path, query="recipe VPN", source_prefix="/other/")).content)
    assert [h["source"] for h in only["results"]] == ["/other/cake.md"]
    clipped = json.loads((await call(tools["kb_search"], tmp_path, query="VPN", k=99)).content)
    assert "outside 1-20" in clipped["note"]
    none = json.loads((await call(tools["kb_search"], tmp_path, query="zzzqqq", mode="bm25")).content)
    assert none["results"] == [] and "kb_list" in none["note"]
    assert (await call(tools["kb_search"], tmp_path, query="  ")).is_error


async def test_long_chunks_are_cut_visibly(kb: KnowledgeBase, tools: dict[str, Tool], tmp_path: Path) -> None:
    kb.chunking = ChunkSpec("fixed", 1024, 0.15)
    kb.add_text("long.txt", "needle " + "lorem ipsum " * 300)  # one chunk of 3,600 characters
    hit = json.loads((await call(tools["kb_search"], tmp_path, query="needle", mode="bm25")).content)["results"][0]
    assert len(hit["text"]) == MAX_CHUNK_CHARS and "more characters not shown" in hit["truncated"]


async def test_kb_get_document_pages_and_reads_old_versions(
    kb: KnowledgeBase, tools: dict[str, Tool], tmp_path: Path
) -> None:
    text = "\n\n".join(f"# Part {i}\n\nBody of part {i}." for i in range(7))
    kb.add_text("book.md", text)
    kb.add_text("book.md", text + "\n\n# Part 7\n\nAn appendix.")
    page = json.loads((await call(tools["kb_get_document"], tmp_path, source="book.md", limit=3)).content)
    assert page["version"] == 2 and page["chunks_total"] == 8 and page["next_offset"] == 3
    assert [c["position"] for c in page["chunks"]] == [0, 1, 2]
    last = json.loads((await call(tools["kb_get_document"], tmp_path, source="book.md", offset=6)).content)
    assert "next_offset" not in last and len(last["chunks"]) == 2
    old = json.loads((await call(tools["kb_get_document"], tmp_path, source="book.md", version=1)).content)
    assert old["version"] == 1 and old["current"] is False and old["chunks_total"] == 7
    missing = await call(tools["kb_get_document"], tmp_path, source="nope.md")
    assert missing.is_error and "kb_list" in missing.content


async def test_kb_list_pages(kb: KnowledgeBase, tools: dict[str, Tool], tmp_path: Path) -> None:
    for i in range(5):
        kb.add_text(f"/n/{i}.txt", f"note {i}")
    first = json.loads((await call(tools["kb_list"], tmp_path, limit=2)).content)
    assert len(first["documents"]) == 2 and first["next_offset"] == 2
    rest = json.loads((await call(tools["kb_list"], tmp_path, offset=4, limit=2)).content)
    assert len(rest["documents"]) == 1 and "next_offset" not in rest
    assert json.loads((await call(tools["kb_list"], tmp_path, source_prefix="/x/")).content)["documents"] == []
