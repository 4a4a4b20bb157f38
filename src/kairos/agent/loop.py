"""The agent loop (book ch2 §3.1): call the model, append its reply verbatim, run the tools it
asked for (concurrently), append exactly one result per call id, repeat until a reply has no
tool calls.

Reply guards (``Agent.reply_guards``, e.g. the leak guard) see the reply's text as it streams:
only what they release is shown, and a guard may replace the whole reply before it is stored.

Safe points: a run can be interrupted (``Session.interrupt``) or cancelled (task cancel or
closing the event iterator) while the model streams or tools run. Either way the trajectory
stays valid: the assistant message is kept, unfinished tools get a placeholder result, and
partial reasoning is dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Protocol

from kairos.agent.events import (
    AgentEvent,
    FinalAnswer,
    ModelDeltaEvent,
    RequestStats,
    RunError,
    ToolCallFinished,
    ToolCallStarted,
)
from kairos.agent.guard import LoopGuard
from kairos.context.audit import PrefixAuditor
from kairos.context.builder import ContextBuilder, StatusProvider
from kairos.context.session import Session
from kairos.errors import KairosError
from kairos.models.base import Model
from kairos.models.types import (
    Message,
    ModelNotice,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    StreamEvent,
    SystemPrompt,
    TextDelta,
    ToolCall,
)
from kairos.tools.base import Tool, ToolRegistry, ToolResult
from kairos.tools.executor import ToolExecutor

BeforeRequestHook = Callable[[Session], Awaitable[None]]
"""Runs before each request is built (e.g. decide compression, append a changed skill catalog)."""
UserMessageHook = Callable[[Session, Message], Message]
"""Rewrites the user message before it is appended (e.g. a timestamp prefix)."""


class ReplyGuard(Protocol):
    """Filters one streamed reply (e.g. :class:`kairos.security.leak.LeakStream`).

    ``feed`` returns the text that may be shown now; ``finish`` the held-back rest. When
    ``replacement`` is set after ``finish``, the reply's text is replaced by it everywhere: on
    screen, in the trajectory and in the final answer.
    """

    @property
    def replacement(self) -> str | None: ...

    def feed(self, text: str) -> str: ...

    def finish(self) -> str: ...


ReplyGuardFactory = Callable[[Session], ReplyGuard]
"""Makes a fresh guard for each model reply of a session."""

INTERRUPTED_TOOL_RESULT = "[interrupted: this tool call was stopped before it finished; its result is unknown]"
_AUDIT_KEY = "kairos.prefix_auditor"


class Extension(Protocol):
    """A capability that plugs into an agent (status bar, skills, compression, defences...).

    ``tools`` are added before the tool list is frozen (the prefix must not change later);
    ``install`` then attaches hooks to the agent, its builder and its executor.
    """

    def tools(self) -> Sequence[Tool]: ...

    def install(self, agent: Agent) -> None: ...


class _Interrupted(Exception):
    """Internal: the session asked to stop at a safe point."""


@dataclass
class _PendingTools:
    """Bookkeeping so a cancelled tool phase still yields one result per call id."""

    calls: tuple[ToolCall, ...]
    results: dict[str, ToolResult] = field(default_factory=dict)

    def messages(self) -> list[Message]:
        return [
            Message.tool(c.id, self.results[c.id].content if c.id in self.results else INTERRUPTED_TOOL_RESULT, c.name)
            for c in self.calls
        ]


class Agent:
    """A model, its tools and how its context is built."""

    def __init__(
        self,
        model: Model,
        *,
        tools: Iterable[Tool] = (),
        system: SystemPrompt | str = "You are a helpful assistant.",
        status: StatusProvider | None = None,
        builder: ContextBuilder | None = None,
        max_iterations: int = 20,
        max_tokens: int = 1024,
        extensions: Sequence[Extension] = (),
    ) -> None:
        self.model = model
        self.tools = ToolRegistry([*tools, *(t for ext in extensions for t in ext.tools())])
        self.executor = ToolExecutor(self.tools)
        if isinstance(system, str):
            system = SystemPrompt(system)
        self.builder = builder or ContextBuilder(system, self.tools.specs(), status=status, max_tokens=max_tokens)
        self.max_iterations = max_iterations
        self.before_request: list[BeforeRequestHook] = []
        self.user_message_hooks: list[UserMessageHook] = []
        self.reply_guards: list[ReplyGuardFactory] = []
        self.extensions = list(extensions)
        for ext in self.extensions:
            ext.install(self)

    async def run(self, session: Session, user_input: str) -> AsyncIterator[AgentEvent]:
        """Append ``user_input`` and run until the model answers; yields events as they happen."""
        session.clear_interrupt()
        message = Message.user(user_input)
        for rewrite in self.user_message_hooks:
            message = rewrite(session, message)
        session.append(message)
        guard = LoopGuard()
        auditor: PrefixAuditor = session.state.setdefault(_AUDIT_KEY, PrefixAuditor())
        for _ in range(self.max_iterations):
            try:
                for hook in self.before_request:
                    await hook(session)
                request, estimate = await self.builder.build_within_budget(session, self.model)
            except KairosError as e:
                yield RunError(str(e), e)
                return
            audit = auditor.audit(request)
            response: ModelResponse | None = None
            partial: list[str] = []  # text shown so far (past the reply guards): kept on interrupt
            guards = [make(session) for make in self.reply_guards]
            try:
                async with aclosing(self._stream(session, request)) as model_events:
                    async for event in model_events:
                        if isinstance(event, ResponseDone):
                            response = event.response
                            continue
                        if isinstance(event, ModelNotice):
                            continue
                        if isinstance(event, TextDelta) and guards:
                            event = TextDelta(_guarded(guards, event.text))
                            if not event.text:
                                continue
                        if isinstance(event, TextDelta):
                            partial.append(event.text)
                        yield ModelDeltaEvent(event)
            except _Interrupted:
                self._keep_partial(session, partial)
                yield FinalAnswer("".join(partial), stop_reason="interrupted")
                return
            except (asyncio.CancelledError, GeneratorExit):
                self._keep_partial(session, partial)
                raise
            except Exception as e:  # the model backend failed: tell the user, keep the trajectory
                yield RunError(f"model call failed: {e}", e)
                return
            if response is None:
                yield RunError(f"model {self.model.name!r} ended without a response")
                return
            reply = response.message
            if guards:
                tail, replacement = _finish(guards)
                if replacement is not None:  # the raw text must not be re-rendered either
                    reply = dataclasses.replace(reply, content=replacement, raw=None)
                    tail = replacement if not partial else "\n" + replacement
                if tail:
                    yield ModelDeltaEvent(TextDelta(tail))
            session.append(reply)
            stats = RequestStats(session.request_count, response.usage, audit, estimate)
            session.record_request(stats.to_record())
            yield stats
            if not reply.tool_calls:
                if response.finish_reason == "length":
                    yield FinalAnswer(reply.content, stop_reason="length")
                else:
                    yield FinalAnswer(reply.content)
                return
            pending = _PendingTools(reply.tool_calls)
            try:
                async with aclosing(self._run_tools(session, pending)) as tool_events:
                    async for ev in tool_events:
                        yield ev
            except _Interrupted:
                session.append(*pending.messages())
                yield FinalAnswer("Interrupted while tools were running.", stop_reason="interrupted")
                return
            except (asyncio.CancelledError, GeneratorExit):
                session.append(*pending.messages())
                raise
            stop = None
            results = []
            for call in reply.tool_calls:
                result = pending.results[call.id]
                count = guard.observe(call, result.content)
                if count >= guard.warn_at:
                    result = ToolResult(result.content + guard.warning(call, count), result.is_error, result.metadata)
                if count >= guard.stop_at and stop is None:
                    stop = guard.stop_message(call, count)
                results.append(Message.tool(call.id, result.content, call.name))
            session.append(*results)
            if stop is not None:
                yield FinalAnswer(stop, stop_reason="loop_guard")
                return
        yield FinalAnswer(
            f"Stopped after {self.max_iterations} model calls without a final answer (max_iterations). "
            "The work so far is in the session; continue it or raise max_iterations.",
            stop_reason="max_iterations",
        )

    async def _stream(self, session: Session, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """The model's events, raced against an interrupt so a stalled prefill can be stopped."""
        stream = aiter(self.model.stream(request))
        waiter = asyncio.ensure_future(session.wait_interrupt())
        try:
            while True:
                nxt = asyncio.ensure_future(anext(stream))
                done, _ = await asyncio.wait({nxt, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if nxt not in done:
                    nxt.cancel()
                    await asyncio.gather(nxt, return_exceptions=True)
                    raise _Interrupted
                try:
                    event = nxt.result()
                except StopAsyncIteration:
                    return
                yield event
        finally:
            waiter.cancel()
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    async def _run_tools(self, session: Session, pending: _PendingTools) -> AsyncGenerator[AgentEvent, None]:
        """Run every call of one reply concurrently; yield finish events in completion order."""
        ctx = session.tool_context
        started: dict[asyncio.Task[ToolResult], tuple[ToolCall, float]] = {}
        for call in pending.calls:
            yield ToolCallStarted(call)
        for call in pending.calls:
            task = asyncio.create_task(self.executor.execute(call, ctx), name=f"tool:{call.name}:{call.id}")
            started[task] = (call, time.perf_counter())
        waiter = asyncio.ensure_future(session.wait_interrupt())
        remaining = set(started)
        try:
            while remaining:
                done, _ = await asyncio.wait(remaining | {waiter}, return_when=asyncio.FIRST_COMPLETED)
                for task in remaining & done:
                    remaining.discard(task)
                    call, t0 = started[task]
                    result = task.result()
                    pending.results[call.id] = result
                    yield ToolCallFinished(call, result, time.perf_counter() - t0)
                if waiter in done and remaining:
                    raise _Interrupted
        finally:
            waiter.cancel()
            for task in remaining:
                task.cancel()
            if remaining:
                await asyncio.gather(*remaining, return_exceptions=True)

    @staticmethod
    def _keep_partial(session: Session, partial: list[str]) -> None:
        text = "".join(partial)
        if text:
            session.append(Message.assistant(text))


def _guarded(guards: Sequence[ReplyGuard], text: str) -> str:
    for guard in guards:
        text = guard.feed(text)
    return text


def _finish(guards: Sequence[ReplyGuard]) -> tuple[str, str | None]:
    """The held-back tail through every guard, and the first replacement any guard asks for."""
    tail = ""
    for guard in guards:
        tail = guard.feed(tail) + guard.finish()
    replacement = next((g.replacement for g in guards if g.replacement is not None), None)
    return tail, replacement
