"""MCP (Model Context Protocol), both ways, on the official ``mcp`` SDK.

- Client: ``[[mcp.servers]]`` in ``kairos.toml`` (stdio ``command`` or Streamable HTTP ``url``)
  become tool sources (:class:`McpServerSource`, gathered by the plugin
  :class:`kairos.plugins.mcp.McpTools`); tools
  are named ``<server>__<tool>``, their output is external content, and a server's tools are
  offered only after the user approved its listing (:mod:`kairos.mcp.review`).
- Server: ``kairos mcp serve`` exposes registered toolsets (:mod:`kairos.tools.toolsets.registry`) to any
  MCP client (:mod:`kairos.server.mcp_serve`): with the HTTP server, a layer above.

Only the settings are imported eagerly (``kairos.config`` needs them); the rest on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kairos.mcp.config import McpConfig, McpServerConfig

if TYPE_CHECKING:
    from kairos.mcp.client import McpServerSource, tool_name
    from kairos.mcp.review import McpReview

_LAZY = {
    "McpServerSource": "kairos.mcp.client",
    "tool_name": "kairos.mcp.client",
    "McpReview": "kairos.mcp.review",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kairos.mcp' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["McpConfig", "McpReview", "McpServerConfig", "McpServerSource", "tool_name"]
