"""Sessions: an append-only trajectory plus the per-session resources tools need."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kairos.context.store import SessionInfo, TrajectoryStore
from kairos.models.types import Message
from kairos.paths import default_state_dir
from kairos.tools.base import ToolContext


class Session:
    """One conversation. Messages are only ever appended; each append is persisted at once."""

    def __init__(self, session_id: str, store: TrajectoryStore, workspace: Path, messages: list[Message]) -> None:
        self.id = session_id
        self.store = store
        self._messages = messages
        self.tool_context = ToolContext(workspace=workspace, session_id=session_id)
        self.request_count = len(store.load_requests(session_id))
        self.state: dict[str, Any] = {}
        """Per-session harness state kept by plug-ins (counters, audit memory); not persisted."""
        self._interrupt = asyncio.Event()

    @property
    def messages(self) -> Sequence[Message]:
        return tuple(self._messages)

    def message_list(self) -> list[Message]:
        """The live list (read-only by contract): avoids a copy per request on long sessions."""
        return self._messages

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def workspace(self) -> Path:
        return self.tool_context.workspace

    def append(self, *messages: Message) -> None:
        """Persist then append: a crash never leaves memory ahead of disk."""
        if not messages:
            return
        self.store.append_messages(self.id, len(self._messages), messages)
        self._messages.extend(messages)

    def record_request(self, record: dict[str, Any]) -> int:
        idx = self.request_count
        self.store.append_request(self.id, idx, record)
        self.request_count += 1
        return idx

    def freeze(self, key: str, value: str) -> str:
        """Decide ``value`` once for ``key``; later calls (and resumed sessions) get the first value."""
        return self.store.freeze(self.id, key, value)

    # -- interruption -----------------------------------------------------------------------

    def interrupt(self) -> None:
        """Ask the running turn to stop at the next safe point (the trajectory stays valid)."""
        self._interrupt.set()

    @property
    def interrupted(self) -> bool:
        return self._interrupt.is_set()

    async def wait_interrupt(self) -> None:
        await self._interrupt.wait()

    def clear_interrupt(self) -> None:
        self._interrupt.clear()

    async def aclose(self) -> None:
        await self.tool_context.aclose()


class SessionStore:
    """Creates and resumes sessions of one workspace."""

    def __init__(
        self, workspace: Path | str = ".", state_dir: Path | None = None, *, db_path: Path | str | None = None
    ):
        self.workspace = Path(workspace).resolve()
        self.state_dir = state_dir or default_state_dir(self.workspace)
        self.trajectories = TrajectoryStore(db_path if db_path is not None else self.state_dir / "kairos.db")

    def new(self, title: str = "") -> Session:
        sid = self.trajectories.create_session(title)
        return Session(sid, self.trajectories, self.workspace, [])

    def resume(self, session_id: str) -> Session:
        """Raises ``SessionNotFoundError`` for an unknown id."""
        messages = self.trajectories.load_messages(session_id)
        return Session(session_id, self.trajectories, self.workspace, messages)

    def open(self, session_id: str | None, title: str = "") -> Session:
        return self.resume(session_id) if session_id else self.new(title)

    def list(self, limit: int = 50) -> list[SessionInfo]:
        return self.trajectories.list_sessions(limit)

    def close(self) -> None:
        self.trajectories.close()
