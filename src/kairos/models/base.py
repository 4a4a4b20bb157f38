"""The one contract every model backend implements.

Error tree (all carry data in fields, see ``kairos.errors``):
``ModelError`` -> ``ModelUnavailableError`` (unreachable after retries), ``ModelOutputError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from kairos.models.types import (
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningPolicy,
    ResponseDone,
    StreamEvent,
    ToolSpec,
    Usage,
    estimate_messages_tokens,
)
from kairos.models.types import estimate_tokens as estimate_tokens  # re-exported: its long-standing home


@runtime_checkable
class Model(Protocol):
    """A chat model with tool calling.

    ``stream`` yields deltas and ends with exactly one ``ResponseDone``. Cancelling the consuming
    task must stop generation promptly.
    """

    name: str
    context_window: int
    reasoning_policy: ReasoningPolicy

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Deltas of the reply to ``request``, ending with exactly one ``ResponseDone``.

        Raises:
            ModelError: the backend failed (``ModelUnavailableError`` when it could not be
                reached after the last retry); a cut stream is an error too, never a reply.
            ContextOverflowError: ``request`` does not fit the model's window.
        """
        ...

    def count_tokens(self, request: ModelRequest) -> int:
        """Prompt tokens of ``request``: exact where the backend has a tokenizer, else an estimate."""
        ...


@dataclass(frozen=True, slots=True)
class ChoiceLogprobs:
    """Log-probabilities of the first token of each choice as the reply's first token, and what it cost.

    ``logprobs`` maps every choice asked for to ``log P``; ``-inf`` where the backend gives it no mass.
    """

    logprobs: Mapping[str, float]
    usage: Usage = field(default_factory=Usage)


@runtime_checkable
class ChoiceScorer(Protocol):
    """A model that can score fixed answers without generating (one prompt evaluation, no decoding).

    Why: a yes/no judgement read from the next-token distribution costs one forward pass over the
    prompt's new tokens and gives a graded score, where generating an answer costs ~20 decoded
    tokens and gives only yes or no. Backends implement it where they can read logits.
    """

    async def choice_logprobs(
        self, request: ModelRequest, choices: Sequence[str], *, reply_prefix: str | None = None
    ) -> ChoiceLogprobs:
        """``log P(first token of choice)`` for the reply to ``request``, case and leading-space variants summed.

        Without ``reply_prefix`` the request must carry no tools: the reply is plain text. With it,
        the request is rendered as for generation (tools and reply format) and the choices are scored
        right after ``reply_prefix`` (the model's own branch point, e.g. call a tool or answer).

        Raises:
            ValueError: no choices, an empty choice, two choices that start with the same token, or tools.
            ModelError: the backend failed.
            ContextOverflowError: ``request`` does not fit the model's window.
        """
        ...


async def complete(model: Model, request: ModelRequest) -> ModelResponse:
    """Drain ``model.stream`` and return the final response.

    Raises:
        RuntimeError: the stream ended without a ``ResponseDone``.
    """
    final: ModelResponse | None = None
    async for event in model.stream(request):
        if isinstance(event, ResponseDone):
            final = event.response
    if final is None:
        raise RuntimeError(f"model {model.name!r} ended its stream without a response")
    return final


async def try_complete(model: Model, request: ModelRequest, timeout_s: float) -> tuple[ModelResponse | None, str]:
    """:func:`complete` within ``timeout_s``: the response and "", or None and why it failed.

    For the calls a harness goes on without (extraction, triage, a reviewer, summaries): a model that
    is down, late or broken must never lose or block the work around it; the caller says what that means.
    Cancellation is not caught.
    """
    try:
        async with asyncio.timeout(timeout_s):
            return await complete(model, request), ""
    except TimeoutError:
        return None, f"no answer within {timeout_s:g} s"
    except Exception as e:
        return None, f"{type(e).__name__}: {str(e)[:200]}" if str(e) else type(e).__name__


def estimate_message_tokens(m: Message) -> int:
    """Estimated tokens of one message: content, tool-call arguments and per-message overhead."""
    return m.estimated_tokens()


def estimate_request_tokens(request: ModelRequest) -> int:
    """Estimate for backends without a local tokenizer; per-message overhead included."""
    head = estimate_tokens(request.system) + sum(estimate_tokens(t.serialized()) for t in request.tools)
    return head + sum(map(estimate_message_tokens, request.messages))


class TokenEstimator:
    """``estimate_request_tokens`` with the head (system, tools) kept and per-message counts cached.

    Each message keeps its own count (:meth:`Message.estimated_tokens`), so a model shared by many
    sessions whose requests interleave does not count their whole trajectories again per request.
    """

    def __init__(self) -> None:
        self._head: tuple[str, tuple[ToolSpec, ...], int] | None = None

    def __call__(self, request: ModelRequest) -> int:
        """Estimated prompt tokens of ``request``."""
        head_of = self._head
        if (
            head_of is None
            or head_of[0] != request.system
            or not (head_of[1] is request.tools or head_of[1] == request.tools)
        ):
            head = estimate_tokens(request.system) + sum(estimate_tokens(t.serialized()) for t in request.tools)
            head_of = self._head = (request.system, request.tools, head)
        return head_of[2] + estimate_messages_tokens(request.messages)
