"""A catalog of 120+ realistic tools in 15 domains, with local deterministic backends (issue 10 §4).

For tool discovery, its benchmark and demos: each domain is one "server" (an MCP toolset once
registered), each tool checks its arguments with JSON Schema and returns seeded fake data (the
same arguments, the same result; no network, no disk).

- :func:`catalog_domains`: the domains with their descriptions and tool definitions;
- :func:`catalog_tools`: every tool (or one domain's) as kairos :class:`~kairos.tools.base.Tool` objects;
- :func:`catalog_toolsets`: ``{domain: factory}`` for an MCP toolset registry.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from kairos.catalog._data_a import DOMAINS_A
from kairos.catalog._data_b import DOMAINS_B
from kairos.catalog._data_c import DOMAINS_C
from kairos.catalog._spec import Domain, ToolDef, build_tool, make_result, parse_params
from kairos.tools.base import Tool

_DOMAINS: tuple[Domain, ...] = (*DOMAINS_A, *DOMAINS_B, *DOMAINS_C)


def catalog_domains() -> tuple[Domain, ...]:
    """The catalog's domains, in a fixed order."""
    return _DOMAINS


def domain_of(tool_name: str) -> str | None:
    """The domain a catalog tool belongs to, or None for a name not in the catalog."""
    for d in _DOMAINS:
        if any(t.name == tool_name for t in d.tools):
            return d.name
    return None


def catalog_tools(domain: str | None = None) -> list[Tool]:
    """Every catalog tool (or only ``domain``'s), fresh objects each call.

    Raises:
        KeyError: ``domain`` is not a catalog domain.
    """
    if domain is not None and domain not in {d.name for d in _DOMAINS}:
        raise KeyError(f"no catalog domain {domain!r}; domains: {', '.join(d.name for d in _DOMAINS)}")
    return [build_tool(t) for d in _DOMAINS if domain in (None, d.name) for t in d.tools]


def catalog_toolsets() -> dict[str, Callable[[], list[Tool]]]:
    """One toolset factory per domain, named ``catalog-<domain>`` (for ``kairos mcp serve --toolset``)."""
    return {f"catalog-{d.name}": partial(catalog_tools, d.name) for d in _DOMAINS}


__all__ = [
    "Domain",
    "ToolDef",
    "build_tool",
    "catalog_domains",
    "catalog_tools",
    "catalog_toolsets",
    "domain_of",
    "make_result",
    "parse_params",
]
