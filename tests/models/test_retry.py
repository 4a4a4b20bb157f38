"""The retry helper shared by the HTTP backends: Retry-After, backoff, no replay, notices."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from kairos.errors import ModelUnavailableError
from kairos.models._retry import Retry, RetryPolicy, RetryWait, retry_after_seconds, stream_with_retries
from kairos.models.types import ModelNotice, StreamEvent, TextDelta


def test_retry_after_parsing() -> None:
    assert retry_after_seconds({"Retry-After": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert retry_after_seconds({"Retry-After": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(max_retries=10, backoff_s=1.0, max_backoff_s=8.0, max_retry_after_s=5.0)
    assert policy.attempts == 11
    assert 0.5 <= policy.delay(1) <= 1.0
    assert 2.0 <= policy.delay(3) <= 4.0
    assert 4.0 <= policy.delay(10) <= 8.0
    assert policy.delay(1, retry_after_s=3600) == 5.0
    assert policy.delay(1, retry_after_s=0.5) == 0.5


async def test_retry_helper_never_replays_after_a_yield() -> None:
    calls = 0

    async def attempt() -> AsyncGenerator[int, None]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("boom")
        yield 1
        raise ConnectionError("late boom")

    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    out: list[int] = []
    with pytest.raises(ModelUnavailableError, match="late boom"):
        async for item in stream_with_retries(
            attempt,
            policy=RetryPolicy(max_retries=5, backoff_s=0.01),
            classify=lambda exc: Retry(str(exc)) if isinstance(exc, ConnectionError) else None,
            give_up=lambda n, reason: ModelUnavailableError(reason, attempts=n),
            sleep=fake_sleep,
        ):
            out.append(item)
    assert out == [1] and calls == 2 and len(sleeps) == 1


async def test_a_notice_is_not_output_so_a_retry_stays_allowed() -> None:
    calls = 0

    async def attempt() -> AsyncGenerator[StreamEvent, None]:
        nonlocal calls
        calls += 1
        if calls == 1:
            yield ModelNotice("falling back to a smaller model")
            raise ConnectionError("boom")
        yield TextDelta("ok")

    async def no_sleep(seconds: float) -> None:
        pass

    def notice(wait: RetryWait) -> StreamEvent:
        return ModelNotice(f"{wait.reason}: attempt {wait.attempt} of {wait.attempts}", wait.wait_s)

    out = [
        e
        async for e in stream_with_retries(
            attempt,
            policy=RetryPolicy(max_retries=2, backoff_s=0.0),
            classify=lambda exc: Retry(str(exc)) if isinstance(exc, ConnectionError) else None,
            give_up=lambda n, reason: ModelUnavailableError(reason, attempts=n),
            sleep=no_sleep,
            notice=notice,
        )
    ]
    assert out == [
        ModelNotice("falling back to a smaller model"),
        ModelNotice("boom: attempt 2 of 3", 0.0),
        TextDelta("ok"),
    ]


async def test_the_notice_comes_before_the_wait() -> None:
    log: list[str] = []
    calls = 0

    async def attempt() -> AsyncGenerator[StreamEvent, None]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("reset")
        yield TextDelta("ok")

    async def sleep(seconds: float) -> None:
        log.append(f"sleep {seconds:g}")

    stream = stream_with_retries(
        attempt,
        policy=RetryPolicy(max_retries=1),
        classify=lambda exc: Retry(str(exc), retry_after_s=3),
        give_up=lambda n, reason: ModelUnavailableError(reason, attempts=n),
        sleep=sleep,
        notice=lambda wait: ModelNotice(f"{wait.reason}: {wait.attempt}/{wait.attempts}", wait.wait_s),
    )
    async for event in stream:
        log.append(f"{event.type} {getattr(event, 'text', '')}")
    assert log == ["notice reset: 2/2", "sleep 3", "text ok"]
