"""What every route shares: the runtime, the secrets, the outbox and the stop signal."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from starlette.requests import HTTPConnection

from kairos.runtime import Event, Receipt, Runtime, Strategy
from kairos.server.outbox import OutboxAPI

if TYPE_CHECKING:
    from kairos.knowledge.base import KnowledgeBase
    from kairos.mcp.client import McpServerSource
    from kairos.memory import UserMemory


class Workers(Protocol):
    """The deployment's workers as a front end reaches them (:class:`~kairos.runtime.workqueue.WorkQueue`)."""

    async def ask(self, session: str, verb: str, **arguments: Any) -> dict[str, Any] | None:
        """The reply of the worker that runs ``session``; None when none runs it."""
        ...


@dataclass
class ServerState:
    """Shared by the routes (``app.state.kairos``)."""

    runtime: Runtime
    token: str | None
    webhook_secret: str | None
    outbox: OutboxAPI | None = None
    model_name: str = "kairos"
    heartbeat_s: float = 15.0
    completion_timeout_s: float = 600.0
    grace_s: float = 10.0
    memory: UserMemory | None = None
    """The user's memory the agent uses (``/v1/memory``); None: the routes answer 503."""
    knowledge: KnowledgeBase | None = None
    """The workspace's knowledge base (``/v1/knowledge``); None: the routes answer 503."""
    mcp: Sequence[McpServerSource] = ()
    """The agent's MCP servers (``/v1/mcp``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The effective settings, where they came from and what was ignored (``GET /v1/settings``)."""
    max_body: int = 1 << 20
    """The largest request body, and the largest WebSocket frame: one limit for a message however it comes."""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the server begins to stop: streams end, so connections close and the drain can start."""
    workers: Workers | None = None
    """Where the turns run when this process is a front end only (``kairos serve --no-worker``): a stop
    button reaches the worker that runs the session."""

    def begin_shutdown(self) -> None:
        """End every stream (call from the event loop's thread)."""
        self.stopping.set()


def state_of(conn: HTTPConnection) -> ServerState:
    """The state of the app serving ``conn``."""
    return cast(ServerState, conn.app.state.kairos)


async def submit_user(
    state: ServerState, session_id: str, text: str, strategy: str | None, key: str | None, channel: str = "http"
) -> Receipt:
    """Submit the user's message to a session (shared by the HTTP, WebSocket and OpenAI routes).

    Raises:
        SessionNotFoundError: unknown session.
        KairosError: the runtime is stopping.
    """
    event = Event(
        "user.input",
        text,
        source={"type": "user"},
        channel=channel,
        session=session_id,
        id=key or "",
        strategy=cast(Strategy | None, strategy),
    )
    return await state.runtime.submit(event)


__all__ = ["ServerState", "state_of", "submit_user"]
