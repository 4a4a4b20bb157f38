"""The next request, fitted into the model's window: the ``on_overflow`` hooks, else a clear error.

A request over the window is never sent: the plugins that compress get their chance first, and a
request still too big fails with advice that fits what does not fit (:mod:`kairos.agent._overflow`).
"""

from __future__ import annotations

from kairos.agent._overflow import overflow_error
from kairos.agent._state import RunState
from kairos.models.types import ModelRequest


async def build_within_budget(st: RunState) -> tuple[ModelRequest, int]:
    """The request and its prompt tokens, within the model's window.

    Raises:
        ContextOverflowError: the request does not fit, even after every ``on_overflow`` hook.
    """
    pipeline = st.agent.pipeline
    request = st.build()
    model = st.agent.model
    limit = model.context_window - request.max_tokens
    tokens = model.count_tokens(request)
    if tokens > limit:
        request, tokens, errors = await pipeline.on_overflow(st, request, tokens, limit, model.count_tokens)
        for p, e in zip(pipeline.hooked["on_overflow"], errors, strict=False):
            pipeline.failed(p, "on_overflow", e, st.report)
    if tokens > limit:
        compressed = bool(pipeline.hooked["on_overflow"])
        raise overflow_error(model, request, tokens, limit, compressed=compressed)
    return request, tokens
