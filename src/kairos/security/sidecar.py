"""The sidecar classifier: a small model judges each tool call from its name and arguments alone.

It never sees the agent's text (so an injection that talked the agent round cannot talk to it),
only ``tool`` and ``arguments``. Classification starts as soon as a call's arguments are complete
in the model's stream (:meth:`Sidecar.watch`, installed by wrapping the agent's model with
:meth:`Sidecar.wrap`), runs while the model goes on generating (the rest of the reply, further
calls), and the call's execution waits for its answer in the defences' ``before_tool``. Without
the wrapped model (a custom agent) it starts there, at the earliest hook.

After ``max_rejections`` consecutive rejections in a session the agent is stopped from retrying:
every further call it covers is refused with a message telling the model to ask the user, until
the user writes again (:meth:`Sidecar.reset`). It fails closed like the reviewer
(:func:`kairos.security._judge.ask_verdict`).

``[review.sidecar]`` in kairos.toml (:class:`SidecarConfig`).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from kairos.models.base import Model
from kairos.models.types import ModelRequest, ReasoningPolicy, ResponseDone, StreamEvent, ToolCallDelta
from kairos.security._judge import Review, ask_verdict, describe_call
from kairos.tools.audit import args_digest

SIDECAR_SYSTEM = (
    "You are a security classifier for tool calls an AI agent makes on a developer's machine. You see "
    "only the tool name and its arguments. Reject (approved=false) calls that: delete files outside a "
    "project or recursively from / or ~, pipe downloaded code into a shell or interpreter, upload or "
    "send files, keys, tokens or environment variables to another host, force-push or delete git "
    "history, edit shell start-up files (~/.bashrc, ~/.profile), crontab or system files, use sudo, "
    "or disable security. Approve ordinary development: listing, reading, searching, git status/diff/"
    "log/commit, running tests and builds, editing files in the project. Call verdict with approved, "
    "risk (low|medium|high) and a one-sentence reason."
)
PENDING_LIMIT = 64
"""Classifications started for calls that never reached execution are dropped beyond this many."""


class SidecarConfig(BaseModel):
    """``[review.sidecar]`` in kairos.toml."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="classify tool calls from name and arguments while the reply streams")
    model: str = Field("local", description="the classifier model (remote specs: user config only)")
    timeout_s: float = Field(30.0, gt=0, description="a slower answer is a rejection (fail closed)")
    max_rejections: int = Field(3, ge=1, description="consecutive rejections before the agent must ask the user")
    tools: list[str] = Field(default_factory=lambda: ["*"], description="globs of the tools it classifies")
    skip_read_only: bool = Field(True, description="read-only tools run without classification")


class Classifier(Protocol):
    """Judges one call from its name and arguments only. Must not raise (fail closed instead)."""

    async def classify(self, tool: str, arguments: dict[str, Any]) -> Review:
        """Approve or reject the call."""
        ...


@dataclass
class ModelClassifier:
    """The classifier on a (small) model, answering through the verdict schema."""

    model: Model
    timeout_s: float = 30.0

    async def classify(self, tool: str, arguments: dict[str, Any]) -> Review:
        """The model's verdict on ``tool(arguments)``; a failure is a rejection."""
        text = describe_call(tool, arguments)
        return await ask_verdict(self.model, SIDECAR_SYSTEM, text, timeout_s=self.timeout_s, by="sidecar")


def blocked_text(count: int) -> str:
    """What the agent reads once it has been stopped from retrying."""
    return (
        f"Not run: the safety classifier rejected {count} calls in a row, so no more tool calls run until "
        "the user answers. Stop retrying: tell the user what you were trying to do and ask how to proceed."
    )


class Sidecar:
    """Starts classifications early, hands their answers to execution, counts rejections per session.

    Args:
        classifier: the judge (a :class:`ModelClassifier`, or a test double).
        config: ``[review.sidecar]``.
    """

    def __init__(self, classifier: Classifier, config: SidecarConfig | None = None) -> None:
        self.classifier = classifier
        self.config = config or SidecarConfig()
        self.skip: set[str] = set()
        """Tools never classified (read-only ones, learned by the defences plugin)."""
        self.started_in_stream = 0
        """Classifications started from the stream, before the reply was complete."""
        self._pending: OrderedDict[str, asyncio.Task[Review]] = OrderedDict()
        self._rejections: dict[str, int] = {}

    def covers(self, tool: str) -> bool:
        """Whether calls of ``tool`` are classified."""
        return tool not in self.skip and any(fnmatch.fnmatchcase(tool, g) for g in self.config.tools)

    @staticmethod
    def key(tool: str, arguments: dict[str, Any]) -> str:
        """Name and argument hash: the same call, whatever id the runner gives it."""
        return f"{tool}:{args_digest(arguments)}"

    def start(self, tool: str, arguments: dict[str, Any]) -> asyncio.Task[Review]:
        """Start (once) the classification of ``tool(arguments)``."""
        key = self.key(tool, arguments)
        task = self._pending.get(key)
        if task is None:
            task = asyncio.create_task(self._classify(tool, arguments), name=f"sidecar:{tool}")
            self._pending[key] = task
            while len(self._pending) > PENDING_LIMIT:
                self._pending.popitem(last=False)[1].cancel()
        return task

    async def _classify(self, tool: str, arguments: dict[str, Any]) -> Review:
        try:
            return await self.classifier.classify(tool, arguments)
        except Exception as e:  # a broken classifier rejects, never approves
            return Review(False, "high", f"the sidecar failed ({type(e).__name__}: {e}), so the call is rejected",
                          "sidecar")  # fmt: skip

    def discard(self, tool: str, arguments: dict[str, Any]) -> None:
        """Drop a started classification whose call will not run (refused or previewed earlier)."""
        task = self._pending.pop(self.key(tool, arguments), None)
        if task is not None:
            task.cancel()

    def blocked(self, session_id: str) -> bool:
        """Whether the session hit ``max_rejections`` in a row."""
        return self._rejections.get(session_id, 0) >= self.config.max_rejections

    def reset(self, session_id: str) -> None:
        """The user spoke: the agent may try again."""
        self._rejections.pop(session_id, None)

    async def decide(self, session_id: str, tool: str, arguments: dict[str, Any]) -> Review:
        """The verdict for a call about to run (waits for the classification already under way)."""
        count = self._rejections.get(session_id, 0)
        if count >= self.config.max_rejections:
            self.discard(tool, arguments)
            return Review(False, "high", blocked_text(count), "sidecar")
        task = self.start(tool, arguments)
        try:
            review = await asyncio.shield(task)
        finally:
            self._pending.pop(self.key(tool, arguments), None)
        self._rejections[session_id] = 0 if review.approved else count + 1
        return review

    # -- early start from the stream --

    async def watch(self, events: AsyncIterator[StreamEvent]) -> AsyncIterator[StreamEvent]:
        """Pass ``events`` through; start classifying each call once its arguments parse."""
        calls: dict[int, list[str]] = {}
        done: set[int] = set()
        try:
            async for event in events:
                if isinstance(event, ToolCallDelta):
                    part = calls.setdefault(event.index, ["", ""])
                    part[0] = event.name or part[0]
                    part[1] += event.arguments
                    if event.index not in done and part[0] and part[1].rstrip().endswith("}"):
                        args = _object(part[1])
                        if args is not None and self.covers(part[0]):
                            done.add(event.index)
                            self.started_in_stream += 1
                            self.start(part[0], args)
                elif isinstance(event, ResponseDone):  # backends whose deltas never parsed: start now
                    for c in event.response.message.tool_calls:
                        args = _object(c.arguments)
                        if args is not None and self.covers(c.name):
                            self.start(c.name, args)
                yield event
        finally:  # closing the inner stream frees the connection or the llama.cpp slot
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    def wrap(self, model: Model) -> Model:
        """``model`` with its stream watched (what the agent is given when the sidecar is on)."""
        return WatchedModel(model, self)


def _object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class WatchedModel:
    """A model whose stream the sidecar watches; everything else is the inner model's."""

    def __init__(self, inner: Model, sidecar: Sidecar) -> None:
        self.inner = inner
        self.sidecar = sidecar
        self.name = inner.name
        self.context_window = inner.context_window
        self.reasoning_policy: ReasoningPolicy = inner.reasoning_policy

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """The inner stream, watched."""
        return self.sidecar.watch(self.inner.stream(request))

    def count_tokens(self, request: ModelRequest) -> int:
        """The inner model's count."""
        return self.inner.count_tokens(request)

    def __getattr__(self, name: str) -> Any:
        """Anything else (``load``, ``close``, backend statistics) is the inner model's."""
        return getattr(self.inner, name)


def learn_skips(sidecar: Sidecar, tools: Iterable[Any]) -> None:
    """Remember the read-only tools (they are not classified when ``skip_read_only``)."""
    if sidecar.config.skip_read_only:
        sidecar.skip.update(t.name for t in tools if t.read_only)


__all__ = [
    "SIDECAR_SYSTEM",
    "Classifier",
    "ModelClassifier",
    "Sidecar",
    "SidecarConfig",
    "WatchedModel",
    "blocked_text",
    "learn_skips",
]
