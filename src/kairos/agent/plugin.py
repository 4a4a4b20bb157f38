"""The plugin contract: what a capability may add to an agent, and when its hooks run.

A :class:`Plugin` declares what it contributes (tools, services, views, a status provider, an
error formatter, a deployment-prompt suffix) and overrides the hooks it needs; nothing patches
the agent. The loop is the only writer of the trajectory: a plugin that wants something in the
context *returns* messages from :meth:`Plugin.at_safe_point` and the loop appends them.

Order: every hook runs in stage order (``guard`` → ``annotate`` → ``memory`` → ``compress``),
and within a stage in the order the plugins were given. So defences wrap external output before
the status bar stamps it, and compression's token check sees everything the others appended.
Single slots (the status provider, the error formatter) take one claimant; a second is a
:class:`~kairos.errors.ConfigError`. Plugins reach each other by type: ``ctx.service(T)``.

Failures: an unexpected exception in a hook is reported (a ``HookFailed`` event and the
``kairos.plugins`` log) and the run goes on without that hook's effect, except in a ``guard``
plugin, which fails closed (a tool call is refused, a result withheld, a reply replaced).

Compared with LangChain's agent middleware (``before_model``/``wrap_tool_call``…) and
openai-agents' ``RunHooks``, this contract adds messages returned at safe points (the inbox
and plugins append only there) and an order fixed by stage, so the request prefix stays
byte-stable whatever order plugins are listed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeAlias, TypeVar

from kairos.context.builder import TrajectoryView
from kairos.context.inbox import InboxEvent
from kairos.context.session import Session, SessionView
from kairos.models.base import Model
from kairos.models.types import Message, ModelRequest, SystemPrompt, ToolCall, ToolChoice
from kairos.tools.base import Tool, ToolResult, ToolSet, ToolSource
from kairos.tools.executor import ErrorFormatter

Stage: TypeAlias = Literal["guard", "annotate", "memory", "compress"]
STAGES: tuple[Stage, ...] = ("guard", "annotate", "memory", "compress")
SafePoint: TypeAlias = Literal["turn_start", "before_request"]
"""``turn_start``: once per run, after the inbox was drained; ``before_request``: before every model call."""

if TYPE_CHECKING:
    from kairos.agent.agent import Agent

T = TypeVar("T")


class ReplyGuard(Protocol):
    """Filters one streamed reply (e.g. :class:`kairos.security.leak.LeakStream`).

    ``feed`` returns the text that may be shown now; ``finish`` the held-back rest. When
    ``replacement`` is set after ``finish``, the reply's text is replaced by it everywhere: on
    screen, in the trajectory and in the final answer.
    """

    @property
    def replacement(self) -> str | None:
        """The text to show instead of the reply, once the guard decided so."""
        ...

    def feed(self, text: str) -> str:
        """Take a piece of the reply; return what may be shown now."""
        ...

    def finish(self) -> str:
        """The reply ended; return the held-back rest."""
        ...


class StatusProvider(Protocol):
    """Computes the trailing status text for the next request (code, never the model).

    ``lines`` are the other plugins' status lines (a tripped breaker, a TODO list): the provider
    decides where they go. :class:`~kairos.context.builder.BasicStatus` is the default.
    """

    def render(self, ctx: RunContext, lines: Sequence[str]) -> str | None:
        """The status text, or None for no status message."""
        ...


class RunContext(Protocol):
    """What a hook sees: the session (read-only), the agent's parts and the other plugins' services."""

    @property
    def session(self) -> SessionView:
        """The session being run (appends go through the loop)."""
        ...

    @property
    def agent(self) -> Agent:
        """The agent being run (its model, limits, status provider and plugins)."""
        ...

    @property
    def model(self) -> Model:
        """The agent's model."""
        ...

    @property
    def tools(self) -> ToolSet:
        """The session's frozen tool snapshot."""
        ...

    @property
    def system(self) -> SystemPrompt:
        """The effective system prompt (with every plugin's suffix)."""
        ...

    @property
    def max_iterations(self) -> int:
        """Model calls one run may make."""
        ...

    def build(self) -> ModelRequest:
        """The request the next model call would send now (views applied, status included)."""
        ...

    def status_lines(self) -> list[str]:
        """Every plugin's status lines as they stand now (for a status provider that composes elsewhere)."""
        ...

    def service(self, kind: type[T]) -> T | None:
        """The service (or plugin) of type ``kind`` that some plugin provides, if any."""
        ...

    def post(self, event: InboxEvent) -> int:
        """Post an event to this session's inbox (a background task finished, a timer fired)."""
        ...

    def new_session(self, title: str, meta: dict[str, Any]) -> Session:
        """A new session in the same store and workspace, held for writing (a sub-agent's)."""
        ...


class Plugin:
    """Base class with every hook a no-op: override what you need, set ``stage``."""

    stage: ClassVar[Stage] = "annotate"

    @property
    def name(self) -> str:
        """How reports and errors name this plugin."""
        return type(self).__name__

    # -- what it contributes (read once, when the agent is built) --------------------------

    def tools(self) -> Sequence[Tool | ToolSource]:
        """Tools (or changing tool sources) this plugin adds."""
        return ()

    def services(self) -> Sequence[object]:
        """Objects other plugins may look up by type (the plugin itself always is one)."""
        return ()

    def views(self) -> Sequence[TrajectoryView]:
        """Deterministic projections of the stored trajectory into what the model sees."""
        return ()

    def status_provider(self) -> StatusProvider | None:
        """Claims the single status slot (the trailing status message)."""
        return None

    def error_formatter(self) -> ErrorFormatter | None:
        """Claims the single slot that turns a tool's exception into the model's error text."""
        return None

    def system_suffix(self) -> str:
        """A fixed text appended to the deployment part of the system prompt (after the cache boundary)."""
        return ""

    # -- per session -----------------------------------------------------------------------

    async def open(self, ctx: RunContext) -> None:
        """Set up per-session state before the session's first run (connect, load, seed)."""

    async def close(self, ctx: RunContext) -> None:
        """Tear it down when the session closes."""

    # -- the loop --------------------------------------------------------------------------

    def on_input(self, ctx: RunContext, message: Message) -> Message:
        """Rewrite a message made from an inbox event before it is appended (e.g. a timestamp)."""
        return message

    async def at_safe_point(self, ctx: RunContext, at: SafePoint) -> Sequence[Message]:
        """Messages to append now (a changed catalog, a reminder). The loop appends them."""
        return ()

    async def tool_choice(self, ctx: RunContext, request: ModelRequest) -> ToolChoice | None:
        """What the next reply may be (a call required, text only, one of some tools); None: no opinion.

        The first plugin with an opinion decides. It changes decoding, never the prompt.
        """
        return None

    async def on_request(self, ctx: RunContext, request: ModelRequest) -> None:
        """Observe the request about to be sent (it is final: budget checked, audited)."""

    async def on_overflow(self, ctx: RunContext, request: ModelRequest, tokens: int, limit: int) -> ModelRequest | None:
        """The request is over the window: return a smaller one, or None to pass."""
        return None

    async def before_tool(self, ctx: RunContext, call: ToolCall, tool: Tool) -> ToolResult | None:
        """Before a valid call: return a result to answer instead of the tool (a denial, a refusal)."""
        return None

    async def after_tool(self, ctx: RunContext, call: ToolCall, tool: Tool | None, result: ToolResult) -> ToolResult:
        """Every result, errors included, before the model sees it: return it, annotated or not."""
        return result

    def reply_guard(self, ctx: RunContext) -> ReplyGuard | None:
        """A fresh guard for the next model reply, or None."""
        return None

    def status_lines(self, ctx: RunContext) -> Sequence[str]:
        """Lines for the status message (computed by code, never from tool output text)."""
        return ()


__all__ = ["STAGES", "Plugin", "ReplyGuard", "RunContext", "SafePoint", "Stage", "StatusProvider"]
