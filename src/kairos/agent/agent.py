"""``Agent``: a declarative description (model, tools, prompt, plugins, limits).

Driving a session is the :class:`~kairos.agent.runner.Runner`'s job; ``Agent.run`` is a shortcut
to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, cast

from kairos.agent._pipeline import Pipeline
from kairos.agent.events import AgentEvent
from kairos.agent.plugin import Plugin, RunContext, StatusProvider
from kairos.context.builder import BasicStatus, ContextBuilder
from kairos.errors import ConfigError
from kairos.models.base import Model
from kairos.models.types import SystemPrompt, ToolCall
from kairos.tools.base import Tool, ToolSource

if TYPE_CHECKING:
    from kairos.agent.runner import Runner
    from kairos.context.session import Session


class Activity:
    """How many runs of an agent are in progress, and waiting for none or some.

    Background work that shares the agent's model (user memory's extraction) runs while the
    agent is idle and steps aside when a run starts, so it never holds a user's answer back.
    """

    def __init__(self) -> None:
        self.runs = 0
        self._waiters: list[tuple[bool, asyncio.Future[None]]] = []

    @property
    def busy(self) -> bool:
        """Whether a run is in progress."""
        return self.runs > 0

    def started(self) -> None:
        """A run started."""
        self.runs += 1
        self._notify()

    def ended(self) -> None:
        """A run ended."""
        self.runs -= 1
        self._notify()

    async def wait(self, *, busy: bool) -> None:
        """Until the agent is busy (``busy=True``) or idle (``busy=False``); at once when it already is."""
        if self.busy == busy:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((busy, waiter))
        try:
            await waiter
        finally:
            self._waiters = [w for w in self._waiters if w[1] is not waiter]

    def _notify(self) -> None:
        for want, waiter in self._waiters:
            if want == self.busy and not waiter.done():
                waiter.set_result(None)


class Agent:
    """A model, its tools, its system prompt, its plugins and its limits.

    Building one checks the plugins: a second claimant of a single slot, two plugins of one
    service type, or two tools of one name is a :class:`~kairos.errors.ConfigError`. An agent
    holds no per-session state: run it on any number of sessions.

    Args:
        model: the model every request goes to.
        tools: tools and tool sources (a source's tools are listed per session, at turn starts).
        system: the system prompt; a ``str`` becomes a :class:`~kairos.models.types.SystemPrompt`.
            Plugins' suffixes are appended after it (see :attr:`system`).
        plugins: hooks run in their declared stage order, not list order.
        status: the provider of the trailing status message, for when no plugin provides one
            (giving one as well is a ``ConfigError``); defaults to time, directory and task.
        max_iterations: model requests per run; the run then stops without a final answer.
        max_tokens: the most tokens the model may write per reply.
        temperature: sampling temperature of every request.

    Raises:
        ConfigError: the plugins conflict with each other or with ``status``, or two tools share a
            name.
    """

    def __init__(
        self,
        model: Model,
        *,
        tools: Iterable[Tool | ToolSource] = (),
        system: SystemPrompt | str = "You are a helpful assistant.",
        plugins: Sequence[Plugin] = (),
        status: StatusProvider | None = None,
        max_iterations: int = 20,
        max_tokens: int = 1024,
        temperature: float = 0.0,
    ) -> None:
        self.model = model
        self.tools: tuple[Tool | ToolSource, ...] = tuple(tools)
        self.base_system = SystemPrompt(system) if isinstance(system, str) else system
        """The system prompt as given; :attr:`system` adds the plugins' suffixes."""
        self.plugins = tuple(plugins)
        self.max_iterations = max_iterations
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.pipeline = Pipeline(self.plugins, status=status)
        self.tool_sources = tuple(t for t in self.all_tools() if isinstance(t, ToolSource))
        """The declared tools that may change at run time (checked once: a protocol check is slow)."""
        names = [t.name for t in self.all_tools() if not isinstance(t, ToolSource)]
        clash = next((n for n in names if names.count(n) > 1), None)
        if clash is not None:
            raise ConfigError(f"two tools are named {clash!r} (the agent's and a plugin's?); tool names must be unique")
        self.system = self.base_system.with_suffix(*self.pipeline.suffixes)
        """The effective system prompt: what every request of this agent starts with."""
        self.status: StatusProvider = self.pipeline.status if self.pipeline.status is not None else BasicStatus()
        """The provider of the trailing status message (a plugin's, the one given, or time/cwd/task)."""
        self.builder = ContextBuilder(
            self.system, views=tuple(self.pipeline.views), max_tokens=max_tokens, temperature=temperature
        )
        self._runner: Runner | None = None
        self.activity = Activity()
        """Runs in progress (background work waits for none, see :class:`Activity`)."""

    def all_tools(self) -> tuple[Tool | ToolSource, ...]:
        """The agent's tools and every plugin's, as declared (sources not yet listed)."""
        return (*self.tools, *self.pipeline.tools)

    @property
    def runner(self) -> Runner:
        """The runner that drives this agent's sessions (made on first use)."""
        if self._runner is None:
            from kairos.agent.runner import Runner

            self._runner = Runner(self)
        return self._runner

    async def run(
        self, session: Session, input: str | None = None, opening: Sequence[ToolCall] = ()
    ) -> AsyncIterator[AgentEvent]:
        """Post ``input`` (if any) to the session's inbox and run until the model answers.

        ``opening``: tool calls the harness makes first, on the model's behalf. Yields events as they
        happen; see :class:`~kairos.agent.runner.Runner`.
        """
        events = cast("AsyncGenerator[AgentEvent, None]", self.runner.run(session, input, opening))
        self.activity.started()
        try:
            async for event in events:
                yield event
        finally:
            try:
                await events.aclose()  # left early: the run's own cleanup happens now, not at garbage collection
            finally:
                self.activity.ended()

    async def context(self, session: Session) -> RunContext:
        """This agent's run context on ``session``, its plugins opened on first use.

        For calling hooks or building a request outside a run.

        Raises:
            KairosError: a guard plugin could not open.
        """
        return await self.runner.context(session)
