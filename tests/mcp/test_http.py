"""kairos as an MCP client over Streamable HTTP (a real uvicorn on a loopback port)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest
from tests.mcp.conftest import SERVER, WAIT_S, free_port, wait_listening

from kairos.mcp.client import McpServerSource
from kairos.mcp.config import McpServerConfig
from kairos.mcp.review import McpReview
from kairos.tools.base import ToolContext


def spawn(port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(SERVER), "http", str(port)], stdout=log, stderr=log)


async def test_http_server_tools_are_listed_and_called(
    http_server: tuple[str, subprocess.Popen[bytes]], workspace: Path, review: McpReview
) -> None:
    url, _ = http_server
    source = McpServerSource(McpServerConfig(name="web", url=url, timeout_s=20), workspace, review=review)
    try:
        assert await source.list_tools() == []
        review.approve("web", url, source.listing)
        tools = {t.name: t for t in await source.list_tools()}
        ctx = ToolContext(workspace)
        assert (await tools["web__echo"].call({"text": "over http"}, ctx)).content == "over http"
        failed = await tools["web__boom"].call({}, ctx)
        assert failed.is_error and "failed" in failed.content
    finally:
        await source.aclose()


async def test_headers_come_from_the_environment(
    http_server: tuple[str, subprocess.Popen[bytes]],
    workspace: Path,
    review: McpReview,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, _ = http_server
    monkeypatch.setenv("MCP_TEST_AUTH", "Bearer s3cret")
    cfg = McpServerConfig(name="web", url=url, headers_env={"Authorization": "MCP_TEST_AUTH"}, timeout_s=20)
    source = McpServerSource(cfg, workspace, review=review)
    try:
        await source.list_tools()
        review.approve("web", url, source.listing)
        check = {t.name: t for t in await source.list_tools()}["web__has_header"]
        ctx = ToolContext(workspace)
        assert (await check.call({"name": "Authorization", "value": "Bearer s3cret"}, ctx)).content == "yes"
        assert (await check.call({"name": "Authorization", "value": "Bearer other"}, ctx)).content == "no"
        assert "s3cret" not in cfg.model_dump_json()  # the config holds the variable's name only
    finally:
        await source.aclose()


async def test_http_server_that_dies_reports_down(
    http_server: tuple[str, subprocess.Popen[bytes]], workspace: Path, review: McpReview
) -> None:
    url, proc = http_server
    source = McpServerSource(McpServerConfig(name="web", url=url, timeout_s=20), workspace, review=review)
    try:
        await source.list_tools()
        review.approve("web", url, source.listing)
        echo = {t.name: t for t in await source.list_tools()}["web__echo"]
        proc.kill()
        proc.wait()
        async with asyncio.timeout(WAIT_S):
            result = await echo.call({"text": "x"}, ToolContext(workspace))
        assert result.is_error and result.content.startswith("MCP server 'web' is down")
    finally:
        await source.aclose()


async def test_http_server_restarted_on_its_port_is_reconnected(
    workspace: Path, review: McpReview, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    log = (tmp_path / "server.log").open("wb")
    proc = spawn(port, log)
    source = McpServerSource(
        McpServerConfig(name="web", url=url, timeout_s=20, retry_max_s=1), workspace, review=review
    )
    try:
        await asyncio.to_thread(wait_listening, port, proc)
        await source.list_tools()
        review.approve("web", url, source.listing)
        echo = {t.name: t for t in await source.list_tools()}["web__echo"]
        proc.kill()
        proc.wait()
        assert (await echo.call({"text": "x"}, ToolContext(workspace))).content.startswith("MCP server 'web' is down")
        proc = spawn(port, log)
        await asyncio.to_thread(wait_listening, port, proc)
        async with asyncio.timeout(WAIT_S):
            while source.state != "up":  # noqa: ASYNC110  (a state to poll, with a generous bound)
                await asyncio.sleep(0.05)
        assert (await echo.call({"text": "back"}, ToolContext(workspace))).content == "back"
    finally:
        await source.aclose()
        proc.kill()
        proc.wait()
        log.close()


async def test_nothing_listening_is_down_not_a_crash(workspace: Path, review: McpReview) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    source = McpServerSource(McpServerConfig(name="gone", url=url, timeout_s=5), workspace, review=review)
    try:
        assert await source.list_tools() == []
        assert source.state in ("down", "connecting") and source.error
        assert source.describe().startswith("gone: ")
        assert (await source.call("echo", {})).content.startswith("MCP server 'gone' is down")
    finally:
        await source.aclose()


async def test_missing_header_secret_is_named(
    workspace: Path, review: McpReview, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_TOKEN_VAR", raising=False)
    cfg = McpServerConfig(name="auth", url="http://127.0.0.1:9/mcp", headers_env={"Authorization": "NO_SUCH_TOKEN_VAR"})
    source = McpServerSource(cfg, workspace, review=review)
    try:
        assert await source.list_tools() == []
        assert source.error == "set the environment variable NO_SUCH_TOKEN_VAR (the Authorization header)"
    finally:
        await source.aclose()
