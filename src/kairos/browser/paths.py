"""Where a session's browser keeps its files (the web UI reads the latest screenshot from here)."""

from __future__ import annotations

import re
from pathlib import Path

SCREEN_FILE = "screen.png"
"""The latest observation's screenshot, with the element numbers drawn on it."""
PAGE_FILE = "page.json"
"""The latest observation: ``{"url", "title", "elements": [{"index", "role", "name", "box"}...], "at"}``."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def browser_dir(state_dir: Path, session_id: str) -> Path:
    """``<state>/browser/<session>``: the session's profile, screenshot and page record."""
    return state_dir / "browser" / (_UNSAFE.sub("_", session_id) or "default")


def screen_path(state_dir: Path, session_id: str) -> Path:
    """The latest numbered screenshot of ``session_id`` (may not exist yet)."""
    return browser_dir(state_dir, session_id) / SCREEN_FILE


def page_path(state_dir: Path, session_id: str) -> Path:
    """The latest observation record of ``session_id`` (may not exist yet)."""
    return browser_dir(state_dir, session_id) / PAGE_FILE
