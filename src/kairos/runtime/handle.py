"""What the runtime shows its parts: components, receipts, and the handle a session's tools use."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from kairos.agent.events import FinalAnswer
from kairos.context.inbox import InboxEvent
from kairos.errors import KairosError
from kairos.runtime.bus import EventBus
from kairos.runtime.db import RecordDB
from kairos.runtime.events import Event, Strategy
from kairos.runtime.outbound import OutboundPayload
from kairos.tools.base import RUNTIME_RESOURCE, ToolContext, ToolResult

if TYPE_CHECKING:
    from kairos.runtime.runtime import Runtime

T = TypeVar("T")


class RuntimeContext(Protocol):
    """What a component sees of the runtime: events in, records out, its database, other services.

    Narrower than :class:`~kairos.runtime.Runtime` (which satisfies it), so a component cannot reach
    the runtime's workers or sessions' internals, and a test can hand it a small fake.
    """

    @property
    def db(self) -> RecordDB:
        """The runtime's database (a component keeps its state in tables of its own)."""
        ...

    @property
    def bus(self) -> EventBus:
        """What the runtime publishes (to follow it, as telemetry does)."""
        ...

    @property
    def accepting(self) -> bool:
        """False once the runtime stops (a failed submit is then no error worth reporting)."""
        ...

    @property
    def state_dir(self) -> Path:
        """The sessions' state directory (a component's own files go below it)."""
        ...

    @property
    def model_name(self) -> str:
        """The name of the model the agent runs."""
        ...

    @property
    def answer_listeners(self) -> list[Callable[[str, FinalAnswer], None]]:
        """Called with (session, final answer) whenever a run ends; add and remove your own."""
        ...

    async def submit(self, event: Event) -> Receipt:
        """Route, decide and queue an event (see :meth:`kairos.runtime.Runtime.submit`)."""
        ...

    def post(self, session_id: str, event: InboxEvent, key: str | None = None) -> int | None:
        """Persist an inbox event for a session directly (no routing); None for a duplicate ``key``."""
        ...

    def publish(self, session: str, payload: OutboundPayload) -> None:
        """Put a record on the session's stream (``""``: the runtime's own)."""
        ...

    def service(self, kind: type[T]) -> T | None:
        """Another component, by type."""
        ...

    def has_session(self, session_id: str) -> bool:
        """Whether the session exists."""
        ...

    def create_session(self, title: str = "", meta: dict[str, Any] | None = None) -> str:
        """A new, empty session."""
        ...

    def session_meta(self, session_id: str) -> dict[str, Any]:
        """A session's metadata (empty for an unknown one)."""
        ...


@runtime_checkable
class Component(Protocol):
    """A part of the runtime with its own life: an event source or a service tools use.

    ``run`` restores what it persisted, then works until cancelled (submitting events through the
    runtime). A component is also a service: :meth:`Runtime.service` finds it by type.
    """

    name: str
    leader_only: bool
    """Runs in one process per deployment, the holder of its leader lease (timers, file watches, mail:
    :mod:`kairos.runtime.leader`); False: in every process (async tasks, the outbox)."""

    async def run(self, runtime: RuntimeContext) -> None:
        """Work until cancelled."""
        ...


@dataclass(frozen=True, slots=True)
class Receipt:
    """What :meth:`Runtime.submit` did with an event."""

    session: str
    strategy: Strategy
    reason: str
    seq: int | None = None
    """Its place in the session's inbox (None: not queued, e.g. parallel, dropped or a duplicate)."""
    duplicate: bool = False
    """An event with this id was accepted before; nothing was queued again."""

    def to_record(self) -> dict[str, Any]:
        """The JSON form (the HTTP API's reply)."""
        return {
            "session": self.session,
            "strategy": self.strategy,
            "reason": self.reason,
            "seq": self.seq,
            "duplicate": self.duplicate,
        }


@dataclass(frozen=True, slots=True)
class RuntimeHandle:
    """What a session's tools see of the runtime (no ``aclose``: closing a session leaves the runtime alone)."""

    runtime: Runtime
    session_id: str

    def service(self, kind: type[T]) -> T | None:
        """A runtime component of that type, if one runs."""
        return self.runtime.service(kind)

    @property
    def background_after_s(self) -> float | None:
        """A call still running after this long continues as a task (the runtime's setting)."""
        return self.runtime.background_after_s

    def start_background(self, title: str, run: Callable[[], Awaitable[str]]) -> str | None:
        """A long-running tool's call as an async task of this session (see :mod:`kairos.tools.executor`)."""
        from kairos.runtime.integrations.tasks import TaskManager  # tasks imports this module

        manager = self.service(TaskManager)
        if manager is None:
            return None
        try:
            return manager.spawn_coroutine(self.session_id, title, run).id
        except KairosError:  # not running (starting or stopping): the call runs inline instead
            return None


NO_RUNTIME = "this tool needs the runtime: run under `kairos serve` or `kairos chat`"


def runtime_handle(ctx: ToolContext) -> RuntimeHandle | ToolResult:
    """The runtime a tool runs under, or the error result it returns outside one."""
    handle = ctx.get(RUNTIME_RESOURCE)
    return handle if isinstance(handle, RuntimeHandle) else ToolResult(NO_RUNTIME, is_error=True)


def caller_of(ctx: ToolContext) -> RuntimeContext | None:
    """The calling session's runtime, for a leader's component that does not run in this worker.

    Its tools then work on the caller's records, which the deployment's workers share.
    """
    handle = runtime_handle(ctx)
    return handle.runtime if isinstance(handle, RuntimeHandle) else None


def runtime_service(ctx: ToolContext, kind: type[T], missing: str) -> tuple[T, str] | ToolResult:
    """The runtime component ``kind`` and the caller's session, or the error result a tool returns.

    ``missing`` is that result's text when the runtime runs without such a component.
    """
    handle = runtime_handle(ctx)
    if isinstance(handle, ToolResult):
        return handle
    service = handle.service(kind)
    if service is None:
        return ToolResult(missing, is_error=True)
    return service, handle.session_id


__all__ = [
    "NO_RUNTIME",
    "RUNTIME_RESOURCE",
    "Component",
    "Receipt",
    "RuntimeContext",
    "RuntimeHandle",
    "runtime_handle",
    "runtime_service",
]
