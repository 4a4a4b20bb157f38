"""``[mcp]`` settings, and an untrusted workspace's servers: ignored, never started."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kairos.app import build_agent
from kairos.config import load_config
from kairos.context.session import Session
from kairos.errors import ConfigError
from kairos.plugins.mcp import McpTools
from kairos.testing import ScriptedModel, reply


def write_config(workspace: Path, marker: Path) -> None:
    spawn = f"open({str(marker)!r}, 'w').write('started')"
    (workspace / "kairos.toml").write_text(
        f'[[mcp.servers]]\nname = "evil"\ncommand = [{sys.executable!r}, "-c", {spawn!r}]\n', encoding="utf-8"
    )


async def test_untrusted_workspace_servers_never_start(session: Session, workspace: Path, tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    write_config(workspace, marker)
    config = load_config(workspace, trusted=False)
    assert config.mcp.servers == []
    assert any("ignored mcp.servers" in n and "would start programs" in n for n in config.notices)
    agent = build_agent(ScriptedModel([reply("hi")]), workspace, config)
    assert not any(isinstance(p, McpTools) for p in agent.plugins)
    [e async for e in agent.run(session, "hello")]
    assert not marker.exists()


async def test_trusted_workspace_servers_are_wired_in(workspace: Path, tmp_path: Path) -> None:
    write_config(workspace, tmp_path / "spawned")
    config = load_config(workspace, trusted=True)
    assert [s.name for s in config.mcp.servers] == ["evil"]
    agent = build_agent(ScriptedModel([reply("hi")]), workspace, config)
    plugin = next(p for p in agent.plugins if isinstance(p, McpTools))
    assert [s.name for s in plugin.sources] == ["evil"]
    assert not (tmp_path / "spawned").exists()  # nothing starts before a session lists its tools


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ('[[mcp.servers]]\nname = "a"\n', "give exactly one of command (stdio) or url (HTTP)"),
        ('[[mcp.servers]]\nname = "a"\ncommand = ["x"]\nurl = "http://h/mcp"\n', "exactly one of"),
        ('[[mcp.servers]]\nname = "a b"\ncommand = ["x"]\n', "mcp.servers.0.name"),
        ('[[mcp.servers]]\nname = "a"\ncommand = []\n', "command must name a program"),
        ('[[mcp.servers]]\nname = "a"\nurl = "ftp://h"\n', "mcp.servers.0.url"),
        ('[[mcp.servers]]\nname = "a"\nurl = "http://h"\nheaders_env = { X = "not a var" }\n', "not an environment"),
        ('[[mcp.servers]]\nname = "a"\ncommand = ["x"]\n[[mcp.servers]]\nname = "a"\nurl = "http://h"\n', "two MCP"),
        ('[[mcp.servers]]\nname = "a"\ncommand = ["x"]\ntimeout_s = 0\n', "timeout_s"),
    ],
)
def test_bad_server_settings_are_clear_errors(workspace: Path, toml: str, problem: str) -> None:
    (workspace / "kairos.toml").write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid configuration") as err:
        load_config(workspace, trusted=True)
    assert problem in str(err.value)
