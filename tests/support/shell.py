"""Run the ``bash`` tool the way the agent does (shared by the shell and sandbox tests)."""

from __future__ import annotations

from typing import Any

from kairos.tools.base import ToolContext, ToolResult
from kairos.tools.builtins.shell import bash


async def sh(ctx: ToolContext, command: str, **args: Any) -> ToolResult:
    """One ``bash`` call with ``command`` (and any other arguments) in ``ctx``."""
    result: ToolResult = await bash.call({"command": command, **args}, ctx)
    return result
