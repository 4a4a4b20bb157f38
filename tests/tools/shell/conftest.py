"""The shell tests' context: a workspace ``ws`` with a ``sub`` folder, in session ``s1``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kairos.tools.base import ToolContext


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[ToolContext]:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    c = ToolContext(workspace=ws, session_id="s1")
    yield c
    await c.aclose()
