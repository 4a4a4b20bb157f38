"""Test doubles and checks for harness tests.

:class:`ScriptedModel` replays responses and records every request; :func:`trajectory_problems`
lists how a stored trajectory breaks the tool-call protocol.

For deterministic harness tests only; the product and its benchmarks use real models.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kairos.errors import ModelUnavailableError
from kairos.models.base import TokenEstimator, estimate_request_tokens
from kairos.models.types import (
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    ReasoningPolicy,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from kairos.testing.validate import trajectory_problems

_ids = itertools.count(1)


def call(name: str, arguments: dict[str, Any] | str | None = None, *, id: str | None = None) -> ToolCall:
    """A tool call for a script; ``arguments`` may be a raw (even malformed) JSON string."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolCall(id or f"call_{next(_ids)}", name, args)


def reply(text: str = "", *calls: ToolCall, reasoning: str | None = None, finish_reason: str = "stop") -> ModelResponse:
    """A scripted assistant turn."""
    return ModelResponse(Message.assistant(text, tuple(calls), reasoning=reasoning), finish_reason=finish_reason)


Step = ModelResponse | BaseException | Callable[[ModelRequest], ModelResponse]


@dataclass
class ScriptedModel:
    """Replays ``script``, one step per request; ``requests`` records everything the harness sent.

    A step may be a response, an exception to raise, or a function of the request.

    ``delay_s`` sleeps before the first delta (to test interruption while the model "thinks");
    ``chunk`` splits text into deltas of that many characters.
    """

    script: list[Step] = field(default_factory=list)
    name: str = "scripted"
    context_window: int = 32_768
    reasoning_policy: ReasoningPolicy = ReasoningPolicy.KEEP_ALL
    delay_s: float = 0.0
    chunk: int = 0
    requests: list[ModelRequest] = field(default_factory=list)
    _estimate: TokenEstimator = field(default_factory=TokenEstimator, repr=False)

    def extend(self, steps: Iterable[Step]) -> None:
        """Append steps to the script (for the next run on the same model)."""
        self.script.extend(steps)

    def count_tokens(self, request: ModelRequest) -> int:
        """The same estimate remote backends use (no tokenizer)."""
        return self._estimate(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Record ``request`` and replay the next step as deltas and a ``ResponseDone``.

        Raises:
            ModelUnavailableError: the script has no steps left.
            BaseException: the step itself, when the step is an exception.
        """
        self.requests.append(request)
        if not self.script:
            raise ModelUnavailableError("scripted model has no steps left", model=self.name)
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        response = step(request) if callable(step) else step
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        msg = response.message
        if msg.reasoning:
            yield ReasoningDelta(msg.reasoning)
        if msg.content:
            size = self.chunk or len(msg.content)
            for i in range(0, len(msg.content), size):
                yield TextDelta(msg.content[i : i + size])
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
        for i, c in enumerate(msg.tool_calls):
            yield ToolCallDelta(i, c.id, c.name, c.arguments)
        prompt = estimate_request_tokens(request)
        usage = response.usage if response.usage.prompt_tokens else Usage(prompt_tokens=prompt, ttft_s=0.0)
        yield ResponseDone(ModelResponse(msg, usage, response.finish_reason))


__all__ = ["ScriptedModel", "call", "reply", "trajectory_problems"]
