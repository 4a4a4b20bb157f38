"""Plugins compiled once per agent: hook lists in stage order, single slots, services.

Only plugins that override a hook are on that hook's list, so an agent pays per request only for
what its plugins do. The failure policy of the contract lives here: an observer's exception is
reported and skipped; a ``guard`` plugin's exception fails closed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from kairos.agent.events import AgentEvent, HookFailed
from kairos.agent.plugin import STAGES, Plugin, ReplyGuard, RunContext, SafePoint, StatusProvider
from kairos.context.builder import TrajectoryView
from kairos.errors import ConfigError
from kairos.models.types import Message, ModelRequest, ToolCall
from kairos.tools.base import Tool, ToolResult, ToolSource
from kairos.tools.executor import ErrorFormatter, basic_error

log = logging.getLogger("kairos.plugins")
T = TypeVar("T")
Report = Callable[[AgentEvent], None]


def _overrides(plugin: Plugin, hook: str) -> bool:
    return getattr(type(plugin), hook) is not getattr(Plugin, hook)


def _slot(plugins: Sequence[Plugin], getter: Callable[[Plugin], T | None], what: str) -> tuple[T | None, str]:
    claimed: list[tuple[str, T]] = [(p.name, v) for p in plugins if (v := getter(p)) is not None]
    if len(claimed) > 1:
        names = " and ".join(n for n, _ in claimed)
        raise ConfigError(f"{names} both provide the {what}; an agent has one, so switch one of them off")
    return (claimed[0][1], claimed[0][0]) if claimed else (None, "")


class Pipeline:
    """The plugins of one agent, ordered and checked.

    Raises:
        ConfigError: two plugins claim a single slot or provide the same service type.
    """

    def __init__(self, plugins: Sequence[Plugin], *, status: StatusProvider | None = None) -> None:
        ordered = sorted(enumerate(plugins), key=lambda ip: (STAGES.index(ip[1].stage), ip[0]))
        self.plugins: list[Plugin] = [p for _, p in ordered]
        provided, owner = _slot(self.plugins, lambda p: p.status_provider(), "status provider")
        if provided is not None and status is not None:
            raise ConfigError(f"{owner} provides the status provider and the agent was given one too; pass one")
        self.status: StatusProvider | None = provided if provided is not None else status
        formatter, _ = _slot(self.plugins, lambda p: p.error_formatter(), "tool error formatter")
        self.format_error: ErrorFormatter = formatter or basic_error
        self.views: list[TrajectoryView] = [v for p in self.plugins for v in p.views()]
        self.suffixes: list[str] = [s for p in self.plugins if (s := p.system_suffix())]
        self.tools: list[Tool | ToolSource] = [t for p in self.plugins for t in p.tools()]
        self.services: dict[type, object] = {}
        for p in self.plugins:
            for service in p.services():
                kind = type(service)
                if kind in self.services:
                    raise ConfigError(f"two plugins provide a {kind.__name__}; an agent takes one")
                self.services[kind] = service
        for p in self.plugins:  # a plugin is a service of its own type (the first of several instances)
            self.services.setdefault(type(p), p)
        hooks = (
            "open",
            "close",
            "on_input",
            "at_safe_point",
            "tool_choice",
            "on_request",
            "on_overflow",
            "before_tool",
            "after_tool",
            "reply_guard",
            "status_lines",
        )
        self.hooked: dict[str, list[Plugin]] = {h: [p for p in self.plugins if _overrides(p, h)] for h in hooks}

    def service(self, kind: type[T]) -> T | None:
        """The service of exactly type ``kind``, or of a subclass of it."""
        found = self.services.get(kind)
        if found is None:
            found = next((s for k, s in self.services.items() if issubclass(k, kind)), None)
        return found  # type: ignore[return-value]

    # -- calling hooks under the failure policy ------------------------------------------------

    @staticmethod
    def failed(plugin: Plugin, hook: str, e: Exception, report: Report) -> None:
        """Log and report a hook's exception."""
        log.error("plugin %s failed in %s: %s", plugin.name, hook, e, exc_info=e)
        report(HookFailed(plugin.name, hook, f"{type(e).__name__}: {e}", e))

    async def open(self, ctx: RunContext, report: Report) -> str | None:
        """Open every plugin for a session; a failing guard plugin stops the run (its message returned)."""
        for p in self.hooked["open"]:
            try:
                await p.open(ctx)
            except Exception as e:
                self.failed(p, "open", e, report)
                if p.stage == "guard":
                    return f"the {p.name} plugin could not start ({type(e).__name__}: {e}), so the run cannot go on"
        return None

    async def close(self, ctx: RunContext, report: Report) -> None:
        """Close every plugin, last opened first; failures are reported, the rest still close."""
        for p in reversed(self.hooked["close"]):
            try:
                await p.close(ctx)
            except Exception as e:
                self.failed(p, "close", e, report)

    def on_input(self, ctx: RunContext, message: Message, report: Report) -> Message:
        """Let plugins rewrite an inbox message before it is appended."""
        for p in self.hooked["on_input"]:
            try:
                message = p.on_input(ctx, message)
            except Exception as e:
                self.failed(p, "on_input", e, report)
        return message

    async def at_safe_point(
        self, ctx: RunContext, at: SafePoint, append: Callable[[Sequence[Message], str], None], report: Report
    ) -> None:
        """Each plugin in order; its messages are appended (with its name) before the next plugin runs."""
        for p in self.hooked["at_safe_point"]:
            try:
                messages = await p.at_safe_point(ctx, at)
            except Exception as e:
                self.failed(p, "at_safe_point", e, report)
                continue
            if messages:
                append(messages, p.name)

    async def tool_choice(self, ctx: RunContext, request: ModelRequest, report: Report) -> ModelRequest:
        """``request`` with the first plugin opinion on its ``tool_choice`` (unchanged without one)."""
        for p in self.hooked["tool_choice"]:
            try:
                choice = await p.tool_choice(ctx, request)
            except Exception as e:
                self.failed(p, "tool_choice", e, report)
                continue
            if choice is not None:
                return replace(request, tool_choice=choice)
        return request

    async def on_request(self, ctx: RunContext, request: ModelRequest, report: Report) -> None:
        """Observers of the final request."""
        for p in self.hooked["on_request"]:
            try:
                await p.on_request(ctx, request)
            except Exception as e:
                self.failed(p, "on_request", e, report)

    async def on_overflow(
        self, ctx: RunContext, request: ModelRequest, tokens: int, limit: int, count: Callable[[ModelRequest], int]
    ) -> tuple[ModelRequest, int, list[Exception]]:
        """Ask each overflow handler in turn until the request fits; errors are returned for reporting."""
        errors: list[Exception] = []
        for p in self.hooked["on_overflow"]:
            if tokens <= limit:
                break
            try:
                smaller = await p.on_overflow(ctx, request, tokens, limit)
            except Exception as e:
                errors.append(e)
                log.error("plugin %s failed in on_overflow: %s", p.name, e, exc_info=e)
                continue
            if smaller is not None:
                request, tokens = smaller, count(smaller)
        return request, tokens, errors

    async def before_tool(self, ctx: RunContext, call: ToolCall, tool: Tool, report: Report) -> ToolResult | None:
        """The first plugin that answers instead of the tool wins; a failing guard refuses the call."""
        for p in self.hooked["before_tool"]:
            try:
                verdict = await p.before_tool(ctx, call, tool)
            except Exception as e:
                self.failed(p, "before_tool", e, report)
                if p.stage == "guard":
                    return ToolResult(
                        f"Not run: the {p.name} check of this call failed ({type(e).__name__}), so the call was "
                        "refused to be safe. Tell the user; do not retry it unchanged.",
                        is_error=True,
                        metadata={"refused": "hook_failed"},
                    )
                continue
            if verdict is not None:
                return verdict
        return None

    async def after_tool(
        self, ctx: RunContext, call: ToolCall, tool: Tool | None, result: ToolResult, report: Report
    ) -> ToolResult:
        """Each plugin annotates in turn; a failing guard withholds the result."""
        for p in self.hooked["after_tool"]:
            try:
                result = await p.after_tool(ctx, call, tool, result)
            except Exception as e:
                self.failed(p, "after_tool", e, report)
                if p.stage == "guard":
                    return ToolResult(
                        f"[result withheld: the {p.name} check of this tool's output failed ({type(e).__name__})]",
                        is_error=True,
                        metadata={"withheld": True},
                    )
        return result

    def reply_guards(self, ctx: RunContext, report: Report) -> list[ReplyGuard] | None:
        """Fresh guards for one reply; None when a guard plugin failed to make one (fail closed)."""
        guards = []
        for p in self.hooked["reply_guard"]:
            try:
                g = p.reply_guard(ctx)
            except Exception as e:
                self.failed(p, "reply_guard", e, report)
                return None
            if g is not None:
                guards.append(g)
        return guards

    def status_lines(self, ctx: RunContext, report: Report) -> list[str]:
        """Every plugin's status lines, in order."""
        lines: list[str] = []
        for p in self.hooked["status_lines"]:
            try:
                lines.extend(p.status_lines(ctx))
            except Exception as e:
                self.failed(p, "status_lines", e, report)
        return lines
