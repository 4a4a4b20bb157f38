"""``discover_tools``: the model names a capability it lacks; matching tools are loaded and stay.

The found tools' full schemas come back in the tool result (the end of the context, where they
then stay: book ch4 §3.29) and the tools join :class:`DiscoveredTools`, a tool source whose list
only grows, so the session's tool list gains them at the end and never reorders.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kairos.tools.base import Tool, ToolContext, ToolResult
from kairos.tools.discovery.index import Search, ToolIndex
from kairos.tools.schema import SchemaTool

DISCOVER_TOOLS = "discover_tools"
MAX_NEED_CHARS = 400
DESCRIPTION = (
    "Find and load tools you do not have yet. Use it when no tool in your list fits the task: describe the "
    "capability you need in plain words, e.g. 'get the current price of a stock' or 'book a hotel room'. "
    "Returns 3-5 candidate tools with their full parameter schemas; they are added to your tools, so call the "
    "right one by name next. Answers status 'not_found' when nothing fits well: then rephrase the need or do "
    "without. It cannot run the tools itself and does not search the web."
)


class DiscoveredTools:
    """The tools discovery loaded, as a :class:`~kairos.tools.base.ToolSource` whose list only grows."""

    refresh_mid_turn = True
    """Found tools are callable in the same turn (the runner takes them up between model calls)."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def fingerprint(self) -> str:
        """Changes whenever a tool is added."""
        return "discovered:" + ",".join(self._tools)

    async def list_tools(self) -> Sequence[Tool]:
        """The loaded tools, oldest first."""
        return tuple(self._tools.values())

    def add(self, tools: Iterable[Tool]) -> list[str]:
        """Load ``tools``; returns the names that were not loaded before."""
        new = []
        for t in tools:
            if t.name not in self._tools:
                self._tools[t.name] = t
                new.append(t.name)
        return new

    def names(self) -> list[str]:
        """Loaded tool names, oldest first."""
        return list(self._tools)


class LazyIndex:
    """Builds a :class:`ToolIndex` on first use, in a worker thread (embedding the catalog takes seconds)."""

    def __init__(self, build: Callable[[], ToolIndex]) -> None:
        self._build = build
        self._index: ToolIndex | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> ToolIndex:
        """The index, built once."""
        async with self._lock:
            if self._index is None:
                self._index = await asyncio.to_thread(self._build)
            return self._index


def render_search(search: Search, new: Sequence[str]) -> dict[str, Any]:
    """The result the model reads: candidates with full schemas, or an explicit not-found."""
    if not search.found:
        return {
            "status": "not_found",
            "need": search.need,
            "message": (
                "No tool in the catalog fits this need well enough "
                f"(best similarity {search.best_similarity:.3f}). Rephrase the need with other words "
                "(what the tool should do, not the task), or do without."
            ),
        }
    return {
        "status": "found",
        "need": search.need,
        "loaded": list(new),
        "message": "These tools are now in your tool list. Call the one that fits by its name with its parameters.",
        "candidates": [
            {
                "name": h.tool.name,
                "server": h.server,
                "description": h.tool.spec.description,
                "parameters": h.tool.spec.parameters,
            }
            for h in search.hits
        ],
    }


def discover_tools_tool(index: LazyIndex, loaded: DiscoveredTools, *, limit: int = 5) -> SchemaTool:
    """The ``discover_tools`` tool over ``index``, loading what it finds into ``loaded``."""
    limit = max(3, min(limit, 5))

    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        need = str(arguments["need"]).strip()
        if not need:
            return ToolResult(
                "discover_tools needs a non-empty 'need': describe the capability in words.", is_error=True
            )
        search = (await index.get()).search(need, limit)
        new = loaded.add(h.tool for h in search.hits)
        out = render_search(search, new)
        meta = {"discovery": {"found": search.found, "loaded": new, "servers": list(search.servers)}}
        return ToolResult(json.dumps(out, ensure_ascii=False), metadata=meta)

    return SchemaTool(
        name=DISCOVER_TOOLS,
        description=DESCRIPTION,
        parameters={
            "type": "object",
            "properties": {
                "need": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_NEED_CHARS,
                    "description": "The capability you need, in plain words, e.g. 'weather forecast for a city'",
                }
            },
            "required": ["need"],
            "additionalProperties": False,
        },
        handler=handler,
        timeout_s=120.0,  # the first call embeds the catalog unless it is cached
        read_only=True,
    )


def loaded_in(messages: Iterable[Any]) -> list[str]:
    """Tool names earlier ``discover_tools`` results loaded (to restore them when a session resumes)."""
    names: list[str] = []
    for m in messages:
        if getattr(m, "role", None) != "tool" or getattr(m, "name", None) != DISCOVER_TOOLS:
            continue
        data = result_json(m.content)
        if isinstance(data, dict) and data.get("status") == "found":
            names += [c["name"] for c in data.get("candidates", []) if isinstance(c, dict) and "name" in c]
    return list(dict.fromkeys(names))


def result_json(content: str) -> Any:
    """The JSON object in a ``discover_tools`` result, past any prefix a plugin added (a timestamp); None if none."""
    start = content.find("{") if isinstance(content, str) else -1
    if start < 0:
        return None
    try:
        data, _ = json.JSONDecoder().raw_decode(content, start)
    except ValueError:
        return None
    return data
