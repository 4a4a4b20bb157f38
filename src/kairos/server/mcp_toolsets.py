"""Named toolsets ``kairos mcp serve --toolset NAME`` can expose: a name and a factory of tools.

Built in (the toolsets of issue 10 §2 as MCP servers):

- ``files``: read_file, write_file (with its checkers), edit_file, list_dir, grep, confined to the workspace;
- ``execution``: bash and python, in the sandbox (bubblewrap; no network), plus the file tools;
- ``perception``: read_document, fetch_url, and web_search when ``[tools.web_search]`` is configured;
- ``notify``: notify over the ``[[notify.channels]]`` of the user config (none: the toolset is empty);
- ``clock``: current_time;
- ``catalog-<domain>`` (``catalog-finance``, ``catalog-maps``, …): the 126-tool demo catalog of
  :mod:`kairos.catalog` with deterministic local backends (loaded on first use: it is large).

``request_approval``/``request_input`` are not served: an MCP client asks its own user. A factory
gets the loaded configuration. Other modules register theirs::

    from kairos.server import mcp_toolsets as toolsets
    toolsets.register("mine", lambda config: [my_tool])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from kairos.tools.base import Tool

if TYPE_CHECKING:
    from kairos.config import KairosConfig

ToolsetFactory = Callable[["KairosConfig"], Sequence[Tool]]
_REGISTRY: dict[str, ToolsetFactory] = {}


def register(name: str, factory: ToolsetFactory, *, replace: bool = False) -> None:
    """Make ``factory`` available as the toolset ``name``.

    Raises:
        ValueError: ``name`` is taken (and ``replace`` is False).
    """
    if name in _REGISTRY and not replace:
        raise ValueError(f"a toolset named {name!r} is already registered")
    _REGISTRY[name] = factory


def names() -> list[str]:
    """Registered toolset names, sorted."""
    return sorted(_REGISTRY)


def tools(selected: Sequence[str], config: KairosConfig | None = None) -> list[Tool]:
    """The tools of the ``selected`` toolsets, in that order (a tool in two of them is listed once).

    ``config`` (default: the defaults) configures them, e.g. the web_search endpoint.

    Raises:
        KeyError: a name is not registered (the message lists those that are).
    """
    from kairos.config import KairosConfig

    cfg = config or KairosConfig()
    if any(n.startswith(CATALOG_PREFIX) and n not in _REGISTRY for n in selected):
        _register_catalog()
    out: dict[str, Tool] = {}
    for name in selected:
        factory = _REGISTRY.get(name)
        if factory is None:
            raise KeyError(f"no toolset named {name!r}; known: {', '.join(names()) or '(none)'}")
        for t in factory(cfg):
            out.setdefault(t.name, t)
    return list(out.values())


CATALOG_PREFIX = "catalog-"


def _register_catalog() -> None:
    from kairos.catalog import catalog_domains

    for domain in catalog_domains():
        register(f"{CATALOG_PREFIX}{domain.name}", partial(_catalog, domain.name), replace=True)


def _catalog(domain: str, config: KairosConfig) -> list[Tool]:
    from kairos.catalog import catalog_tools

    return catalog_tools(domain)


def _files(config: KairosConfig) -> list[Tool]:
    from kairos.tools.builtins import edit_file, grep, list_dir, read_file, write_file

    return [read_file, write_file, edit_file, list_dir, grep]


def _execution(config: KairosConfig) -> list[Tool]:
    from kairos.tools.builtins import bash, python

    return [bash, python, *_files(config)]


def _perception(config: KairosConfig) -> list[Tool]:
    from kairos.tools.toolsets import perception_tools

    return perception_tools(config.tools)


def _notify(config: KairosConfig) -> list[Tool]:
    from kairos.tools.toolsets import collaboration_tools

    return [t for t in collaboration_tools(config.notify) if t.name == "notify"]


def _clock(config: KairosConfig) -> list[Tool]:
    from kairos.tools.builtins import current_time

    return [current_time]


register("files", _files)
register("execution", _execution)
register("perception", _perception)
register("notify", _notify)
register("clock", _clock)

__all__ = ["ToolsetFactory", "names", "register", "tools"]
