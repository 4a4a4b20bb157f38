"""The public surface: what ``__all__`` promises exists, is ordered, and changes only on purpose.

Modelled on httpx's ``tests/test_exported_members.py``. ``kairos.__all__`` is pinned below: adding,
renaming or removing a top-level name must be a deliberate edit of ``EXPECTED_KAIROS_ALL``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import kairos

EXPECTED_KAIROS_ALL = {
    "Agent",
    "AgentEvent",
    "ExternalContent",
    "FinalAnswer",
    "FunctionTool",
    "HookFailed",
    "Interrupt",
    "Message",
    "Model",
    "ModelDeltaEvent",
    "ModelRequest",
    "ModelResponse",
    "Notice",
    "Origin",
    "Plugin",
    "ReasoningPolicy",
    "RequestStats",
    "RunContext",
    "RunError",
    "Runner",
    "SchemaTool",
    "Session",
    "SessionStore",
    "SystemPrompt",
    "TaskCompleted",
    "TimerFired",
    "Tool",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolContext",
    "ToolResult",
    "ToolSet",
    "ToolSource",
    "ToolSpec",
    "Usage",
    "UserInput",
    "tool",
}

PUBLIC_PACKAGES = [
    "kairos",
    "kairos.agent",
    "kairos.context.compression",
    "kairos.models",
    "kairos.plugins.compression",
    "kairos.plugins.defences",
    "kairos.plugins.status_bar",
    "kairos.plugins.subagents",
    "kairos.plugins.todo",
    "kairos.security",
    "kairos.testing",
    "kairos.tools",
    "kairos.tools.builtins",
]
"""Modules whose ``__all__`` is the API callers import from; each must declare one."""


def _modules_with_all() -> list[str]:
    """Every kairos module that declares ``__all__`` (importing them all is part of the check)."""
    names = ["kairos", *(m.name for m in pkgutil.walk_packages(kairos.__path__, "kairos."))]
    return [name for name in names if hasattr(importlib.import_module(name), "__all__")]


MODULES_WITH_ALL = _modules_with_all()


def _isort_key(name: str) -> tuple[int, list[str | int]]:
    """The order ruff's RUF022 keeps: CONSTANTS, then Classes, then everything else, each natural."""
    if name.upper() == name and any(c.isalpha() for c in name):
        group = 0
    elif name[:1].isupper():
        group = 1
    else:
        group = 2
    natural = [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
    return group, natural


def _all(module: str) -> list[str]:
    exported = importlib.import_module(module).__all__
    assert isinstance(exported, list | tuple), f"{module}.__all__ is a {type(exported).__name__}"
    assert all(isinstance(n, str) for n in exported), f"{module}.__all__ holds a non-string"
    return list(exported)


def test_kairos_all_is_the_pinned_public_api() -> None:
    assert set(kairos.__all__) == EXPECTED_KAIROS_ALL, (
        "the top-level API changed: if that is intended, update EXPECTED_KAIROS_ALL "
        f"(added {sorted(set(kairos.__all__) - EXPECTED_KAIROS_ALL)}, "
        f"removed {sorted(EXPECTED_KAIROS_ALL - set(kairos.__all__))})"
    )


@pytest.mark.parametrize("module", PUBLIC_PACKAGES)
def test_public_package_declares_all(module: str) -> None:
    assert _all(module), f"{module} exports nothing"


def test_every_public_package_is_checked() -> None:
    assert set(PUBLIC_PACKAGES) <= set(MODULES_WITH_ALL)


@pytest.mark.parametrize("module", MODULES_WITH_ALL)
def test_all_has_no_duplicates(module: str) -> None:
    names = _all(module)
    assert len(names) == len(set(names)), (
        f"duplicates in {module}.__all__: {sorted({n for n in names if names.count(n) > 1})}"
    )


@pytest.mark.parametrize("module", MODULES_WITH_ALL)
def test_all_is_sorted(module: str) -> None:
    names = _all(module)
    assert names == sorted(names, key=_isort_key), f"{module}.__all__ is not sorted (ruff check --select RUF022 --fix)"


@pytest.mark.parametrize("module", MODULES_WITH_ALL)
def test_every_exported_name_exists_and_star_import_works(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [n for n in _all(module) if not hasattr(mod, n)]
    assert not missing, f"{module}.__all__ names what it does not define: {missing}"
    namespace: dict[str, object] = {}
    exec(f"from {module} import *", namespace)
    assert set(_all(module)) <= set(namespace)


@pytest.mark.parametrize("module", MODULES_WITH_ALL)
def test_exported_classes_and_functions_are_kairos_own(module: str) -> None:
    """A third-party class re-exported by accident would become part of our API."""
    mod: ModuleType = importlib.import_module(module)
    foreign = [
        n
        for n in _all(module)
        if (inspect.isclass(obj := getattr(mod, n)) or inspect.isfunction(obj))
        and not obj.__module__.startswith("kairos.")
    ]
    assert not foreign, f"{module}.__all__ exports objects defined outside kairos: {foreign}"


def test_isort_key_orders_like_ruff() -> None:
    assert sorted(["tool", "Agent", "STAGES", "Plugin", "part10", "part2", "MAX_2"], key=_isort_key) == [
        "MAX_2",
        "STAGES",
        "Agent",
        "Plugin",
        "part2",
        "part10",
        "tool",
    ]
