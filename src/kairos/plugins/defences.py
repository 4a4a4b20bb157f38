"""The injection-defences plugin (book ch2 §3.8, Exp 2-5).

A ``guard``-stage plugin, so it runs first and fails closed.

It wraps external tool output before any other plugin annotates it, decides every call through
the permission rules (:mod:`kairos.security.permissions`: deny, ask the approver, or allow; the one
decision point, so confirmation of side effects, dangerous commands, network and the sandbox are
asked about in one place) and installs the session's sandbox, adds the fixed warning to the
deployment part of the system prompt, guards every streamed reply against leaking the system
prompt, and provides the agent's :class:`~kairos.security.provenance.ProvenanceGuard` as a service.
What each part does and its settings: :mod:`kairos.security.defences`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kairos.agent.plugin import Plugin, ReplyGuard, RunContext, SafePoint
from kairos.models.types import ArgumentsError, Message, SystemPrompt, ToolCall
from kairos.security.approval import ApprovalRequest, Approver, Decision, make_approver
from kairos.security.defences import (
    DENIED,
    INJECTION_WARNING,
    DefencesConfig,
    SecurityEvent,
    denied_result,
    security_log,
    source_of,
)
from kairos.security.gate import ReviewGate
from kairos.security.leak import Leak, LeakGuard, LeakStream
from kairos.security.permissions import Permissions, PermissionsConfig, Verdict
from kairos.security.provenance import ProvenanceGuard
from kairos.security.reviewer import ReviewConfig
from kairos.security.sanitize import sanitize, wrap_external
from kairos.tools.audit import audit_of
from kairos.tools.base import HARNESS_MADE, Tool, ToolContext, ToolResult
from kairos.tools.sandbox import SANDBOX_RESOURCE, Sandbox, SandboxConfig, grant, sandbox_of


class InjectionDefences(Plugin):
    """Tagging, sanitising, the warning, confirmation and the leak guard, per :class:`DefencesConfig`.

    Args:
        config: which defences are on; default :class:`DefencesConfig`'s defaults.
        approver: who confirms calls the rules send to "ask"; default the one ``config.approver`` names.
        permissions: ``[permissions]``, the rules (default: none, so only the defaults decide).
        sandbox: ``[sandbox]``; each session gets a :class:`~kairos.tools.sandbox.Sandbox` with it
            (default: leave the session's sandbox as it is, which is the default one).
        review: the ``[review]`` checks (confirm tokens, sidecar, reviewer; :mod:`kairos.security.gate`);
            default: ``[review]``'s defaults (confirm tokens for irreversible tools only).
    """

    stage = "guard"

    def __init__(
        self,
        config: DefencesConfig | None = None,
        *,
        approver: Approver | None = None,
        permissions: PermissionsConfig | None = None,
        sandbox: SandboxConfig | None = None,
        review: ReviewGate | None = None,
    ) -> None:
        self.config = config or DefencesConfig()
        self.approver: Approver = approver or make_approver(self.config.approver)
        self.sandbox = sandbox
        self.review: ReviewGate = review if review is not None else ReviewGate(ReviewConfig())
        c = self.config
        self.permissions = Permissions(
            permissions,
            confirm=c.confirm_tools if c.confirm_side_effects else (),
            confirm_side_effects=c.confirm_side_effects,
            exempt=c.exempt_tools,
        )
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
        """Learn which of the session's tools are external (for provenance); install the sandbox."""
        self._learn(ctx)
        self._sandbox(ctx.session.tool_context)

    def _sandbox(self, tc: ToolContext) -> Sandbox:
        """The session's sandbox, set up with ``[sandbox]`` (a sub-agent's session gets one on its first call)."""
        if self.sandbox is not None and tc.get(SANDBOX_RESOURCE) is None:
            return tc.put(SANDBOX_RESOURCE, Sandbox(self.sandbox))
        return sandbox_of(tc)

    async def at_safe_point(self, ctx: RunContext, at: SafePoint) -> Sequence[Message]:
        """At a turn start the tool set may have changed: learn it again."""
        if at == "turn_start":
            self._learn(ctx)
        return ()

    def _learn(self, ctx: RunContext) -> None:
        self._external.update(t.name for t in ctx.tools if t.external)
        self.review.learn(ctx.tools)

    def on_input(self, ctx: RunContext, message: Message) -> Message:
        """The user spoke: the sidecar's stop after repeated rejections is lifted."""
        self.review.user_spoke(ctx.session.id)
        return message

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
        """Decide the call by the permission rules; "ask" goes to the approver.

        A refusal (a deny rule, or the approver's no) becomes the call's error result and the tool
        does not run. What was decided, and by whom, goes to the audit log.
        """
        try:
            args = call.parsed_arguments()
        except ArgumentsError:  # validated before this hook; kept total for direct callers
            args = {}
        tc = ctx.session.tool_context
        box = self._sandbox(tc)
        verdict = await self.permissions.evaluate(tool, args, sandbox=box, cwd=tc.cwd)
        audit, log = audit_of(tc), security_log(tc)
        if verdict.action == "deny":
            audit.decided(call.id, f"deny ({verdict.source})")
            log.record(SecurityEvent("denied", tool.name, call.id, verdict.reason))
            return refused(tool.name, verdict, None)
        gate = await self.review.check(tool, args, tc, verdict, session_id=tc.session_id,
                                       messages=ctx.session.message_list())  # fmt: skip
        if gate.result is not None:  # a preview, or a judge's no
            audit.decided(call.id, gate.decision)
            log.record(SecurityEvent("denied", tool.name, call.id, gate.decision))
            return gate.result
        if gate.final:  # a judge's yes that needs no human
            audit.decided(call.id, gate.decision)
            _grant(verdict, box)
            return None
        if verdict.action == "allow":
            audit.decided(call.id, f"allow ({verdict.source})")
            _grant(verdict, box)
            return None
        reason = _explained(verdict.reason, tool, args, tc)
        request = ApprovalRequest(tool.name, args, call.id, tc.session_id, reason=reason)
        decision = await self.approver.decide(request)
        audit.decided(call.id, f"{'approved' if decision.approved else 'denied'} by {decision.by or 'approver'} "
                      f"(ask: {verdict.source})")  # fmt: skip
        if decision.approved:
            log.record(SecurityEvent("approved", tool.name, call.id, decision.by))
            _grant(verdict, box)
            return None
        log.record(SecurityEvent("denied", tool.name, call.id, decision.reason))
        return refused(tool.name, verdict, decision)

    async def after_tool(self, ctx: RunContext, call: ToolCall, tool: Tool | None, result: ToolResult) -> ToolResult:
        """Sanitise (flag/redact) and wrap the output of external tools."""
        if tool is None or not (tool.external or self.is_external(tool.name)):
            return result
        if result.metadata.get(DENIED) or result.metadata.get(HARNESS_MADE):  # kairos's words, not the tool's
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
        return result.with_content(content, metadata)  # a screenshot stays (it is seen, not read as text)


def _grant(verdict: Verdict, box: Sandbox) -> None:
    """Give the call what was approved with it (network, running unconfined); the tool checks it."""
    if verdict.grants:
        grant(*verdict.grants)
        if "unconfined" in verdict.grants:
            box.unconfined_approved = True


def _explained(reason: str, tool: Tool, args: dict[str, Any], tc: ToolContext) -> str:
    """``reason`` with what the call would do in the user's terms, when the tool can say (``FunctionTool.explain``).

    A tool that cannot say, or fails to, leaves the question as it was: the arguments are shown anyway.
    """
    explain = getattr(tool, "explain", None)
    if explain is None:
        return reason
    try:
        detail = str(explain(args, tc) or "")
    except Exception:  # an explanation is a courtesy; the approval must still be asked
        return reason
    return f"{reason}: {detail}" if detail else reason


def refused(tool_name: str, verdict: Verdict, decision: Decision | None) -> ToolResult:
    """The error result of a call that does not run: why, and not to retry."""
    if decision is not None and verdict.reason == "this tool has side effects":
        return denied_result(tool_name, decision)
    if decision is None:
        text = f"Not run: '{tool_name}' is not allowed here: {verdict.reason} ({verdict.source})."
        by = "rules"
    else:
        text = f"Not run: '{tool_name}' needs the user's approval ({verdict.reason}), but {decision.reason}."
        by = decision.by
    text += " Do not retry this call; tell the user what you wanted to do and let them decide."
    return ToolResult(text, is_error=True, metadata={DENIED: True, "approver": by, "permission": verdict.source})


__all__ = ["InjectionDefences", "refused"]
