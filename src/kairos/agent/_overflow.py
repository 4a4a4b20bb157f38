"""The error for a request over the model's window, with advice that fits what does not fit.

It used to advise turning on compression (on by default) whatever the cause. What helps depends
on what is too big: the fixed part (system prompt and tool schemas) needs a larger window or fewer
tools, and a new session would fail the same way; one huge message needs to become a file the
agent reads page by page; a long history needs a new session or a larger window. In each case the
session keeps what made it too big, so continuing it in the same window fails again: the error
says what would work instead.
"""

from __future__ import annotations

from dataclasses import replace

from kairos.errors import ContextOverflowError
from kairos.models.base import Model
from kairos.models.types import ModelRequest

WIDER = "give the model a larger window ([local] n_ctx, or [remote] context_window for a server, in your settings)"


def overflow_error(
    model: Model, request: ModelRequest, tokens: int, limit: int, *, compressed: bool
) -> ContextOverflowError:
    """The error for ``request`` (``tokens`` prompt tokens) over ``limit``.

    Args:
        model: the agent's model (it counts the parts).
        request: the request as built, after every overflow hook.
        tokens: its prompt tokens.
        limit: the window less the reply's reserve.
        compressed: whether a compression hook already tried to shrink it.
    """
    head = (
        f"the request needs {tokens} prompt tokens but {model.name} allows {limit} "
        f"({model.context_window} window - {request.max_tokens} reserved for the reply)"
    )
    fixed = model.count_tokens(replace(request, messages=(), stable_prefix_len=None))
    last_user = next((m for m in reversed(request.messages) if m.from_user), None)
    message = 0
    if last_user is not None:
        message = model.count_tokens(replace(request, messages=(last_user,), stable_prefix_len=None)) - fixed
    if fixed >= limit:
        advice = (
            f"The system prompt and the {len(request.tools)} tool schemas alone need {fixed}: {WIDER}, or offer "
            "fewer tools ([tools] builtins and toolsets, [runtime] toolsets, MCP servers); a new session would not "
            "fit either."
        )
    elif message > limit - fixed:
        advice = (
            f"Your last message alone needs about {message}: save it to a file in the workspace and, in a new "
            "session, ask the agent to read it (read_file pages through long files). This session keeps the "
            f"message, so it fits again only if you {WIDER}."
        )
    else:
        how = "even after compression" if compressed else "and compression is off ([compression] enabled = true)"
        advice = (
            f"The conversation so far no longer fits, {how}: start a new session (kairos chat without --session), "
            f"or {WIDER} and continue this one."
        )
    return ContextOverflowError(f"{head}. {advice}", prompt_tokens=tokens, limit=limit)
