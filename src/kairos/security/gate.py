"""The ``[review]`` checks in the order the defences apply them to one call (issue 10 §3).

After the permission rules (a "deny" refuses before any of this):

1. **check-then-confirm** (:mod:`kairos.security.confirm`): an irreversible call without a valid
   token returns its preview and a token instead of running;
2. **sidecar** (:mod:`kairos.security.sidecar`): its classification, started while the reply was
   streaming, must approve the call (its "no" refuses; after ``max_rejections`` in a row every
   covered call is refused until the user writes again);
3. **reviewer** (:mod:`kairos.security.reviewer`): for calls the rules send to "ask" and calls of
   ``[review] tools``; its "no" refuses; its "yes" is final in ``replace`` mode and for calls the
   rules allowed, and otherwise passes the call on to the human approver.

Every refusal is an error result for the agent (never an exception) and is audited with the
judge's name as approver (``reviewer``, ``sidecar``, ``confirm``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kairos.models.base import Model
from kairos.models.types import Message
from kairos.security import confirm
from kairos.security._judge import Review, rejected_text
from kairos.security.permissions import Verdict
from kairos.security.reviewer import ModelReviewer, ReviewConfig, Reviewer, ReviewRequest
from kairos.security.sidecar import Classifier, ModelClassifier, Sidecar, learn_skips
from kairos.tools.audit import DENIED_KEY
from kairos.tools.base import Tool, ToolContext, ToolResult


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the gate decided: a result instead of the call (refusal or preview), or go on.

    ``final`` means a judge approved and no human needs asking; ``decision`` is the audit text.
    """

    result: ToolResult | None = None
    final: bool = False
    decision: str = ""


class ReviewGate:
    """Confirm tokens, the sidecar and the reviewer, per ``[review]``.

    Args:
        config: ``[review]``.
        reviewer: the reviewer (default: a :class:`ModelReviewer` on ``config.model`` when enabled).
        classifier: the sidecar's judge (default: a :class:`ModelClassifier` on ``config.sidecar.model``).
        load: builds a model from a spec (default :func:`kairos.models.load_model` with default settings).
    """

    def __init__(
        self,
        config: ReviewConfig,
        *,
        reviewer: Reviewer | None = None,
        classifier: Classifier | None = None,
        load: Callable[[str], Model] | None = None,
    ) -> None:
        self.config = config
        load = load or _load
        self.reviewer: Reviewer | None = reviewer
        if self.reviewer is None and config.enabled:
            self.reviewer = ModelReviewer(load(config.model), config.timeout_s)
        self.sidecar: Sidecar | None = None
        if config.sidecar.enabled:
            judge = classifier or ModelClassifier(load(config.sidecar.model), config.sidecar.timeout_s)
            self.sidecar = Sidecar(judge, config.sidecar)

    def learn(self, tools: Any) -> None:
        """Note the session's read-only tools (the sidecar skips them)."""
        if self.sidecar is not None:
            learn_skips(self.sidecar, tools)

    def user_spoke(self, session_id: str) -> None:
        """A new user message lifts the sidecar's stop."""
        if self.sidecar is not None:
            self.sidecar.reset(session_id)

    async def check(
        self,
        tool: Tool,
        args: dict[str, Any],
        ctx: ToolContext,
        verdict: Verdict,
        *,
        session_id: str,
        messages: Sequence[Message] = (),
    ) -> Outcome:
        """Apply the checks to a call the rules did not deny."""
        c = self.config
        why = confirm.confirm_reason(
            tool, args, irreversible=c.confirm_irreversible, dangerous_commands=c.confirm_dangerous
        )
        if why:
            preview = confirm.check(tool, args, ctx, reason=why, ttl_s=c.confirm_ttl_s)
            if preview is not None:
                if self.sidecar is not None:
                    self.sidecar.discard(tool.name, args)
                return Outcome(preview, decision=f"preview (confirm: {why})")
        if self.sidecar is not None and self.sidecar.covers(tool.name):
            review = await self.sidecar.decide(session_id, tool.name, args)
            if not review.approved:
                return _refuse(tool.name, review)
        if self.reviewer is not None and (verdict.action == "ask" or c.reviews(tool.name)):
            task = _last_user_text(messages)
            review = await self.reviewer.review(ReviewRequest(tool.name, args, verdict.reason, task))
            if not review.approved:
                return _refuse(tool.name, review)
            if c.mode == "replace" or verdict.action == "allow":
                return Outcome(final=True, decision=f"approved by reviewer (risk {review.risk}; {verdict.source})")
        return Outcome()


def _load(spec: str) -> Model:
    from kairos.models import load_model

    return load_model(spec)


def _refuse(tool: str, review: Review) -> Outcome:
    meta = {DENIED_KEY: True, "approver": review.by, "risk": review.risk}
    text = review.reason if review.reason.startswith("Not run:") else rejected_text(tool, review)
    result = ToolResult(text, is_error=True, metadata=meta)
    return Outcome(result, decision=f"denied by {review.by} (risk {review.risk}: {review.reason[:120]})")


def _last_user_text(messages: Sequence[Message]) -> str:
    for m in reversed(messages):
        if m.role == "user" and m.origin is None and m.content:  # what the user typed
            return m.content
    return ""


__all__ = ["Outcome", "ReviewGate"]
