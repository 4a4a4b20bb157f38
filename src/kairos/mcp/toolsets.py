"""Named toolsets ``kairos mcp serve --toolset NAME`` can expose: a name and a factory of tools.

Built in: ``files`` (read_file, write_file, edit_file, list_dir, grep: confined to the workspace)
and ``clock`` (current_time). Other modules register theirs::

    from kairos.mcp import toolsets
    toolsets.register("perception", lambda: [read_document, fetch_url])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kairos.tools.base import Tool

ToolsetFactory = Callable[[], Sequence[Tool]]
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


def tools(selected: Sequence[str]) -> list[Tool]:
    """The tools of the ``selected`` toolsets, in that order (a tool in two of them is listed once).

    Raises:
        KeyError: a name is not registered (the message lists those that are).
    """
    out: dict[str, Tool] = {}
    for name in selected:
        factory = _REGISTRY.get(name)
        if factory is None:
            raise KeyError(f"no toolset named {name!r}; known: {', '.join(names()) or '(none)'}")
        for t in factory():
            out.setdefault(t.name, t)
    return list(out.values())


def _files() -> list[Tool]:
    from kairos.tools.builtins import edit_file, grep, list_dir, read_file, write_file

    return [read_file, write_file, edit_file, list_dir, grep]


def _clock() -> list[Tool]:
    from kairos.tools.builtins import current_time

    return [current_time]


register("files", _files)
register("clock", _clock)

__all__ = ["ToolsetFactory", "names", "register", "tools"]
