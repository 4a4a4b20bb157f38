"""``kairos mcp serve``: the SDK's own client over stdio and HTTP, bearer tokens, and kairos using itself."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.mcp.conftest import free_port, wait_listening
from tests.support.kairos_cli import SRC, kairos_argv, kairos_env
from typer.testing import CliRunner

import kairos
from kairos.agent import Agent
from kairos.cli import app
from kairos.context.session import Session
from kairos.mcp.config import McpConfig, McpServerConfig
from kairos.mcp.review import McpReview
from kairos.models.types import SystemPrompt
from kairos.plugins.mcp import McpTools
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.toolsets import registry as toolsets
from mcp import Client, StdioServerParameters

SERVE = kairos_argv("mcp", "serve")
FILE_TOOLS = ["edit_file", "grep", "list_dir", "read_file", "write_file"]


def stdio_params(workspace: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=SERVE[0], args=[*SERVE[1:], "-w", str(workspace), *extra], env={"PYTHONPATH": str(SRC)}
    )


@pytest.fixture
def http_serve(workspace: Path, tmp_path: Path, user_config_dir: Path) -> Iterator[tuple[str, str]]:
    """``kairos mcp serve --http PORT`` with a bearer token, as a real subprocess."""
    port, token = free_port(), "test-token-123"
    log = (tmp_path / "serve.log").open("wb")
    env = kairos_env(user_config_dir, KAIROS_API_TOKEN=token)
    proc = subprocess.Popen(
        [*SERVE, "--http", str(port), "-w", str(workspace), "-t", "files", "-t", "clock"],
        stdout=log,
        stderr=log,
        env=env,
    )
    try:
        wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        proc.kill()
        proc.wait()
        log.close()


async def test_sdk_client_over_stdio(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("hello from the workspace\n")
    async with Client(stdio_params(workspace), mode="legacy") as client:
        listed = (await client.list_tools()).tools
        assert sorted(t.name for t in listed) == FILE_TOOLS
        read = next(t for t in listed if t.name == "read_file")
        write = next(t for t in listed if t.name == "write_file")
        assert write.annotations is not None and write.annotations.destructive_hint  # the tool's own flags
        assert read.annotations is not None and not read.annotations.destructive_hint
        for name in ("read_file", "list_dir", "grep"):
            tool = next(t for t in listed if t.name == name)
            assert tool.annotations is not None and tool.annotations.read_only_hint is True, name
        assert write.annotations.read_only_hint is False
        assert client.server_info.name == "kairos" and client.server_info.version == kairos.__version__
        assert "path" in read.input_schema["properties"]
        result = await client.call_tool("read_file", {"path": "notes.txt"})
        assert not result.is_error and "hello from the workspace" in result.content[0].text  # type: ignore[union-attr]
        outside = await client.call_tool("read_file", {"path": "/etc/passwd"})
        assert outside.is_error and "outside the workspace" in outside.content[0].text  # type: ignore[union-attr]
        bad = await client.call_tool("read_file", {"path": 7})
        assert bad.is_error and "Invalid arguments for tool 'read_file'" in bad.content[0].text  # type: ignore[union-attr]


async def test_sdk_client_over_http_needs_the_token(http_serve: tuple[str, str], workspace: Path) -> None:
    url, token = http_serve
    async with httpx.AsyncClient() as plain:
        denied = await plain.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert denied.status_code == 401
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        names = sorted(t.name for t in (await client.list_tools()).tools)
        assert names == sorted([*FILE_TOOLS, "current_time"])
        wrote = await client.call_tool("write_file", {"path": "out.txt", "content": "via mcp"})
        assert not wrote.is_error
    assert (workspace / "out.txt").read_text() == "via mcp"


def test_non_loopback_without_token_is_refused(workspace: Path) -> None:
    result = CliRunner().invoke(app, ["mcp", "serve", "--http", "0", "--host", "0.0.0.0", "-w", str(workspace)])
    assert result.exit_code == 1
    assert "refusing to listen on 0.0.0.0 without a bearer token" in result.output


def test_unknown_toolset_is_named(workspace: Path) -> None:
    result = CliRunner().invoke(app, ["mcp", "serve", "-t", "nope", "-w", str(workspace)])
    assert (
        result.exit_code == 1
        and "no toolset named 'nope'; known: clock, execution, files, notify, perception" in result.output
    )


def test_toolset_registry() -> None:
    with pytest.raises(ValueError, match="already registered"):
        toolsets.register(toolsets.Toolset("files", lambda config: [], "again"))
    with pytest.raises(KeyError, match="no toolset named 'x'"):
        toolsets.tools(["x"])
    assert [t.name for t in toolsets.tools(["clock", "clock"])] == ["current_time"]


def test_one_registry_serves_config_runtime_and_mcp() -> None:
    assert {"tasks", "timers", "watch", "outbox", "calendar", "mail"} == set(toolsets.names(runtime=True))
    assert {t.name for t in toolsets.tools(["timers"])} == {"set_timer", "cancel_timer", "list_timers"}
    assert [n for n in toolsets.RUNTIME_ORDER if toolsets.get(n).leader_owned] == ["timers", "watch", "mail"]
    with pytest.raises(KeyError, match="'timers' is not served over MCP: its tools need the kairos runtime"):
        toolsets.tools(["timers"], served=True)  # kairos mcp serve has no Runtime to run them
    with pytest.raises(KeyError, match="an MCP client asks its own user"):
        toolsets.tools(["collaboration"], served=True)


def test_mcp_serve_refuses_a_runtime_toolset_and_says_why(workspace: Path) -> None:
    result = CliRunner().invoke(app, ["mcp", "serve", "-t", "timers", "-w", str(workspace)])
    assert result.exit_code == 1 and "need the kairos runtime (kairos chat, serve or worker)" in result.output


async def test_kairos_uses_kairos_over_mcp(session: Session, workspace: Path, tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "fact.txt").write_text("the answer is 42\n")
    cfg = McpServerConfig(
        name="self",
        command=(*SERVE, "-w", str(served)),
        env={"PYTHONPATH": str(SRC)},
        timeout_s=30,
    )
    review = McpReview()
    plugin = McpTools(McpConfig(servers=[cfg]), workspace, review=review)
    source = plugin.sources[0]
    await source.list_tools()
    review.approve("self", cfg.target, source.listing)
    model = ScriptedModel([reply("", call("self__read_file", {"path": "fact.txt"})), reply("42")])
    agent = Agent(model, plugins=[plugin], system=SystemPrompt("test"))
    try:
        [e async for e in agent.run(session, "what is the answer?")]
        assert sorted(t.name for t in model.requests[0].tools) == [f"self__{n}" for n in FILE_TOOLS]
        result = next(m for m in session.messages if m.role == "tool")
        assert "the answer is 42" in result.content
    finally:
        await plugin.aclose()
    assert sys.executable  # the served process ran on this interpreter


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make test-deps)")
async def test_the_execution_and_perception_toolsets_over_stdio_run_commands_in_the_sandbox(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "guide.md").write_text("# Guide\n\nThe deploy key rotates every Monday.\n")
    outside = tmp_path / "outside" / "escaped.txt"
    outside.parent.mkdir()
    params = stdio_params(workspace, "-t", "execution", "-t", "perception")
    async with Client(params, mode="legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"bash", "python", "read_document", "fetch_url", "read_file"} <= names
        inside = await client.call_tool("bash", {"command": "echo made > made.txt && cat made.txt"})
        assert not inside.is_error and "made" in inside.content[0].text  # type: ignore[union-attr]
        await client.call_tool("bash", {"command": f"echo out > {outside}"})
        doc = await client.call_tool("read_document", {"path": "guide.md"})
        assert not doc.is_error and "rotates every Monday" in doc.content[0].text  # type: ignore[union-attr]
    assert (workspace / "made.txt").read_text() == "made\n"  # the workspace is writable
    assert not outside.exists()  # the rest of the filesystem is not


def test_the_demo_catalog_is_served_by_domain() -> None:
    maps = toolsets.tools(["catalog-maps"])
    assert len(maps) >= 5 and all(t.spec.description for t in maps)
    with pytest.raises(KeyError, match="no toolset named 'catalog-nope'"):
        toolsets.tools(["catalog-nope"])


async def test_a_wrong_token_says_401_and_which_variable(
    http_serve: tuple[str, str], workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kairos.mcp.client import McpServerSource

    url, _ = http_serve
    monkeypatch.setenv("KAIROS_MCP_TOKEN", "Bearer not-the-token")
    cfg = McpServerConfig(name="k", url=url, headers_env={"Authorization": "KAIROS_MCP_TOKEN"}, timeout_s=20)
    source = McpServerSource(cfg, workspace, review=McpReview())
    try:
        assert await source.list_tools() == []
        assert source.error is not None
        assert "401" in source.error and "KAIROS_MCP_TOKEN" in source.error, source.error
    finally:
        await source.aclose()


async def test_mcp_servers_are_shown_approved_and_revoked_over_http(workspace: Path, tmp_path: Path) -> None:
    from tests.mcp.conftest import stdio_config
    from tests.server.conftest import api

    from kairos.mcp.client import McpServerSource
    from kairos.security.review import ApprovalStore
    from kairos.testing import ScriptedModel

    source = McpServerSource(stdio_config(), workspace, review=McpReview(ApprovalStore(tmp_path / "approvals.json")))
    try:
        assert await source.list_tools() == []  # connected, listed, withheld
        async with api(tmp_path, ScriptedModel(), mcp=[source]) as (_, client):
            (server,) = (await client.get("/v1/mcp/servers")).json()["servers"]
            assert server["name"] == "bad" and server["state"] == "up" and server["approval"] == "needs_approval"
            assert len(server["tools"]) == 9 and not any(t["offered"] for t in server["tools"])
            approved = (await client.post("/v1/mcp/servers/bad/approve")).json()
            assert approved["approval"] == "approved" and all(t["offered"] for t in approved["tools"])
            assert len(await source.list_tools()) == 9  # the agent's next turn gets them
            revoked = (await client.post("/v1/mcp/servers/bad/revoke")).json()
            assert revoked["approval"] == "needs_approval" and await source.list_tools() == []
            assert (await client.post("/v1/mcp/servers/nope/approve")).status_code == 404
    finally:
        await source.aclose()
