"""What the reviewer and the sidecar classifier share: the verdict schema, asking a model, parsing."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from kairos.models.base import Model, try_complete
from kairos.models.types import Message, ModelRequest, ToolSpec

Risk: TypeAlias = Literal["low", "medium", "high"]
RISKS: tuple[Risk, ...] = ("low", "medium", "high")
VERDICT_TOOL = ToolSpec(
    "verdict",
    "Report whether the proposed tool call may run.",
    {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "risk": {"type": "string", "enum": list(RISKS)},
            "reason": {"type": "string", "maxLength": 300},
        },
        "required": ["approved", "risk", "reason"],
        "additionalProperties": False,
    },
)
"""The one tool a judge may call: its arguments are the verdict (schema-constrained on the local model)."""


@dataclass(frozen=True, slots=True)
class Review:
    """A judge's answer: approved or not, how risky, why; ``by`` names the judge."""

    approved: bool
    risk: Risk
    reason: str
    by: str = "reviewer"
    latency_s: float = 0.0


def describe_call(tool: str, arguments: dict[str, Any], limit: int = 2000) -> str:
    """The call as a judge sees it: ``name`` and its JSON arguments (cut, and said so, when long)."""
    args = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    if len(args) > limit:
        args = args[:limit] + f"… [cut: {len(args) - limit} more characters]"
    return f"tool: {tool}\narguments: {args}"


async def ask_verdict(model: Model, system: str, text: str, *, timeout_s: float, by: str) -> Review:
    """One judge call through :data:`VERDICT_TOOL`; any failure is a rejection (fail closed)."""
    request = ModelRequest(system, "", (VERDICT_TOOL,), (Message.user(text),), max_tokens=160)
    t0 = time.perf_counter()

    def failed(why: str) -> Review:
        return Review(False, "high", f"the {by} failed ({why}), so the call is rejected", by, time.perf_counter() - t0)

    response, why = await try_complete(model, request, timeout_s)
    if response is None:  # any model failure rejects, never approves
        return failed(why)
    return parse_verdict(response.message.tool_calls, by, response.message.content) or failed(
        f"unparsable answer: {(response.message.content or '(no verdict call)')[:120]!r}"
    )


def parse_verdict(calls: Any, by: str, text: str = "") -> Review | None:
    """The first well-formed ``verdict`` call as a :class:`Review`, else None.

    Reply text that is one verdict object counts too (backends without tool calls answer so).
    """
    for call in calls:
        if call.name != VERDICT_TOOL.name:
            continue
        try:
            args = call.parsed_arguments()
        except ValueError:
            continue
        if (review := _review(args, by)) is not None:
            return review
    try:
        obj = json.loads(text.strip()) if text.strip().startswith("{") else None
    except ValueError:
        return None
    return _review(obj, by) if isinstance(obj, dict) else None


def _review(args: dict[str, Any], by: str) -> Review | None:
    approved, risk, reason = args.get("approved"), args.get("risk"), args.get("reason")
    if isinstance(approved, bool) and risk in RISKS and isinstance(reason, str):
        return Review(approved, risk, reason.strip()[:300] or "(no reason given)", by)
    return None


def rejected_text(tool: str, review: Review) -> str:
    """What the agent reads when a judge rejects its call."""
    return (
        f"Not run: the {review.by} rejected '{tool}' (risk {review.risk}): {review.reason}. "
        "Do not retry the same call; choose a safer way, or ask the user."
    )


__all__ = ["RISKS", "VERDICT_TOOL", "Review", "Risk", "ask_verdict", "describe_call", "parse_verdict", "rejected_text"]
