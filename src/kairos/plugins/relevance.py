"""The tool-relevance gate: before the first reply of a turn, text only when no tool is relevant.

Small models call a tool for almost any request once tools are offered (BFCL irrelevance: the
1.5B model called one in 13 of 13 cases). The model's own decision is read at its branch point
instead of being sampled: the reply starts ``{"`` and continues ``tool_calls`` (call) or ``name``
(answer), so one evaluation of the prompt plus two tokens gives ``P(call)``. Below a threshold the
reply is limited to text (``tool_choice = "none"``). The prompt is the one generation uses, so the
gate shares its KV cache and costs the two tokens, not a second prompt.

Off by default: a wrong "no" makes the agent answer where it should have acted. Backends that cannot
score choices (remote APIs) are left alone.
"""

from __future__ import annotations

import math

from kairos.agent.plugin import Plugin, RunContext
from kairos.models.base import ChoiceScorer
from kairos.models.types import ModelRequest, ToolChoice
from kairos.tools.toolsets.config import RelevanceConfig

REPLY_START = '{"'
CALL, ANSWER = "tool", "name"
"""The reply format's two branches after ``{"``: ``{"tool_calls": …`` or ``{"name": "final_answer", …``."""


class ToolRelevanceGate(Plugin):
    """Sets ``tool_choice = "none"`` on a turn's first request when ``P(call) < min_p_call``.

    Args:
        config: the threshold; default :class:`RelevanceConfig`'s.
    """

    stage = "annotate"

    def __init__(self, config: RelevanceConfig | None = None) -> None:
        self.config = config or RelevanceConfig(enabled=True)
        self.scored = 0
        """Requests gated so far, and how many of them were limited to text."""
        self.limited = 0
        self.last_p_call: float | None = None
        """``P(call)`` of the last gated request (None: not gated); for status, tests and benches."""

    async def tool_choice(self, ctx: RunContext, request: ModelRequest) -> ToolChoice | None:
        """``none`` when the model would rather answer; None (no opinion) otherwise or when it cannot tell."""
        self.last_p_call = None
        model = ctx.model
        if not request.tools or request.tool_choice != "auto" or not isinstance(model, ChoiceScorer):
            return None
        if not _turn_start(request):
            return None
        self.last_p_call = p = await gate_p_call(model, request)
        self.scored += 1
        if p >= self.config.min_p_call:
            return None
        self.limited += 1
        return "none"


async def gate_p_call(model: ChoiceScorer, request: ModelRequest) -> float:
    """The model's own probability of calling a tool (vs answering) as its reply to ``request``."""
    scores = await model.choice_logprobs(request, (CALL, ANSWER), reply_prefix=REPLY_START)
    return p_first(scores.logprobs[CALL], scores.logprobs[ANSWER])


def p_first(a: float, b: float) -> float:
    """``P(a)`` renormalised over the two log-probabilities ``a`` and ``b``."""
    top = max(a, b)
    if top == -math.inf:
        return 0.5
    ea, eb = math.exp(a - top), math.exp(b - top)
    return ea / (ea + eb)


def _turn_start(request: ModelRequest) -> bool:
    """Whether this is a turn's first reply.

    It is when the newest trajectory message past the harness's own notes (catalogs, memory cards;
    the trailing status is not part of the trajectory) is a user message.
    """
    n = request.stable_prefix_len if request.stable_prefix_len is not None else len(request.messages)
    for m in reversed(request.messages[:n]):
        if m.role == "user" and m.origin is not None and m.origin.kind in ("harness", "status"):
            continue
        return m.role == "user"
    return False


__all__ = ["ToolRelevanceGate", "gate_p_call", "p_first"]
