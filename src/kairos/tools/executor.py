"""Runs one tool call: parse, validate, execute with a timeout, cap the output.

Every failure the *model* caused becomes a clear error result for the model (never an
exception): malformed JSON, unknown tool, schema mismatch, tool exception, timeout.
Hooks let later layers (permissions, status bar, injection defences) act before and after.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from kairos.models.types import ToolCall
from kairos.tools.base import Tool, ToolContext, ToolRegistry, ToolResult, format_validation_error

BeforeHook = Callable[[ToolCall, Tool, ToolContext], Awaitable[ToolResult | None]]
"""Runs before a valid call; returning a result short-circuits the call (e.g. denied)."""
AfterHook = Callable[[ToolCall, Tool | None, ToolResult, ToolContext], ToolResult]
"""Runs on every result, errors included; returns the (possibly annotated) result."""
ErrorFormatter = Callable[[ToolCall, Tool, dict[str, Any], BaseException], str]


def basic_error(call: ToolCall, t: Tool, args: dict[str, Any], exc: BaseException) -> str:
    return f"Tool '{t.name}' failed: {type(exc).__name__}: {exc}"


class ToolExecutor:
    def __init__(self, registry: ToolRegistry, *, format_error: ErrorFormatter = basic_error) -> None:
        self.registry = registry
        self.format_error = format_error
        self.before: list[BeforeHook] = []
        self.after: list[AfterHook] = []

    async def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        t = self.registry.get(call.name)
        result = await self._execute(call, t, ctx)
        for hook in self.after:
            result = hook(call, t, result, ctx)
        return result

    async def _execute(self, call: ToolCall, t: Tool | None, ctx: ToolContext) -> ToolResult:
        if t is None:
            names = ", ".join(self.registry.names()) or "(none)"
            return ToolResult(f"Unknown tool '{call.name}'. Available tools: {names}.", is_error=True)
        try:
            args = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as e:
            return ToolResult(
                f"The arguments for '{t.name}' are not valid JSON ({e.msg} at position {e.pos}): "
                f"{call.arguments[:500]!r}. Send one JSON object matching: {json.dumps(t.spec.parameters)}",
                is_error=True,
            )
        if not isinstance(args, dict):
            return ToolResult(
                f"The arguments for '{t.name}' must be a JSON object, got {type(args).__name__}. "
                f"Expected: {json.dumps(t.spec.parameters)}",
                is_error=True,
            )
        try:
            validated = t.validate(args)
        except ValidationError as e:
            return ToolResult(format_validation_error(t, e), is_error=True)
        for hook in self.before:
            verdict = await hook(call, t, ctx)
            if verdict is not None:
                return verdict
        try:
            result = await asyncio.wait_for(t.call(validated, ctx), timeout=t.timeout_s)
        except TimeoutError:
            return ToolResult(
                f"Tool '{t.name}' timed out after {t.timeout_s:g} s. Try a smaller request or another approach.",
                is_error=True,
                metadata={"timeout_s": t.timeout_s},
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a tool bug must reach the model as a result, never crash the run
            return ToolResult(self.format_error(call, t, args, e), is_error=True, metadata={"exception": repr(e)})
        return cap_output(result, t.max_output_chars)


def cap_output(result: ToolResult, limit: int) -> ToolResult:
    """Truncate with an explicit notice so the model knows it saw only part of the output."""
    n = len(result.content)
    if n <= limit:
        return result
    notice = (
        f"\n[output truncated: showing the first {limit} of {n} characters. "
        "Ask for less (offset/limit, a narrower pattern or path) to see the rest.]"
    )
    return ToolResult(result.content[:limit] + notice, result.is_error, {**result.metadata, "truncated_from": n})
