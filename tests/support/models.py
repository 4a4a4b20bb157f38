"""Model doubles beyond :class:`kairos.testing.ScriptedModel` that several test folders share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from kairos.models.types import ModelRequest, StreamEvent
from kairos.testing import ScriptedModel


@dataclass
class ReadsItsPrompt(ScriptedModel):
    """The first request never gets past reading its prompt (a long prefill) until it is stopped.

    ``reading`` is set once it has started; later requests follow the script.
    """

    reading: asyncio.Event = field(default_factory=asyncio.Event)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stall the first request forever; replay the script for the others."""
        if not self.requests:
            self.requests.append(request)
            self.reading.set()
            await asyncio.Event().wait()
        async for event in super().stream(request):
            yield event


@dataclass
class Gated(ScriptedModel):
    """Every request waits for ``gate`` before its first token (a slow model), after setting ``started``."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Wait at the gate, then replay the script."""
        self.started.set()
        await self.gate.wait()
        async for event in super().stream(request):
            yield event
