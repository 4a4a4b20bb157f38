"""The web UI in a real browser: Playwright driving Debian's chromium against ``create_app`` under uvicorn.

Every test gets a fresh page that fails the test on a console error or a failed request to the server.
``make test`` installs chromium (like bubblewrap); without it these tests are skipped, saying why.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.runtime import Runtime
from kairos.server import create_app
from kairos.testing import ScriptedModel
from kairos.tools.base import Tool
from tests.server.conftest import live

CHROMIUM = os.environ.get("KAIROS_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]  # fmt: skip
SHOTS = (
    Path(__file__).resolve().parents[2] / "docs" / "screenshots"
    if os.environ.get("KAIROS_SCREENSHOTS")
    else Path(tempfile.gettempdir()) / "kairos-ui-screenshots"
)
"""Where the tests that take screenshots write them: the README's (``KAIROS_SCREENSHOTS=1 pytest tests/ui``), else
a temporary folder, so that a test run leaves the repository as it was."""

playwright_api = pytest.importorskip("playwright.async_api", reason="playwright is missing (make test installs it)")
if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing (make test installs Debian's chromium)", allow_module_level=True)


@asynccontextmanager
async def serve(
    tmp_path: Path, model: ScriptedModel, tools: list[Tool] | None = None, **app_kw: Any
) -> AsyncIterator[tuple[Runtime, str]]:
    """A runtime on ``model`` with its app under uvicorn on loopback: ``(runtime, base_url)``."""
    rt = Runtime(Agent(model, tools=tools or []), SessionStore(tmp_path))
    async with rt, live(create_app(rt, **app_kw)) as (_, url):
        yield rt, url


async def chromium(*extra_args: str) -> AsyncIterator[Any]:
    """Headless Debian chromium with the tests' flags (and ``extra_args``), closed after use."""
    async with playwright_api.async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[*ARGS, *extra_args])
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async for b in chromium():
        yield b


def _refused(text: str) -> bool:
    """Chromium logs every 4xx/5xx reply as a console error; the page shows those itself (tests check it).

    A refused connection is the stream reconnecting after the test stopped its server.
    """
    return text.startswith("Failed to load resource: the server responded with a status of") or text.startswith(
        "Failed to load resource: net::ERR_CONNECTION_REFUSED"
    )


def _aborted(url: str, failure: str | None) -> bool:
    """A request the page gave up on itself (a view left, a stream closed), or one made after the test stopped
    its server (a refresh due then): not a failure of the server."""
    return "/events?" in url or (failure or "").startswith(("net::ERR_ABORTED", "net::ERR_CONNECTION_REFUSED"))


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Any]:
    """A 1280×800 page; console errors and failed requests fail the test (a broken page is a failed test)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    pg = await context.new_page()
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(m.text) if m.type == "error" and not _refused(m.text) else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.on("requestfailed", lambda r: None if _aborted(r.url, r.failure) else problems.append(f"{r.url}: {r.failure}"))
    pg.set_default_timeout(15_000)
    try:
        yield pg
    finally:
        await context.close()
    assert not problems, problems
