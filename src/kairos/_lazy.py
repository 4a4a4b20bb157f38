"""Packages whose public names are imported on first use (PEP 562).

A package's ``__init__`` that imports all it exports makes every ``import kairos.x.y`` below it pay
for the whole package: ``kairos --help`` took seconds because ``import kairos.cli`` loaded the agent,
the models, the HTTP server and MCP. A package lists where each name lives instead and gets a
module ``__getattr__`` that imports it when it is first asked for; type checkers read the same
names from an ``if TYPE_CHECKING:`` import block beside the list.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, where: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, which exports each name of ``where`` from its module.

    Args:
        package: the package's ``__name__``.
        where: ``{module: "Name other_name ..."}``, the names each module provides.
    """
    modules = {name: module for module, names in where.items() for name in names.split()}

    def get(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next access is a plain lookup
        return value

    def names() -> list[str]:
        return sorted({*vars(sys.modules[package]), *modules})

    return get, names
