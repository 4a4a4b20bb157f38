"""MCP fixtures: the misbehaving test server (stdio or real HTTP on a loopback port) and sources."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kairos.mcp.client import McpServerSource
from kairos.mcp.config import McpServerConfig
from kairos.mcp.review import McpReview
from kairos.security.review import ApprovalStore

SERVER = Path(__file__).parent / "servers" / "misbehaving.py"
WAIT_S = 60.0


def stdio_config(name: str = "bad", *extra: str, **kw: object) -> McpServerConfig:
    return McpServerConfig(name=name, command=(sys.executable, str(SERVER), "stdio", *extra), **kw)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited before listening"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {WAIT_S} s")


@pytest.fixture
def review(tmp_path: Path) -> McpReview:
    return McpReview(ApprovalStore(tmp_path / "approvals.json"))


@pytest.fixture
async def bad(workspace: Path, review: McpReview, tmp_path: Path) -> AsyncIterator[McpServerSource]:
    """The misbehaving server over stdio, connected and approved."""
    source = McpServerSource(stdio_config(timeout_s=20), workspace, review=review, log_dir=tmp_path / "logs")
    assert await source.list_tools() == []  # first use: withheld
    review.approve(source.name, source.config.target, source.listing)
    yield source
    await source.aclose()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The misbehaving server over Streamable HTTP on a free loopback port (a real uvicorn)."""
    port = free_port()
    log = (tmp_path / "http-server.log").open("wb")
    proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)], stdout=log, stderr=log)
    try:
        wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait()
        log.close()


@pytest.fixture(autouse=True)
def _wide_mcp_cli_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """``kairos mcp`` prints through its own consoles: wide, so no message wraps (see tests/conftest.py)."""
    import kairos.cli.mcp

    for console in (kairos.cli.mcp.console, kairos.cli.mcp.err_console):
        monkeypatch.setattr(console, "_width", 10_000)
