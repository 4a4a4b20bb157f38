"""try_complete: the model calls a harness goes on without say why they failed, and never swallow a cancel."""

from __future__ import annotations

import asyncio

import pytest

from kairos.models.base import try_complete
from kairos.models.types import Message, ModelRequest
from kairos.testing import ScriptedModel, reply

REQUEST = ModelRequest("s", "", (), (Message.user("hi"),))


async def test_the_response_or_why_it_failed() -> None:
    response, why = await try_complete(ScriptedModel([reply("ok")]), REQUEST, 5)
    assert response is not None and response.message.content == "ok" and why == ""
    assert await try_complete(ScriptedModel([ValueError("bad key")]), REQUEST, 5) == (None, "ValueError: bad key")
    assert await try_complete(ScriptedModel([RuntimeError()]), REQUEST, 5) == (None, "RuntimeError")
    slow = ScriptedModel([reply("late")], delay_s=5)
    assert await try_complete(slow, REQUEST, 0.05) == (None, "no answer within 0.05 s")


async def test_a_cancel_is_not_taken_for_a_failure() -> None:
    task = asyncio.create_task(try_complete(ScriptedModel([reply("late")], delay_s=5), REQUEST, 10))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
