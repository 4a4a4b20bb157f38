"""What a runtime tells about its sessions without touching their workers, and renaming one.

Lists, history, requests, the timeline, compression: :class:`Runtime` has these methods, and front ends call
them instead of reaching into the stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, cast

from kairos.context.session import SessionStore
from kairos.context.store import SessionInfo
from kairos.errors import SessionNotFoundError
from kairos.models.types import Message
from kairos.runtime.bus import BusEvent, EventBus

if TYPE_CHECKING:
    from kairos.runtime.handle import RuntimeContext

T = TypeVar("T")
_COMPRESSION = "kairos.compression/"
_LAYERS = ("spill", "noise", "compressed", "round")


class SessionQueries:
    """The read side of :class:`~kairos.runtime.runtime.Runtime` (and renaming), over its stores."""

    store: SessionStore
    bus: EventBus

    def has_session(self, session_id: str) -> bool:
        """Whether the session exists."""
        return self.store.trajectories.has_session(session_id)

    def service(self, kind: type[T]) -> T | None:
        """A runtime component of that type, if one runs."""
        return None

    def background(self, session_id: str) -> dict[str, list[dict[str, Any]]]:
        """The session's async tasks (running or ended, with progress) and its timers (next due time).

        Raises:
            SessionNotFoundError: no such session.
        """
        from kairos.runtime.integrations.tasks import TaskManager
        from kairos.runtime.integrations.timers import Timers

        if not self.has_session(session_id):
            raise SessionNotFoundError(session_id)
        tasks, timers = self.service(TaskManager), self.service(Timers)
        task_rows = [
            {"id": t.id, "kind": t.kind, "title": t.title, "status": t.status, "progress": t.progress,
             "exit_code": t.exit_code, "started": t.started, "ended": t.ended}
            for t in (tasks.tasks_of(session_id) if tasks else [])
        ]  # fmt: skip
        timer_rows = [
            {"id": t.id, "message": t.message, "schedule": t.schedule(), "next_due": t.next_due, "fired": t.fired,
             "late": t.late}
            for t in (timers.list(session_id, caller=cast("RuntimeContext", self)) if timers else [])  # Runtime's
        ]  # fmt: skip
        return {"tasks": task_rows, "timers": timer_rows}

    def session_meta(self, session_id: str) -> dict[str, Any]:
        """The meta a session was created with ({} for an unknown one)."""
        return self.store.trajectories.session_meta(session_id)

    def sessions(self, limit: int = 50) -> list[SessionInfo]:
        """Sessions, newest first."""
        return self.store.list(limit)

    def session_info(self, session_id: str) -> SessionInfo:
        """One session's title, creation time and message count.

        Raises:
            SessionNotFoundError: no such session.
        """
        info = self.store.trajectories.session_info(session_id)
        if info is None:
            raise SessionNotFoundError(session_id)
        return info

    def history(self, session_id: str, offset: int = 0, limit: int | None = None) -> list[Message]:
        """The session's messages in order (``offset`` and ``limit`` page through a long one).

        Raises:
            SessionNotFoundError: no such session.
        """
        if not self.has_session(session_id):
            raise SessionNotFoundError(session_id)
        messages = self.store.trajectories.load_messages(session_id)
        return messages[offset : None if limit is None else offset + limit]

    def requests(self, session_id: str) -> list[dict[str, Any]]:
        """What each model request of the session cost: tokens, cached tokens, times, the prefix audit.

        Raises:
            SessionNotFoundError: no such session.
        """
        if not self.has_session(session_id):
            raise SessionNotFoundError(session_id)
        return self.store.trajectories.load_requests(session_id)

    def timeline(self, session_id: str, after: int = 0, limit: int = 500) -> list[BusEvent]:
        """What reached and happened in the session, as published, oldest first after the cursor ``after``.

        Events accepted or dropped (and why), runs, tool calls, requests: the event timeline.

        Raises:
            SessionNotFoundError: no such session.
        """
        if not self.has_session(session_id):
            raise SessionNotFoundError(session_id)
        return self.bus.history(session_id, after, limit)

    def pending(self, session_id: str) -> int:
        """Events queued for the session and not yet taken up."""
        return len(self.store.trajectories.pending_events(session_id))

    def rename_session(self, session_id: str, title: str) -> None:
        """Give a session a new title.

        Raises:
            SessionNotFoundError: no such session.
        """
        if not self.store.trajectories.set_title(session_id, title):
            raise SessionNotFoundError(session_id)

    def compression(self, session_id: str) -> list[dict[str, Any]]:
        """What compression replaced in the session's view, each with the stored original (never changed).

        ``{"seq", "layer", "text", "original"}`` per replaced message, oldest first: ``spill`` (a long result
        moved to a file, a preview left), ``noise`` (a stale result shrunk to a pointer), ``compressed`` (a
        summary), and ``round`` entries (an archived round: ``seq`` is the round number, no single original).

        Raises:
            SessionNotFoundError: no such session.
        """
        if not self.has_session(session_id):
            raise SessionNotFoundError(session_id)
        frozen = self.store.trajectories.frozen_items(session_id, _COMPRESSION)
        messages = self.history(session_id) if frozen else []
        out: list[dict[str, Any]] = []
        for key, text in frozen.items():
            layer, _, number = key.removeprefix(_COMPRESSION).partition("/")
            if layer not in _LAYERS or not number.isdigit():
                continue
            seq = int(number)
            original = messages[seq].content if layer != "round" and seq < len(messages) else None
            out.append({"seq": seq, "layer": layer, "text": text, "original": original})
        out.sort(key=lambda r: (r["seq"], _LAYERS.index(r["layer"])))
        return out


__all__ = ["SessionQueries"]
