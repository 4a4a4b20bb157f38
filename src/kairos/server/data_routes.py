"""What the agent knows and may use, for any client and the web UI: settings, memory, knowledge, MCP servers.

Read routes plus the user's own controls (edit or forget a memory, approve or revoke an MCP server's tools).
Each answers 503 when its part does not run in this server.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from kairos.server.middleware import ApiError
from kairos.server.state import state_of

if TYPE_CHECKING:
    from kairos.knowledge.base import KnowledgeBase
    from kairos.mcp.client import McpServerSource
    from kairos.memory import UserMemory

router = APIRouter()
NOT_ENABLED = "not_enabled"
"""The error type of a 503 for a part that does not run in this server (not a failure: nothing to retry)."""


@router.get("/v1/settings", tags=["server"])
async def settings(request: Request) -> dict[str, Any]:
    """The effective settings (read-only): values, where they came from, what was ignored and why."""
    return state_of(request).settings


def _memory(request: Request) -> UserMemory:
    memory = state_of(request).memory
    if memory is None:
        raise ApiError(503, "no user memory runs in this server ([memory] enabled = false)", NOT_ENABLED)
    return memory


@router.get("/v1/memory", tags=["memory"])
async def memories(request: Request, history: bool = False) -> dict[str, Any]:
    """The user's memories, most important first, with where each came from (``?history=1``: every version)."""
    memory = _memory(request)
    cards = await asyncio.to_thread(memory.history if history else memory.current)
    return {"memories": [dataclasses.asdict(c) for c in cards]}


@router.delete("/v1/memory/{memory_id}", tags=["memory"])
async def forget(request: Request, memory_id: int) -> dict[str, Any]:
    """Erase one memory, every version of it; 404 when there is none with that id."""
    from kairos.memory.records import MemoryStoreError

    try:
        forgotten = await asyncio.to_thread(_memory(request).forget, memory_id)
    except MemoryStoreError as e:
        if not str(e).startswith("no memory"):
            raise  # the store cannot be used: 503
        forgotten = 0
    if not forgotten:
        raise ApiError(404, f"no memory {memory_id}")
    return {"forgotten": forgotten}


class MemoryEdit(BaseModel):
    """The user's new text for a memory."""

    content: str = Field(min_length=1, max_length=4000, description="the memory's new text")


@router.put("/v1/memory/{memory_id}", tags=["memory"])
async def edit_memory(request: Request, memory_id: int, body: MemoryEdit) -> dict[str, Any]:
    """Correct a memory: a new version with the user's text (provenance "edited by the user"), history kept."""
    memory = _memory(request)
    if not body.content.strip():
        raise ApiError(400, "a memory needs some text (to remove one, forget it)")
    try:
        card = await asyncio.to_thread(memory.edit, memory_id, body.content)
    except LookupError as e:
        raise ApiError(404, str(e)) from None
    except ValueError as e:  # not the current version
        raise ApiError(409, str(e)) from None
    return {"memory": dataclasses.asdict(card)}


def _knowledge(request: Request) -> KnowledgeBase:
    kb = state_of(request).knowledge
    if kb is None:
        raise ApiError(
            503, "no knowledge base in this server (kairos kb add fills one; [knowledge] tools)", NOT_ENABLED
        )
    return kb


@router.get("/v1/knowledge/search", tags=["knowledge"])
async def knowledge_search(
    request: Request,
    q: Annotated[str, Query(min_length=1, max_length=2000)],
    k: Annotated[int, Query(ge=1, le=50)] = 5,
    mode: Annotated[Literal["hybrid", "bm25", "dense"], Query()] = "hybrid",
) -> dict[str, Any]:
    """The passages ``kb_search`` would give the agent, with the score and each retriever's rank."""
    from kairos.knowledge.store import Filters
    from kairos.knowledge.tools import PRIVATE_KINDS

    result = await _knowledge(request).asearch(q, k, mode, Filters(exclude_kinds=PRIVATE_KINDS))
    hits = [
        {"source": h.chunk.source, "version": h.chunk.version, "position": h.chunk.position, "text": h.chunk.text,
         "score": h.score, "bm25_rank": h.bm25_rank, "dense_rank": h.dense_rank,
         "context_rank": h.context_rank, "context": h.chunk.meta.get("context")}
        for h in result.hits
    ]  # fmt: skip
    return {"hits": hits, "conflicts": result.conflicts, "warning": result.warning}


@router.get("/v1/knowledge/documents", tags=["knowledge"])
async def knowledge_documents(
    request: Request, offset: int = Query(0, ge=0), limit: int = Query(50, ge=1, le=1000)
) -> dict[str, Any]:
    """The documents (current versions), and how many chunks of the base still wait for a vector."""
    from kairos.knowledge.store import Filters
    from kairos.knowledge.tools import PRIVATE_KINDS

    kb = _knowledge(request)
    docs = await asyncio.to_thread(kb.list_documents, Filters(exclude_kinds=PRIVATE_KINDS), offset, limit + 1)
    stats = await asyncio.to_thread(kb.stats)
    return {
        "documents": [dataclasses.asdict(d) for d in docs[:limit]],
        "next_offset": offset + limit if len(docs) > limit else None,
        "chunks_without_vectors": stats["chunks_without_vectors"],
        "embedder": stats["embedder"],
    }


def _mcp_record(source: McpServerSource) -> dict[str, Any]:
    from kairos.mcp.client import tool_name

    offered = {t.name for t in source.offered()}
    return {
        "name": source.name, "target": source.config.target, "state": source.state, "error": source.error,
        "digest": source.digest,
        "approval": source.review_status(), "summary": source.describe(),
        "tools": [{"name": t.name, "description": t.description, "read_only": t.read_only,
                   "offered": tool_name(source.name, t.name) in offered} for t in source.listing],
        "diff": source.review.diff(source.name, source.listing), "changes": _mcp_changes(source),
    }  # fmt: skip


def _mcp_changes(source: McpServerSource) -> dict[str, list[str]] | None:
    """The tools added, removed and changed since the approved listing (None when none is kept): the diff by tool."""
    approved = source.review.approved_listing(source.name)
    if approved is None:
        return None
    before = {t.name: t for t in approved}
    now = {t.name: t for t in source.listing}
    return {
        "added": sorted(now.keys() - before.keys()),
        "removed": sorted(before.keys() - now.keys()),
        "changed": sorted(n for n in now.keys() & before.keys() if now[n] != before[n]),
    }


def _mcp_source(request: Request, name: str) -> McpServerSource:
    found = next((s for s in state_of(request).mcp if s.name == name), None)
    if found is None:
        raise ApiError(404, f"no MCP server {name[:100]!r} in this server's [[mcp.servers]]")
    return found


@router.get("/v1/mcp/servers", tags=["mcp"])
async def mcp_servers(request: Request) -> dict[str, Any]:
    """The agent's MCP servers: state, listed tools (offered or withheld) and the change since the approval."""
    return {"servers": [_mcp_record(s) for s in state_of(request).mcp]}


@router.post("/v1/mcp/servers/{name}/approve", tags=["mcp"])
async def mcp_approve(
    request: Request, name: str, digest: Annotated[str | None, Query(max_length=128)] = None
) -> dict[str, Any]:
    """Approve the server's listing as it is now: its tools are offered from the next turn.

    ``digest`` (from ``GET``): approve only the listing the user read; 409 when the server listed anew since.
    """
    source = _mcp_source(request, name)
    if not source.listing:
        raise ApiError(409, f"MCP server {name!r} has listed no tools yet ({source.describe()})")
    if digest is not None and digest != source.digest:
        raise ApiError(409, f"MCP server {name!r} changed its listing since it was shown: read it again")
    source.review.approve(source.name, source.config.target, source.listing)
    return _mcp_record(source)


@router.post("/v1/mcp/servers/{name}/revoke", tags=["mcp"])
async def mcp_revoke(request: Request, name: str) -> dict[str, Any]:
    """Withdraw the approval: the server's tools are withheld from the next turn."""
    source = _mcp_source(request, name)
    source.review.revoke(source.name)
    return _mcp_record(source)


__all__ = ["router"]
