"""Context compression in five layers (book ch2 §3.11–3.13, Exp 2-10).

1. spill (``spill``): large tool outputs go to a file in the workspace; a frozen preview stays;
2. noise (``noise``): duplicates, superseded reads and retried errors become short pointers;
3. provider editing (``provider``): server-side clearing of old tool results, near overflow only;
4. round archive (``archive``): a git-log style entry per completed round;
5. LLM compression (``strategies``, ``llm``): the six Exp 2-10 strategies, ``[COMPRESSED]``
   markers, an 80 % trigger, task-aware prompts with optional citations, a circuit breaker.

Every decision is frozen in the session and applied by a deterministic view; the stored
trajectory is never rewritten and only tool results are ever replaced. Plug it in with
``Agent(..., plugins=[CompressionPlugin(config)])`` (:mod:`kairos.plugins.compression`).
"""

from __future__ import annotations

from kairos.context.compression.archive import round_log
from kairos.context.compression.config import STRATEGIES, CompressionConfig, NoiseConfig, SpillConfig, Strategy
from kairos.context.compression.ledger import COMPRESSED, CompressionEvent, SessionCompression, state_of
from kairos.context.compression.llm import Summarizer, SummaryError
from kairos.context.compression.provider import (
    ClearToolUses,
    ContextEditingBackend,
    ContextEditor,
    ProviderContextEditing,
)
from kairos.context.compression.strategies import SPECS, StrategySpec
from kairos.context.compression.view import CompressionView

__all__ = [
    "COMPRESSED",
    "SPECS",
    "STRATEGIES",
    "ClearToolUses",
    "CompressionConfig",
    "CompressionEvent",
    "CompressionView",
    "ContextEditingBackend",
    "ContextEditor",
    "NoiseConfig",
    "ProviderContextEditing",
    "SessionCompression",
    "SpillConfig",
    "Strategy",
    "StrategySpec",
    "Summarizer",
    "SummaryError",
    "round_log",
    "state_of",
]
