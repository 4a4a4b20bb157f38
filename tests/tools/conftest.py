"""The tool context most tool tests run in: an empty workspace folder ``ws``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kairos.tools.base import ToolContext


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[ToolContext]:
    ws = tmp_path / "ws"
    ws.mkdir()
    c = ToolContext(workspace=ws)
    yield c
    await c.aclose()
