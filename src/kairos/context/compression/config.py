"""Settings of the five compression layers (``[compression]`` in ``kairos.toml``).

Defaults are for a real session: spill large outputs, drop noise, log rounds, and run the
``windowed`` LLM compression only when the prompt passes 80 % of the usable window, so the
prompt cache is broken rarely and only in one batch.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

Strategy: TypeAlias = Literal["none", "per_result", "merged", "task_aware", "task_aware_citations", "windowed"]
"""The six strategies of book Exp 2-10 (see ``strategies.SPECS`` for what each one does)."""

STRATEGIES: tuple[Strategy, ...] = ("none", "per_result", "merged", "task_aware", "task_aware_citations", "windowed")


class SpillConfig(BaseModel):
    """Layer 1: tool outputs over ``max_chars`` go to a file; the context keeps a preview."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    max_chars: int = Field(6000, ge=200, description="outputs longer than this are spilled to a file")
    head_lines: int = Field(20, ge=0, description="lines from the start shown in the preview")
    tail_lines: int = Field(10, ge=0, description="lines from the end shown in the preview")
    preview_chars: int = Field(2000, ge=100, description="upper bound of the preview's head + tail text")
    dir: str | None = Field(
        None,
        description="spill folder relative to the workspace; default: <state dir>/spill when the state dir is "
        "inside the workspace, else <workspace>/.kairos/spill (read_file can only reach the workspace)",
    )


class NoiseConfig(BaseModel):
    """Layer 2: deterministic removal of low-value results, never summarised."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    duplicates: bool = Field(True, description="a result identical to an earlier one becomes a pointer to it")
    superseded_reads: bool = Field(True, description="a read_file result re-read later becomes a pointer")
    retried_errors: bool = Field(True, description="an error followed by a success of the same tool shrinks")
    min_chars: int = Field(200, ge=0, description="results shorter than this are never touched")
    at_ratio: float = Field(
        0.6,
        ge=0.0,
        le=1.0,
        description="superseded reads and retried errors edit the past (a cache break), so they are applied in "
        "one batch once the prompt passes this share of the usable window; duplicates are replaced at first "
        "sight, which costs no cache",
    )


class CompressionConfig(BaseModel):
    """Every compression setting with its default; unknown keys are an error."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    strategy: Strategy = Field("windowed", description="layer 5 strategy (book Exp 2-10)")
    trigger_ratio: float = Field(
        0.8,
        gt=0.0,
        le=1.0,
        description="layer 5 fires when the built prompt needs more than this share of the usable window "
        "(context window minus the tokens reserved for the reply)",
    )
    citations: bool = Field(False, description="task-aware summaries keep a [source: ...] on every fact")
    min_chars: int = Field(1000, ge=0, description="results shorter than this are never LLM-compressed")
    summarizer: str | None = Field(None, description="model spec for summaries; default: the agent's own model")
    summary_max_tokens: int = Field(300, ge=16, description="reply budget of one summariser call")
    context_chars: int = Field(1500, ge=0, description="how much already-compressed context the summariser sees")
    focus_chars: int = Field(
        2000,
        ge=0,
        description="task-aware summaries read only the paragraphs of a result most about the task, up to this "
        "many chars (ranked by the task's rare words; 0 reads everything)",
    )
    max_failures: int = Field(3, ge=1, description="circuit breaker: consecutive failed attempts before giving up")
    keep_originals: bool = Field(
        True, description="save each compressed original to the spill folder and point to it (lossless index)"
    )
    archive: bool = Field(True, description="layer 4: a git-log style entry per completed round")
    provider_editing: bool = Field(True, description="layer 3: provider-side context editing near overflow")
    spill: SpillConfig = Field(default_factory=SpillConfig)
    noise: NoiseConfig = Field(default_factory=NoiseConfig)
