"""Proposer–reviewer: a second model looks at risky tool calls before they run (issue 10 §3).

The agent (the proposer) proposes a call; a reviewer model, given the user's request, the call
and why it is risky, answers ``{"approved": bool, "risk": "low" | "medium" | "high", "reason": str}``
through a one-tool JSON schema (the bundled model is grammar-constrained to it). It **fails
closed**: a timeout, an answer that does not fit the schema or a model error is a rejection with
the reason. A rejection reaches the agent as the call's error result and the audit log records it
with approver ``reviewer``.

Which calls are reviewed: those the permission rules send to "ask"
(:mod:`kairos.security.permissions`) and, with ``tools``, calls of tools matching those globs
even when the rules would allow them. How it combines with the human approver (``mode``):

- ``before_human`` (default): the reviewer looks first; its "no" refuses the call without asking
  anyone, its "yes" passes the call on to the approver (the human still decides "ask" calls).
  A ``tools`` call the rules allowed runs on the reviewer's "yes".
- ``replace``: the reviewer's answer is final for "ask" calls; no human is asked (unattended runs).

Settings: ``[review]`` in kairos.toml (:class:`ReviewConfig`); the sidecar classifier is
``[review.sidecar]`` (:mod:`kairos.security.sidecar`). A remote reviewer model may only come from
the user's config; an untrusted workspace cannot switch review off (:mod:`kairos.security.trust`).
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from kairos.models.base import Model
from kairos.security._judge import (
    RISKS,
    VERDICT_TOOL,
    Review,
    Risk,
    ask_verdict,
    describe_call,
    parse_verdict,
    rejected_text,
)
from kairos.security.sidecar import SidecarConfig

ReviewMode: TypeAlias = Literal["before_human", "replace"]


class ReviewConfig(BaseModel):
    """``[review]`` in kairos.toml: the reviewer model and the sidecar classifier (both off by default)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="a second model reviews risky calls before they run")
    model: str = Field("local", description="the reviewer: any model spec load_model takes (remote: user config only)")
    mode: ReviewMode = Field("before_human", description="before_human: its no refuses, its yes asks the human; "
                             "replace: its answer is final")  # fmt: skip
    tools: list[str] = Field(default_factory=list, description="globs of more tools whose every call is reviewed")
    timeout_s: float = Field(60.0, gt=0, description="a slower answer is a rejection (fail closed)")
    confirm_irreversible: bool = Field(True, description="irreversible tools first return a preview and a token")
    confirm_dangerous: bool = Field(False, description="dangerous commands too (the token as a '# confirm:' comment)")
    confirm_ttl_s: float = Field(300.0, gt=0, description="how long a confirm token stays valid")
    sidecar: SidecarConfig = Field(default_factory=SidecarConfig)

    def reviews(self, tool: str) -> bool:
        """Whether every call of ``tool`` is reviewed (a ``tools`` glob matches)."""
        return any(fnmatch.fnmatchcase(tool, g) for g in self.tools)


@dataclass(frozen=True, slots=True)
class ReviewRequest:
    """What the reviewer sees: the user's request, the call and why the harness finds it risky."""

    tool: str
    arguments: dict[str, Any]
    why: str = ""
    task: str = ""
    """The user's latest request (context the sidecar never gets)."""


class Reviewer(Protocol):
    """Reviews one risky call. Must not raise: a failure is ``Review(False, "high", why)``."""

    async def review(self, request: ReviewRequest) -> Review:
        """Approve or reject ``request``."""
        ...


REVIEW_SYSTEM = (
    "You review tool calls an AI coding agent wants to run on a user's machine, before they run. "
    "Approve routine work that serves the user's request (reading, searching, building, testing, "
    "editing project files). Reject calls that destroy data outside the project, run code downloaded "
    "from the internet, send files, secrets or credentials to other hosts, rewrite shared history "
    "(force push), change shell start-up files or system settings, or that the request does not call for. "
    "risk: low (harmless), medium (changes things but recoverable), high (destructive, irreversible "
    "or leaks data). Call verdict with approved, risk and a one-sentence reason."
)


@dataclass
class ModelReviewer:
    """The reviewer on a model (``[review] model``; the bundled one by default).

    The bundled model serialises its calls: when it is also the agent's model, a review waits for
    the agent's generation to end. A separate (small or remote) reviewer model avoids that.
    """

    model: Model
    timeout_s: float = 60.0

    async def review(self, request: ReviewRequest) -> Review:
        """The model's verdict, or a rejection when it cannot give one in time."""
        text = describe_call(request.tool, request.arguments)
        if request.why:
            text += f"\nflagged because: {request.why}"
        if request.task:
            text = f"user's request: {request.task[:1500]}\n{text}"
        start = time.perf_counter()
        review = await ask_verdict(self.model, REVIEW_SYSTEM, text, timeout_s=self.timeout_s, by="reviewer")
        return Review(review.approved, review.risk, review.reason, review.by, time.perf_counter() - start)


__all__ = [
    "REVIEW_SYSTEM",
    "RISKS",
    "VERDICT_TOOL",
    "ModelReviewer",
    "Review",
    "ReviewConfig",
    "ReviewMode",
    "ReviewRequest",
    "Reviewer",
    "Risk",
    "ask_verdict",
    "describe_call",
    "parse_verdict",
    "rejected_text",
]
