"""The one registry of named toolsets.

``[tools] toolsets``, ``[runtime] toolsets`` and ``kairos mcp serve --toolset`` choose from it.

A :class:`Toolset` is a name, a factory of tools and where its tools can work:

- ``files``: read_file, write_file (with its checkers), edit_file, list_dir, grep, confined to the workspace;
- ``execution``: bash and python, in the sandbox (bubblewrap; no network), plus the file tools;
- ``perception``: read_document, fetch_url, and web_search when ``[tools.web_search]`` is configured;
- ``collaboration``: request_approval, request_input and notify; ``notify`` alone as its own toolset;
- ``clock``: current_time;
- ``browser``: open_url, click, type_text, select_option, press_key, go_back, wait, look_at_page, scroll
  and confirm_click on a Chromium per session (:mod:`kairos.browser`, ``[browser]``);
- ``catalog-<domain>`` (``catalog-finance``, ``catalog-maps``, …): the 126-tool demo catalog of
  :mod:`kairos.catalog` with deterministic local backends (registered on first use: it is large);
- ``tasks``, ``timers``, ``watch``, ``outbox``, ``calendar``, ``mail``: the runtime's integrations. Their tools
  need a running :class:`~kairos.runtime.Runtime` (``kairos chat``, ``serve``, ``worker``), so ``kairos mcp
  serve`` does not offer them. In a deployment of several workers the timers, watch and mail components run
  on the leader only (:attr:`Toolset.leader_owned`; see :mod:`kairos.runtime.leader`).

Factories are named ``"module:function"`` and imported when a toolset is first used, so this module
(in the tools layer) imports none of the layers above it and ``import kairos`` loads no toolset.
Other code registers its own::

    from kairos.tools.toolsets import registry
    registry.register(Toolset("mine", lambda config: [my_tool], "my tools"))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from kairos.tools.base import Tool

ToolsetFactory = Callable[[Any], Sequence[Tool]]
"""Tools from the loaded :class:`~kairos.config.KairosConfig` (``Any`` here: config is a layer above)."""

CATALOG_PREFIX = "catalog-"
_NEEDS_RUNTIME = "its tools need the kairos runtime (kairos chat, serve or worker)"
RUNTIME_ORDER = ("tasks", "timers", "watch", "outbox", "calendar", "mail")
"""The runtime's toolsets in the order their tools are listed (part of the cached prompt prefix)."""


@dataclass(frozen=True, slots=True)
class Toolset:
    """A named set of tools and where its tools can work."""

    name: str
    factory: ToolsetFactory | str
    """A function of the config, or ``"module:function"`` imported on first use."""
    doc: str
    runtime: bool = False
    """Its tools need a running Runtime (they find its components through the tool context)."""
    not_served: str = ""
    """Why ``kairos mcp serve`` does not offer it (empty: it does; a runtime toolset never is)."""

    @property
    def why_not_served(self) -> str:
        """Why ``kairos mcp serve`` does not offer it, or ``""``."""
        return self.not_served or (_NEEDS_RUNTIME if self.runtime else "")

    leader_owned: bool = False
    """In a deployment, the component behind it runs on the leader only (one timer wheel, one mail poller)."""

    def tools(self, config: Any) -> list[Tool]:
        """The toolset's tools under ``config``."""
        factory = self.factory
        if isinstance(factory, str):
            module, _, attr = factory.partition(":")
            factory = getattr(importlib.import_module(module), attr)
        return list(factory(config))


_REGISTRY: dict[str, Toolset] = {}


def register(toolset: Toolset, *, replace: bool = False) -> None:
    """Make ``toolset`` available by its name.

    Raises:
        ValueError: the name is taken (and ``replace`` is False).
    """
    if toolset.name in _REGISTRY and not replace:
        raise ValueError(f"a toolset named {toolset.name!r} is already registered")
    _REGISTRY[toolset.name] = toolset


def names(*, runtime: bool | None = None, served: bool = False) -> list[str]:
    """Registered toolset names, sorted.

    ``runtime``: only those that need (or do not need) a Runtime; ``served``: only those ``kairos mcp serve`` offers.
    """
    return sorted(
        n
        for n, t in _REGISTRY.items()
        if (runtime is None or t.runtime == runtime) and not (served and t.why_not_served)
    )


def get(name: str, *, served: bool = False) -> Toolset:
    """The toolset ``name`` (``served``: only one ``kairos mcp serve`` offers).

    Raises:
        KeyError: no such toolset, or one not served where ``served`` is True (the message says why and
            lists those that can be used).
    """
    if name.startswith(CATALOG_PREFIX) and name not in _REGISTRY:
        _register_catalog()
    found = _REGISTRY.get(name)
    usable = ", ".join(names(served=served)) or "(none)"
    if found is None:
        raise KeyError(f"no toolset named {name!r}; known: {usable}")
    if served and found.why_not_served:
        raise KeyError(f"toolset {name!r} is not served over MCP: {found.why_not_served}; served: {usable}")
    return found


def tools(selected: Iterable[str], config: Any = None, *, served: bool = False) -> list[Tool]:
    """The tools of the ``selected`` toolsets, in that order (a tool in two of them is listed once).

    ``config`` (default: the defaults) configures them, e.g. the web_search endpoint. ``served=True``
    (``kairos mcp serve``) refuses the toolsets it does not offer.

    Raises:
        KeyError: a name is not registered, or names a toolset not served where ``served`` is True.
    """
    chosen = [get(name, served=served) for name in selected]
    if config is None:
        config = importlib.import_module("kairos.config").KairosConfig()  # the defaults (a layer above)
    out: dict[str, Tool] = {}
    for toolset in chosen:
        for t in toolset.tools(config):
            out.setdefault(t.name, t)
    return list(out.values())


def _register_catalog() -> None:
    for domain in importlib.import_module("kairos.catalog").catalog_domains():
        tools_of = partial(_catalog, domain.name)
        register(
            Toolset(f"{CATALOG_PREFIX}{domain.name}", tools_of, f"the demo catalog's {domain.name} tools"), replace=True
        )


def _catalog(domain: str, config: Any) -> list[Tool]:
    return list(importlib.import_module("kairos.catalog").catalog_tools(domain))


def _files(config: Any) -> list[Tool]:
    from kairos.tools.builtins import edit_file, grep, list_dir, read_file, write_file

    return [read_file, write_file, edit_file, list_dir, grep]


def _execution(config: Any) -> list[Tool]:
    from kairos.tools.builtins import bash, python

    return [bash, python, *_files(config)]


def _perception(config: Any) -> list[Tool]:
    from kairos.tools.toolsets.perception import perception_tools

    return perception_tools(config.tools)


def _collaboration(config: Any) -> list[Tool]:
    from kairos.tools.toolsets.collaboration import collaboration_tools

    return collaboration_tools(config.notify)


def _notify(config: Any) -> list[Tool]:
    return [t for t in _collaboration(config) if t.name == "notify"]


def _clock(config: Any) -> list[Tool]:
    from kairos.tools.builtins import current_time

    return [current_time]


def _runtime(module: str) -> ToolsetFactory:
    """The tools of a runtime integration (their settings live in the component the runtime starts)."""
    return lambda config: importlib.import_module(f"kairos.runtime.integrations.{module}").tools()


for _toolset in (
    Toolset("files", _files, "read, write and edit files in the workspace"),
    Toolset("execution", _execution, "bash and python in the sandbox, plus the file tools"),
    Toolset("perception", _perception, "read_document, fetch_url, web_search"),
    Toolset(
        "collaboration",
        _collaboration,
        "request_approval, request_input, notify",
        not_served="it asks a person, and an MCP client asks its own user (the notify toolset is served)",
    ),
    Toolset("notify", _notify, "notify over the configured channels"),
    Toolset("clock", _clock, "current_time"),
    Toolset(
        "browser",
        "kairos.browser.tools:toolset_tools",
        "a Chromium the agent drives by numbered elements ([browser])",
        not_served="its browser belongs to one agent session (kairos run --browser, chat, serve)",
    ),
    Toolset("tasks", _runtime("tasks"), "async commands and sub-agents", runtime=True),
    Toolset(
        "timers",
        _runtime("timers"),
        "timers that wake the agent",
        runtime=True,
        leader_owned=True,
        not_served=_NEEDS_RUNTIME,
    ),
    Toolset(
        "watch",
        _runtime("watch"),
        "file watches that wake the agent",
        runtime=True,
        leader_owned=True,
        not_served=_NEEDS_RUNTIME,
    ),
    Toolset("outbox", _runtime("outbox"), "messages and questions to the user", runtime=True),
    Toolset("calendar", _runtime("calendar"), "the calendar of invitations", runtime=True),
    Toolset(
        "mail",
        _runtime("mail"),
        "read and answer mail (IMAP/SMTP)",
        runtime=True,
        leader_owned=True,
        not_served=_NEEDS_RUNTIME,
    ),
):
    register(_toolset)

__all__ = ["CATALOG_PREFIX", "RUNTIME_ORDER", "Toolset", "ToolsetFactory", "get", "names", "register", "tools"]
