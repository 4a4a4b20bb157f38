"""The injection-defences plugin (book ch2 §3.8, Exp 2-5).

A ``guard``-stage plugin, so it runs first and fails closed.

It wraps external tool output before any other plugin annotates it, asks the approver before
side-effecting calls, adds the fixed warning to the deployment part of the system prompt,
guards every streamed reply against leaking the system prompt, and provides the agent's
:class:`~kairos.security.provenance.ProvenanceGuard` as a service. What each part does and its
settings: :mod:`kairos.security.defences`.
"""

from __future__ import annotations

from collections.abc import Sequence

from kairos.agent.plugin import Plugin, ReplyGuard, RunContext, SafePoint
from kairos.models.types import ArgumentsError, Message, SystemPrompt, ToolCall
from kairos.security.approval import ApprovalRequest, Approver, make_approver
from kairos.security.defences import (
    DENIED,
    INJECTION_WARNING,
    DefencesConfig,
    SecurityEvent,
    denied_result,
    security_log,
    source_of,
)
from kairos.security.leak import Leak, LeakGuard, LeakStream
from kairos.security.provenance import ProvenanceGuard
from kairos.security.sanitize import sanitize, wrap_external
from kairos.tools.base import Tool, ToolContext, ToolResult


class InjectionDefences(Plugin):
    """Tagging, sanitising, the warning, confirmation and the leak guard, per :class:`DefencesConfig`.

    Args:
        config: which defences are on; default :class:`DefencesConfig`'s defaults.
        approver: who confirms side-effecting calls; default the one ``config.approver`` names.
    """

    stage = "guard"

    def __init__(self, config: DefencesConfig | None = None, *, approver: Approver | None = None) -> None:
        self.config = config or DefencesConfig()
        self.approver: Approver = approver or make_approver(self.config.approver)
        self._external: set[str] = set(self.config.external_tools)
        self.guard = ProvenanceGuard(self.is_external)
        self._leak: tuple[SystemPrompt, LeakGuard] | None = None

    def services(self) -> Sequence[object]:
        """The provenance guard (memory writers ask it before storing anything)."""
        return (self.guard,)

    def system_suffix(self) -> str:
        """The Exp 2-5 warning, after the cache boundary."""
        return INJECTION_WARNING if self.config.warning else ""

    async def open(self, ctx: RunContext) -> None:
        """Learn which of the session's tools are external (for provenance)."""
        self._learn(ctx)

    async def at_safe_point(self, ctx: RunContext, at: SafePoint) -> Sequence[Message]:
        """At a turn start the tool set may have changed: learn it again."""
        if at == "turn_start":
            self._learn(ctx)
        return ()

    def _learn(self, ctx: RunContext) -> None:
        self._external.update(t.name for t in ctx.tools if t.external)

    def is_external(self, name: str) -> bool:
        """Whether results of the tool ``name`` are external content."""
        return name in self._external

    def needs_confirmation(self, t: Tool) -> bool:
        """Side-effecting (or listed) and not exempt."""
        if t.name in self.config.exempt_tools:
            return False
        return t.side_effects or t.name in self.config.confirm_tools

    # -- hooks --

    def reply_guard(self, ctx: RunContext) -> ReplyGuard | None:
        """A leak guard for one reply; the word index is rebuilt only when the system prompt changes."""
        if not self.config.leak_guard:
            return None
        return self.leak_stream(ctx.system, ctx.session.tool_context)

    def leak_stream(self, system: SystemPrompt, tool_context: ToolContext) -> LeakStream:
        """A guard for one reply that logs what it blocks in the session's security log."""
        if self._leak is None or self._leak[0] != system:
            guard = LeakGuard.for_system(system, words=self.config.leak_words, secrets=self.config.secrets)
            self._leak = (system, guard)
        log = security_log(tool_context)

        def record(leak: Leak) -> None:
            log.record(SecurityEvent("leak_blocked", "", "", f"{leak.kind}: {leak.evidence}"))

        return self._leak[1].stream(record)

    async def before_tool(self, ctx: RunContext, call: ToolCall, tool: Tool) -> ToolResult | None:
        """Ask the approver; a "no" becomes the call's (error) result and the tool does not run."""
        if not (self.config.confirm_side_effects and self.needs_confirmation(tool)):
            return None
        try:
            args = call.parsed_arguments()
        except ArgumentsError:  # validated before this hook; kept total for direct callers
            args = {}
        tc = ctx.session.tool_context
        decision = await self.approver.decide(ApprovalRequest(tool.name, args, call.id, tc.session_id))
        log = security_log(tc)
        if decision.approved:
            log.record(SecurityEvent("approved", tool.name, call.id, decision.by))
            return None
        log.record(SecurityEvent("denied", tool.name, call.id, decision.reason))
        return denied_result(tool.name, decision)

    async def after_tool(self, ctx: RunContext, call: ToolCall, tool: Tool | None, result: ToolResult) -> ToolResult:
        """Sanitise (flag/redact) and wrap the output of external tools."""
        if tool is None or not (tool.external or self.is_external(tool.name)) or result.metadata.get(DENIED):
            return result
        log = security_log(ctx.session.tool_context)
        content = result.content
        metadata = dict(result.metadata)
        if self.config.sanitize != "off":
            cleaned = sanitize(content, self.config.sanitize)
            if cleaned.findings:
                content = cleaned.text
                metadata["sanitizer"] = [f.pattern for f in cleaned.findings]
                detail = "; ".join(f"{f.pattern}: {f.text[:60]}" for f in cleaned.findings)
                log.record(SecurityEvent("sanitized", tool.name, call.id, detail))
        source = source_of(call, tool)
        metadata["provenance"] = "external"
        metadata["source"] = source
        if self.config.tag_external:
            content = wrap_external(content, source)
            log.record(SecurityEvent("wrapped", tool.name, call.id, source))
        return ToolResult(content, result.is_error, metadata)


__all__ = ["InjectionDefences"]
