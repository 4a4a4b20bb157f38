"""The runtime's tools by toolset, for an agent that runs under a :class:`~kairos.runtime.Runtime`.

Each toolset costs prompt tokens on every request, so a deployment names only what it uses
(``[runtime] toolsets``). The order is fixed: the tool list is part of the cached prompt prefix.
"""

from __future__ import annotations

from collections.abc import Iterable

from kairos.config import DEFAULT_TOOLSETS, RuntimeToolset
from kairos.tools.base import Tool


def runtime_tools(toolsets: Iterable[RuntimeToolset] = DEFAULT_TOOLSETS) -> list[Tool]:
    """The tools of ``toolsets`` (tasks, timers, watch, outbox, calendar, mail), in a fixed order."""
    from kairos.runtime import calendar, mail, outbox, tasks, timers, watch

    wanted = set(toolsets)
    by_name: dict[RuntimeToolset, list[Tool]] = {
        "tasks": tasks.tools(),
        "timers": timers.tools(),
        "watch": watch.tools(),
        "outbox": outbox.tools(),
        "calendar": calendar.tools(),
        "mail": mail.tools(),
    }
    return [t for name, found in by_name.items() if name in wanted for t in found]
