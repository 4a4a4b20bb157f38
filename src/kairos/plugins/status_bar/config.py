"""Settings of the status bar (``[status_bar]`` in kairos.toml) and the replace/append decision."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator

UpdateMode: TypeAlias = Literal["replace", "append"]
Clock = Callable[[], datetime]
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class ToolLimit(BaseModel):
    """At most ``max_calls`` calls of a tool per session, or per value of one argument."""

    model_config = ConfigDict(extra="forbid")

    max_calls: int = Field(ge=0)
    per_argument: str | None = Field(None, description="count per value of this argument, e.g. 'merchant'")


class StatusBarConfig(BaseModel):
    """``[status_bar]`` in kairos.toml. Every technique can be switched off on its own."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    mode: Literal["replace", "append", "auto"] = "replace"
    current_request: bool = Field(True, description="recite the user's latest request (their own words)")
    timestamps: bool = Field(True, description="(a) [YYYY-MM-DD HH:MM:SS] on user messages and tool results")
    clock_start: datetime | None = Field(None, description="simulated clock start; None = real time")
    clock_step_s: float = Field(1.0, ge=0, description="simulated seconds per clock reading (event)")
    counters: bool = Field(True, description="(b) call counters, 'Tool call #k' notes, limits (shown + enforced)")
    limits: dict[str, ToolLimit] = Field(default_factory=dict, description="e.g. {phone_call = 3} or a table")
    repeat_alert_at: int = Field(3, ge=2, description="alert when one tool is called this many times in a row")
    todo: bool = Field(
        False, description="(c) TODO tools, list shown in the status; off by default: ~430 tokens of tool schemas"
    )
    detailed_errors: bool = Field(True, description="(d) four-layer error reports for tool exceptions")
    system_state: bool = Field(True, description="(e) time, cwd, OS, shell, Python version")
    cached_price_ratio: float = Field(0.1, ge=0, le=1, description="auto mode: α, cached/normal input price")
    expected_updates: int | None = Field(None, ge=1, description="auto mode: N; default the agent's max_iterations")
    tokens_between_updates: int = Field(300, ge=1, description="auto mode: R when the session has no history yet")

    @field_validator("limits", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """``{"phone_call": 3}`` means ``{"phone_call": {"max_calls": 3}}``."""
        if isinstance(value, dict):
            return {k: {"max_calls": v} if isinstance(v, int) else v for k, v in value.items()}
        return value


@dataclass
class SimulatedClock:
    """A deterministic clock: returns ``start``, then ``start + step``, ... (one step per reading).

    Readings are per event (a stamped message, a status render). A resumed process restarts at
    ``start``; use it for experiments and tests, not for real sessions.
    """

    start: datetime
    step: timedelta = timedelta(seconds=1)
    _next: datetime | None = None

    def __call__(self) -> datetime:
        """The next reading: ``start`` the first time, then one ``step`` later each time."""
        now = self._next or self.start
        self._next = now + self.step
        return now


@dataclass(frozen=True, slots=True)
class ModeDecision:
    """The replace/append choice and the numbers behind it (book ch2 L846-856).

    ``status_tokens`` (S): the rendered status at decision time, estimated at 4 chars/token.
    ``tokens_between_updates`` (R): trajectory tokens per request so far when the session has
    history, else the configured estimate. ``expected_updates`` (N): configured, default the
    agent's ``max_iterations`` (one update per request). ``cached_price_ratio`` (α): configured,
    default 0.1 (cache reads cost about a tenth of input at Anthropic, DeepSeek, OpenAI).
    """

    mode: UpdateMode
    status_tokens: int
    tokens_between_updates: float
    expected_updates: int
    cached_price_ratio: float

    @property
    def cost_replace(self) -> float:
        """``(N−1)(1−α)R``: uncached re-reads of what follows the replaced status."""
        return (self.expected_updates - 1) * (1 - self.cached_price_ratio) * self.tokens_between_updates

    @property
    def cost_append(self) -> float:
        """``α·S·N(N−1)/2``: cached re-reads of the statuses piling up."""
        n = self.expected_updates
        return self.cached_price_ratio * self.status_tokens * n * (n - 1) / 2


def choose_update_mode(status_tokens: int, tokens_between: float, updates: int, alpha: float) -> ModeDecision:
    """Append iff ``α·S·N/2 < (1−α)·R``, else replace.

    Ignores context occupancy and the risk of the model trusting a stale status, so check provider
    pricing and measured hit rates too.

    Args:
        status_tokens: ``S``, tokens of one rendered status message.
        tokens_between: ``R``, trajectory tokens added between two updates (one per request).
        updates: ``N``, the status updates expected.
        alpha: ``α``, the price of a cached input token relative to an uncached one.

    See :class:`ModeDecision` for where each number comes from.
    """
    append = alpha * status_tokens * updates / 2 < (1 - alpha) * tokens_between
    return ModeDecision("append" if append else "replace", status_tokens, tokens_between, updates, alpha)
