"""Reading what a session left behind, from outside the process that wrote it."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from kairos.context.session import SessionStore
from kairos.models.types import Message


def stored(workspace: Path) -> tuple[str, list[Message]]:
    """The workspace's only session and its stored messages, read as they are (no resume, no repair)."""
    store = SessionStore(workspace)
    try:
        (info,) = store.list()
        return info.id, store.trajectories.load_messages(info.id)
    finally:
        store.close()


def results(messages: list[Message]) -> dict[str, str]:
    """Tool results by call id."""
    return {m.tool_call_id or "": m.content for m in messages if m.role == "tool"}


def frozen_in_db(workspace: Path, key: str) -> bool:
    """Whether a value is frozen under ``key``, read through a separate read-only connection."""
    db = workspace / ".kairos" / "kairos.db"
    if not db.exists():
        return False
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute("SELECT 1 FROM frozen WHERE key = ?", (key,)).fetchone() is not None
    except sqlite3.OperationalError:  # the schema is not there yet
        return False
    finally:
        con.close()


def new_session_id(workspace: Path) -> str:
    """A stored, empty session of ``workspace`` that nobody holds."""
    store = SessionStore(workspace)
    try:
        session = store.new("shared")
        asyncio.run(session.aclose())
        return session.id
    finally:
        store.close()
