"""A clock tests move by hand, for components that take ``now`` and ``sleep`` (timers)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta


class ManualClock:
    """A clock tests move by hand: ``now`` stands still until :meth:`advance`; ``sleep`` waits for it."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        """The current (manual) time."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Until the clock is advanced ``seconds`` past the time of the call."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        entry = (self._now + timedelta(seconds=seconds), asyncio.get_running_loop().create_future())
        self._sleepers.append(entry)
        try:
            await entry[1]
        finally:
            with contextlib.suppress(ValueError):
                self._sleepers.remove(entry)

    def advance(self, seconds: float) -> None:
        """Move time forward and wake the sleepers whose time has come."""
        self._now += timedelta(seconds=seconds)
        for when, fut in list(self._sleepers):
            if when <= self._now and not fut.done():
                fut.set_result(None)


__all__ = ["ManualClock"]
