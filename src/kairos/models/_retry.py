"""Retry with exponential backoff for streaming model calls, shared by the HTTP backends.

The SDKs' own retries are switched off because they cannot see our stream: a retry is only safe
while nothing has reached the consumer yet, otherwise deltas would be shown twice. This module
re-opens the whole stream on transient failures (429, 5xx, timeouts, dropped connections) until
the first event has been yielded, and after that lets errors through. Before each wait it can
yield a notice (see ``RetryWait``), so a user is never left staring at a silent pause.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import TypeVar

from kairos.errors import ModelError, ModelUnavailableError
from kairos.models.types import ModelNotice

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
"""HTTP statuses worth another try: rate limits, overload, gateway and server hiccups."""


@dataclass(frozen=True, slots=True)
class Retry:
    """Verdict for a transient failure: try again after the backoff (or the server's hint)."""

    reason: str
    retry_after_s: float | None = None
    limit: int | None = None
    """At most this many retries for this failure, however many the policy allows (a refused connection: one)."""


@dataclass(frozen=True, slots=True)
class RetryWait:
    """What ``stream_with_retries`` is about to do: wait ``wait_s``, then make attempt ``attempt`` of ``attempts``."""

    reason: str
    wait_s: float
    attempt: int
    attempts: int


Verdict = Retry | ModelError | None
"""``Retry``: transient; ``ModelError``: permanent, raise it; ``None``: not a backend error, re-raise."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait. ``max_retries`` counts retries, so attempts = retries + 1."""

    max_retries: int = 4
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    max_retry_after_s: float = 60.0
    """A server asking for a longer pause is capped here: an agent loop should not hang for hours."""

    @property
    def attempts(self) -> int:
        return max(0, self.max_retries) + 1

    def delay(self, retry_number: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait before retry ``retry_number`` (1-based).

        The server's ``Retry-After`` wins when present (it knows its own rate window); otherwise
        exponential backoff with "equal jitter" so parallel agents do not retry in lockstep.
        """
        if retry_after_s is not None:
            return max(0.0, min(retry_after_s, self.max_retry_after_s))
        base = min(self.backoff_s * 2.0 ** max(0, retry_number - 1), self.max_backoff_s)
        return base / 2 + random.uniform(0, base / 2)


def retry_after_seconds(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Parse ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date); ``None`` if absent or garbled."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


async def stream_with_retries(
    attempt: Callable[[], AsyncGenerator[T, None]],
    *,
    policy: RetryPolicy,
    classify: Callable[[Exception], Verdict],
    give_up: Callable[[int, str], ModelUnavailableError],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    notice: Callable[[RetryWait], T] | None = None,
) -> AsyncIterator[T]:
    """Yield from ``attempt()``, re-opening it on transient errors until something was yielded.

    ``give_up(attempts, last_reason)`` builds the error raised when the retries are spent (or when
    a transient error hits after output has started and a retry would duplicate it). ``notice``,
    if given, makes the event yielded before each wait. Each attempt generator is closed
    deterministically, so cancellation also closes the HTTP stream.
    """
    retry_number = 0
    while True:
        produced = False
        try:
            async with aclosing(attempt()) as events:
                async for event in events:
                    # A notice is no part of the reply: after one, a retry still duplicates nothing.
                    if not isinstance(event, ModelNotice):
                        produced = True
                    yield event
            return
        except Exception as exc:
            verdict = classify(exc)
            if verdict is None:
                raise
            if isinstance(verdict, ModelError):
                raise verdict from exc
            if produced:
                raise give_up(retry_number + 1, f"stream broke after output had started ({verdict.reason})") from exc
            retry_number += 1
            attempts = policy.attempts if verdict.limit is None else min(policy.attempts, verdict.limit + 1)
            if retry_number >= attempts:
                raise give_up(retry_number, verdict.reason) from exc
            wait = RetryWait(
                verdict.reason, policy.delay(retry_number, verdict.retry_after_s), retry_number + 1, attempts
            )
        # Outside the except block: the consumer handles the notice without our exception in flight.
        if notice is not None:
            yield notice(wait)
        await sleep(wait.wait_s)
