"""Helpers for the compression tests: tools with big outputs, an agent factory, counters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kairos.agent import Agent
from kairos.agent.events import AgentEvent
from kairos.context.builder import NoStatus
from kairos.context.compression import CompressionConfig, CompressionEvent
from kairos.context.compression.config import NoiseConfig, SpillConfig
from kairos.context.session import Session
from kairos.models.types import ModelRequest, SystemPrompt
from kairos.plugins.compression import CompressionPlugin
from kairos.testing import ScriptedModel
from kairos.tools.base import Tool
from kairos.tools.builtins import read_file
from kairos.tools.function import tool


def page(tag: str, chars: int = 3000) -> str:
    """A deterministic multi-line text of about ``chars`` characters."""
    lines = [f"{tag} line {i}: " + f"fact {i} about {tag}. " * 3 for i in range(chars // 60 + 1)]
    return "\n".join(lines)[:chars]


@tool(max_output_chars=200_000)
def fetch(tag: str, chars: int = 3000) -> str:
    """Return a long page about ``tag``.

    Args:
        tag: what the page is about
        chars: its length
    """
    return page(tag, chars)


@tool
def note(text: str) -> str:
    """Return the text (a small result)."""
    return text


@dataclass
class CountingModel(ScriptedModel):
    """A scripted model whose token count the test sets (``forced``), for exact threshold tests."""

    forced: int | None = None

    def count_tokens(self, request: ModelRequest) -> int:
        return self.forced if self.forced is not None else super().count_tokens(request)


def config(**kw: Any) -> CompressionConfig:
    """Layer 5 only unless a test turns other layers on."""
    base: dict[str, Any] = {
        "strategy": "windowed",
        "min_chars": 500,
        "keep_originals": False,
        "spill": SpillConfig(enabled=False),
        "noise": NoiseConfig(enabled=False),
    }
    base.update(kw)
    return CompressionConfig(**base)


def make_agent(
    model: ScriptedModel,
    cfg: CompressionConfig,
    *,
    summarizer: ScriptedModel | None = None,
    tools: Sequence[Tool] = (fetch, note, read_file),
    events: list[CompressionEvent] | None = None,
    **kw: Any,
) -> tuple[Agent, CompressionPlugin]:
    ext = CompressionPlugin(cfg, summarizer=summarizer, listeners=[events.append] if events is not None else [])
    agent = Agent(
        model,
        tools=list(tools),
        system=SystemPrompt("You are a test agent.", "Deployment: tests."),
        status=NoStatus(),
        max_tokens=kw.pop("max_tokens", 256),
        plugins=[ext],
        **kw,
    )
    return agent, ext


async def collect(agent: Agent, session: Session, text: str) -> list[AgentEvent]:
    return [e async for e in agent.run(session, text)]
