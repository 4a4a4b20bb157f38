"""The browser agent's tests: a small local shop to browse (``site/``), served from loopback.

``demo_site`` serves ``tests/browser/site`` (static HTML, CSS and JS; nothing from the network) from
127.0.0.1 on a free port and yields its base URL. ``chromium_available`` skips a test without Debian's chromium.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

SITE = Path(__file__).parent / "site"
"""The demo shop: search, results, product, cart and checkout, confirmation, an account page with "Delete account",
and a review that tries to steer the agent ("Ignore your previous instructions …", on the glass kettle's page)."""
CHROMIUM = os.environ.get("KAIROS_CHROMIUM", "/usr/bin/chromium")


def chromium_available() -> None:
    """Skip the calling test when Debian's chromium (or Playwright) is missing, saying why."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (make browser-deps installs Debian's chromium)")
    pytest.importorskip("playwright.async_api", reason="playwright is missing (the `browser` extra installs it)")


class _Quiet(SimpleHTTPRequestHandler):
    """The site's files, without a log line per request."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


@pytest.fixture
def demo_site() -> Iterator[str]:
    """The demo shop on ``http://127.0.0.1:<free port>`` (no trailing slash), stopped after the test."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="demo-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]  # fmt: skip
"""The UI tests' chromium flags (tests/ui/conftest.py): nothing of chromium's own phones home."""


@pytest.fixture
async def shop_page() -> Any:
    """A 1280×800 page in headless chromium whose every request is checked: one that leaves loopback fails the
    test (and is aborted). Console errors fail it too. Yields ``(page, urls)``: the URLs requested, in order."""
    chromium_available()
    from urllib.parse import urlsplit

    from playwright.async_api import async_playwright

    urls: list[str] = []
    problems: list[str] = []

    async def check(route: Any) -> None:
        url = route.request.url
        urls.append(url)
        if urlsplit(url).scheme == "data" or urlsplit(url).hostname == "127.0.0.1":
            await route.continue_()
        else:
            problems.append(f"left loopback: {url}")
            await route.abort()

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            await context.route("**/*", check)
            page = await context.new_page()
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.set_default_timeout(15_000)
            yield page, urls
            await context.close()
        finally:
            await browser.close()
    assert not problems, problems
