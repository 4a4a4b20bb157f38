"""Small tools the agent-loop and executor tests share: one that answers, echoes, fails and times out."""

from __future__ import annotations

import asyncio

from kairos.tools.function import tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@tool
def explode(reason: str) -> str:
    """Always fails (for tests)."""
    raise ValueError(f"boom: {reason}")


@tool(timeout_s=0.05)
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "done"
