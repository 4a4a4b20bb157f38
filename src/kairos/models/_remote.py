"""What the two HTTP backends (OpenAI-compatible, Anthropic) share.

``RemoteModel`` owns the client lifecycle, the token estimate, the retry loop around one streamed
attempt and the common error verdicts; a backend supplies the request (``_prepare``), one attempt
(``_attempt``) and its own error wording. ``ReplyParts`` accumulates one streamed reply,
including tool calls that a server left in the reply text (``kairos.models._text_tools``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Literal, Self, TypeAlias, TypeVar

from kairos.errors import ModelError, ModelUnavailableError
from kairos.models._retry import (
    RETRYABLE_STATUS,
    Retry,
    RetryPolicy,
    RetryWait,
    Verdict,
    retry_after_seconds,
    stream_with_retries,
)
from kairos.models._text_tools import TextToolCall, TextToolScanner
from kairos.models.base import TokenEstimator
from kairos.models.types import (
    Message,
    ModelDelta,
    ModelNotice,
    ModelRequest,
    ReasoningDelta,
    ReasoningPolicy,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
)

P = TypeVar("P")
TextToolCalls: TypeAlias = Literal["auto", "off"]

MAX_BACKOFF_S = 30.0
"""Exponential backoff stops growing here (``max_retry_wait_s`` may cap it lower)."""
REFUSED_RETRY_S = 0.5
"""The wait before the one retry of a refused connection: a server that was restarting is up by then."""


class IncompleteStreamError(Exception):
    """The server ended the stream before saying the reply was complete (a cut connection).

    Such a reply may lack its end, or a tool call its last arguments, so it is never used: it is
    retried like a dropped connection while nothing has been yielded, and fails otherwise.
    """


class RemoteModel(ABC, Generic[P]):
    """Base of the HTTP backends; ``P`` is what ``_prepare`` builds once per ``stream`` call.

    Subclasses set ``_client`` (an SDK client with ``async close()``) and ``_sdk`` (the SDK
    module: both SDKs name their errors ``APITimeoutError``, ``APIConnectionError`` and
    ``APIStatusError``).
    """

    _client: Any
    _sdk: Any

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        context_window: int,
        reasoning_policy: ReasoningPolicy,
        timeout_s: float,
        max_retries: int,
        backoff_s: float,
        max_retry_wait_s: float,
        text_tool_calls: TextToolCalls,
        sleep: Callable[[float], Awaitable[None]] | None,
    ) -> None:
        if text_tool_calls not in ("auto", "off"):
            raise ValueError(f"text_tool_calls must be 'auto' or 'off', not {text_tool_calls!r}")
        self.name = model
        self.context_window = context_window
        self.reasoning_policy = ReasoningPolicy(reasoning_policy)
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.text_tool_calls: TextToolCalls = text_tool_calls
        self.retry_policy = RetryPolicy(
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_backoff_s=min(MAX_BACKOFF_S, max_retry_wait_s),
            max_retry_after_s=max_retry_wait_s,
        )
        # Looked up per wait, not bound here, so tests may patch asyncio.sleep.
        self._sleep = sleep
        self._estimate = TokenEstimator()  # memoised estimate_request_tokens

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, base_url={self.base_url!r})"

    async def aclose(self) -> None:
        """Close the HTTP connection pool (open sockets would otherwise leak until GC)."""
        await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def count_tokens(self, request: ModelRequest) -> int:
        """An estimate: remote servers expose no tokenizer we could call without a round trip."""
        return self._estimate(request)

    # ---- streaming -----------------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one reply; retried transparently until the first delta is out.

        Before each retry wait a ``ModelNotice`` says why and for how long. ``ttft_s`` and
        ``total_s`` count from this call, waits included: what the user waits.
        """
        started = time.monotonic()
        prepared = self._prepare(request)

        def attempt() -> AsyncGenerator[StreamEvent, None]:
            return self._attempt(request, prepared, started)

        async for event in stream_with_retries(
            attempt,
            policy=self.retry_policy,
            classify=self._classify,
            give_up=self._give_up,
            sleep=self._sleep or asyncio.sleep,
            notice=self._notice,
        ):
            yield event

    @abstractmethod
    def _prepare(self, request: ModelRequest) -> P:
        """The request parameters, built once and sent unchanged by every attempt."""

    @abstractmethod
    def _attempt(self, request: ModelRequest, prepared: P, started: float) -> AsyncGenerator[StreamEvent, None]:
        """One HTTP attempt: deltas, then ``ResponseDone``; raises ``IncompleteStreamError`` on a cut stream."""

    def _text_scanner(self, request: ModelRequest) -> TextToolScanner | None:
        """A scanner for tool calls written as text, when enabled and the request offers tools."""
        if self.text_tool_calls == "off" or not request.tools:
            return None
        return TextToolScanner(t.name for t in request.tools)

    # ---- errors --------------------------------------------------------------------------

    def _classify(self, exc: Exception) -> Verdict:
        sdk = self._sdk
        if isinstance(exc, IncompleteStreamError):
            return Retry(str(exc))
        if isinstance(exc, sdk.APITimeoutError):
            return Retry(f"timed out after {self.timeout_s:g}s")
        if isinstance(exc, sdk.APIConnectionError):
            if _refused(exc):  # no server at that address: one quick retry (a restart), then say so
                return Retry(f"nothing listens at {self.base_url} (connection refused)", REFUSED_RETRY_S, limit=1)
            return Retry(f"connection failed ({exc.__cause__ or exc})")
        if _is_transport_error(exc):
            return Retry(f"connection broke ({type(exc).__name__}: {exc})")
        if isinstance(exc, sdk.APIStatusError):
            status = int(exc.status_code)
            reason = f"HTTP {status}{self._status_detail(exc)}"
            if status in RETRYABLE_STATUS or status >= 500 or self._is_transient(exc):
                return Retry(reason, retry_after_seconds(exc.response.headers))
            return self._rejected(exc, status)
        return self._classify_other(exc)

    def _status_detail(self, exc: Any) -> str:
        """What follows ``HTTP 429`` in a reason: the server's message."""
        return f": {exc}"

    def _is_transient(self, exc: Any) -> bool:
        """A status error worth retrying although its status is not in ``RETRYABLE_STATUS``."""
        return False

    @abstractmethod
    def _rejected(self, exc: Any, status: int) -> ModelError:
        """The permanent error for a status the server will answer the same way again."""

    def _classify_other(self, exc: Exception) -> Verdict:
        """Errors the common verdicts do not know; ``None`` re-raises them unchanged."""
        return None

    def _unavailable_hint(self) -> str:
        return "Check that the server is running and reachable at that URL and your rate limits"

    def _give_up(self, attempts: int, reason: str) -> ModelUnavailableError:
        more = " (or raise max_retries)" if attempts >= self.retry_policy.attempts else ""  # else more would not help
        return ModelUnavailableError(
            f"model {self.name!r} at {self.base_url} is unavailable after {attempts} attempt(s); "
            f"last error: {reason}. {self._unavailable_hint()}{more}.",
            model=self.name,
            attempts=attempts,
        )

    def _notice(self, wait: RetryWait) -> ModelNotice:
        return ModelNotice(
            f"{wait.reason} from {self.name} at {self.base_url}: retrying in {format_wait(wait.wait_s)} "
            f"(attempt {wait.attempt} of {wait.attempts})",
            wait_s=wait.wait_s,
        )


def format_wait(seconds: float) -> str:
    """``60 s``, ``1.5 s``, ``0.25 s``: whole seconds once the wait is long enough to matter."""
    if seconds >= 10:
        return f"{seconds:.0f} s"
    return f"{seconds:.2g} s"


def _refused(exc: BaseException) -> bool:
    """Whether a connection error was a refused connection (the SDKs wrap it a few levels deep)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ConnectionRefusedError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _is_transport_error(exc: Exception) -> bool:
    # A connection cut mid-body can surface as the HTTP library's own error, unwrapped by the
    # SDK (Anthropic's stream does not wrap it). Matched by name: the SDKs ship httpx or httpx2.
    return any(
        cls.__name__ == "TransportError" and cls.__module__.split(".")[0] in ("httpx", "httpx2")
        for cls in type(exc).__mro__
    )


def fresh_call_id() -> str:
    """A tool-call id for a call the server did not name (``call_`` and 24 hex digits)."""
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(slots=True)
class CallParts:
    """One tool call as it is assembled from fragments."""

    id: str | None = None
    name: str | None = None
    arguments: str = ""
    initial: str = ""
    """Arguments the server sent whole at the start (Anthropic's ``input``), used when no fragment follows."""


class ReplyParts:
    """The text, reasoning and tool calls of one streamed reply, as they arrive.

    Text goes through a ``TextToolScanner`` when one is given: text that may open a tool call
    written as text is held back until it is known, and such a call becomes a ``ToolCallDelta``
    instead of text. A tool call from the server itself stops the scanning (it is then not needed).
    """

    def __init__(self, started: float, scanner: TextToolScanner | None = None) -> None:
        self.started = started
        self.first_delta_at: float | None = None
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[CallParts] = []
        self.text_calls = 0
        """How many of ``calls`` were found in the text."""
        self._scanner = scanner

    def mark(self, out: list[ModelDelta]) -> list[ModelDelta]:
        """Note the time of the first delta; returns ``out``."""
        if out and self.first_delta_at is None:
            self.first_delta_at = time.monotonic()
        return out

    def add_text(self, text: str) -> list[ModelDelta]:
        if not text:
            return []
        if self._scanner is None:
            self.text.append(text)
            return [TextDelta(text)]
        return self._pieces(self._scanner.feed(text))

    def add_reasoning(self, text: str) -> list[ModelDelta]:
        if not text:
            return []
        self.reasoning.append(text)
        return [ReasoningDelta(text)]

    def new_call(self, call_id: str | None = None, name: str | None = None, initial: str = "") -> list[ModelDelta]:
        """Start a call the server sent; held-back text goes out first, in order."""
        out = self.end_text()
        self.calls.append(CallParts(call_id, name, initial=initial))
        return out

    def end_text(self) -> list[ModelDelta]:
        """Release what the scanner holds (the reply's text is over) and stop scanning."""
        if self._scanner is None:
            return []
        scanner, self._scanner = self._scanner, None
        return self._pieces(scanner.finish())

    def _pieces(self, pieces: list[str | TextToolCall]) -> list[ModelDelta]:
        out: list[ModelDelta] = []
        for piece in pieces:
            if isinstance(piece, str):
                self.text.append(piece)
                out.append(TextDelta(piece))
                continue
            call = CallParts(fresh_call_id(), piece.name, piece.arguments)
            self.calls.append(call)
            self.text_calls += 1
            out.append(ToolCallDelta(len(self.calls) - 1, call.id, call.name, call.arguments))
        return out

    def message(self, empty_arguments: str = "") -> Message:
        """The assistant message; a call without any arguments text gets ``empty_arguments``."""
        calls = tuple(
            ToolCall(c.id or fresh_call_id(), c.name or "", c.arguments or c.initial or empty_arguments)
            for c in self.calls
        )
        return Message.assistant("".join(self.text), calls, reasoning="".join(self.reasoning) or None)

    def ttft(self) -> float | None:
        return None if self.first_delta_at is None else self.first_delta_at - self.started

    def finish_reason(self, server_reason: str | None) -> str:
        """The server's reason, but ``tool_calls`` when calls were found in a reply it called finished."""
        if self.text_calls and server_reason in (None, "stop"):
            return "tool_calls"
        return server_reason or ("tool_calls" if self.calls else "stop")
