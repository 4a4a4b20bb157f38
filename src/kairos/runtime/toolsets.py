"""The runtime's tools by toolset, for an agent that runs under a :class:`~kairos.runtime.Runtime`.

The toolsets are entries of the one registry (:mod:`kairos.tools.toolsets.registry`); this picks the
runtime's. Each toolset costs prompt tokens on every request, so a deployment names only what it
uses (``[runtime] toolsets``). The order is fixed: the tool list is part of the cached prompt prefix.
"""

from __future__ import annotations

from collections.abc import Iterable

from kairos.config import DEFAULT_TOOLSETS, RuntimeToolset
from kairos.tools.base import Tool
from kairos.tools.toolsets import registry


def runtime_tools(toolsets: Iterable[RuntimeToolset] = DEFAULT_TOOLSETS) -> list[Tool]:
    """The tools of ``toolsets`` (of tasks, timers, watch, outbox, calendar, mail), in that fixed order."""
    wanted = set(toolsets)
    return registry.tools(n for n in registry.RUNTIME_ORDER if n in wanted)
