"""One model call raced against the session's inbox: what may cut a reply short, and when."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from kairos.context.inbox import Inbox, InboxEvent, UserInput
from kairos.models.base import Model
from kairos.models.types import ModelRequest, StreamEvent

_END = object()
"""The model's stream ended."""
_PREEMPT = object()
"""A preempting event arrived while the model streamed."""
_JOIN = object()
"""The user's input arrived while the model streamed (it preempts only before the reply's first token)."""
_REPLY_TYPES = frozenset({"text", "reasoning", "tool_call"})
"""Stream events that are part of the reply (not a notice or progress)."""


class Preempted(Exception):
    """A preempting event arrived while the model streamed or tools ran."""


async def stream_model(
    model: Model, inbox: Inbox, request: ModelRequest, *, join_input: bool
) -> AsyncGenerator[StreamEvent, None]:
    """The model's events, raced against a preempting event so even a stalled prefill can be stopped.

    One task reads the model's stream into a queue, and a preempting event puts a marker into the
    same queue; the loop reads the queue. That is one task per model call, not a task and a wait
    per delta.

    ``join_input``: until the reply's first token, the user's input preempts too. Nothing of the
    reply exists yet, so nothing is lost: the request starts again with the input (a local model
    keeps the prompt it has read), instead of the input waiting out a long prompt read.

    Raises:
        Preempted: see above; the stream is closed.
    """
    queue: asyncio.Queue[StreamEvent | BaseException | object] = asyncio.Queue()

    async def pump() -> None:
        events = model.stream(request)
        try:
            async for event in events:
                queue.put_nowait(event)
            queue.put_nowait(_END)
        except Exception as e:  # the consumer raises it where the old loop did
            queue.put_nowait(e)
        finally:  # also on cancel: closing the stream frees the connection or the llama.cpp slot
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    reader = asyncio.create_task(pump(), name="model-stream")
    unwatch = inbox.watch_preempt(lambda: queue.put_nowait(_PREEMPT))
    unjoin = inbox.watch(_typed, lambda: queue.put_nowait(_JOIN)) if join_input else _nothing
    replying = False
    try:
        while True:
            item = await queue.get()
            if item is _END:
                return
            if item is _PREEMPT or (item is _JOIN and not replying):
                raise Preempted
            if item is _JOIN:
                continue
            if isinstance(item, BaseException):
                raise item
            if not replying and getattr(item, "type", "") in _REPLY_TYPES:
                replying = True
                unjoin()
            yield item  # type: ignore[misc]  # the queue holds stream events besides the markers
    finally:
        unwatch()
        unjoin()
        if not reader.done():  # normally it is: it ended with the stream (skipping saves a loop step)
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


def _typed(event: InboxEvent) -> bool:
    return isinstance(event, UserInput)


def _nothing() -> None:
    pass
