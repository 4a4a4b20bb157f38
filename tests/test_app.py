"""The product agent: config switches each context-engineering extension on and off."""

from __future__ import annotations

from pathlib import Path

import pytest

import kairos.config
from kairos.app import build_agent
from kairos.config import load_config
from kairos.context.session import Session
from kairos.errors import ConfigError
from kairos.security.approval import DenyApprover
from kairos.security.defences import INJECTION_WARNING
from kairos.testing import ScriptedModel, call, reply


async def run_turn(agent_model: ScriptedModel, workspace: Path, session: Session, text: str) -> None:
    agent = build_agent(agent_model, workspace, load_config(workspace), approver=DenyApprover())
    async for _ in agent.run(session, text):
        pass


async def test_defaults_offer_skills_status_and_defences(workspace: Path, session: Session) -> None:
    model = ScriptedModel([reply("hi")])
    await run_turn(model, workspace, session, "hello")
    request = model.requests[0]
    names = {t.name for t in request.tools}
    assert {"load_skill", "read_skill_file"} <= names
    assert not names & {"spawn_subagent", "rewrite_todo_list"}  # sub-agents and TODO tools are opt-in
    assert INJECTION_WARNING in request.system_deployment
    assert "Current State" not in request.system_static + request.system_deployment
    assert request.messages[0].content.endswith("] hello")  # (a) timestamps
    assert request.messages[1].content.startswith("<skills_catalog")  # after the user's message
    assert request.messages[-1].content.startswith("<agent_status>")
    assert any("<skills_catalog" in m.content for m in request.messages)


async def test_toml_switches_extensions(workspace: Path, session: Session) -> None:
    (workspace / "kairos.toml").write_text(
        "[status_bar]\nenabled = false\n[skills]\nenabled = false\n[subagents]\nenabled = true\n"
        "[defences]\nwarning = false\n"
    )
    model = ScriptedModel([reply("hi")])
    await run_turn(model, workspace, session, "hello")
    request = model.requests[0]
    names = {t.name for t in request.tools}
    assert {"spawn_subagent", "subagent_status", "message_subagent", "cancel_subagent"} <= names
    assert not names & {"load_skill", "rewrite_todo_list"}
    assert INJECTION_WARNING not in request.system_deployment
    assert not any("<skills_catalog" in m.content for m in request.messages)
    assert request.messages[0].content == "hello"  # no timestamps; the core's basic status remains


async def test_declared_limit_is_enforced_and_confirmation_denies(workspace: Path, session: Session) -> None:
    (workspace / "kairos.toml").write_text(
        '[status_bar]\nlimits = { current_time = 1 }\n[defences]\nconfirm_side_effects = true\napprover = "deny"\n'
    )
    model = ScriptedModel(
        [
            reply("", call("current_time", {"timezone": "UTC"})),
            reply("", call("current_time", {"timezone": "UTC"})),
            reply("", call("write_file", {"path": "out.txt", "content": "x"})),
            reply("done"),
        ]
    )
    await run_turn(model, workspace, session, "time twice, then write a file")
    results = [m.content for m in session.messages if m.role == "tool"]
    assert "Refused by the harness" in results[1] and "at most 1" in results[1]
    assert "Not run" in results[2] and "needs the user's approval" in results[2]
    assert not (workspace / "out.txt").exists()
    assert "Maximum calls" in model.requests[-1].messages[-1].content  # shown in the status too


async def test_todo_tools_are_switched_on_in_toml(workspace: Path, session: Session) -> None:
    (workspace / "kairos.toml").write_text("[status_bar]\ntodo = true\n")
    model = ScriptedModel([reply("", call("rewrite_todo_list", {"items": [{"content": "step one"}]})), reply("ok")])
    await run_turn(model, workspace, session, "plan it")
    assert {"rewrite_todo_list", "update_todo_status"} <= {t.name for t in model.requests[0].tools}
    assert "step one" in model.requests[-1].messages[-1].content  # the list is shown in the status


def test_the_documented_example_config_is_valid(workspace: Path) -> None:
    doc = kairos.config.__doc__ or ""
    example = doc.split("::\n", 1)[1].split("\nEvery section", 1)[0]
    (workspace / "kairos.toml").write_text("\n".join(line[4:] for line in example.splitlines()))
    config = load_config(workspace)
    assert config.subagents.enabled and config.status_bar.todo
    assert config.status_bar.limits["phone_call"].max_calls == 3 and config.defences.confirm_side_effects


def test_invalid_config_is_a_clear_error(workspace: Path) -> None:
    (workspace / "kairos.toml").write_text("[status_bar]\nmode = 'sometimes'\n")
    with pytest.raises(ConfigError, match="status_bar.mode"):
        load_config(workspace)


async def test_every_default_workspace_sends_the_same_system_turn_as_the_install_step_warms(tmp_path: Path) -> None:
    """The prewarmed KV state serves any workspace with the same settings: its system turn is byte-identical."""
    from kairos.app import first_request
    from kairos.context.session import SessionStore

    config = load_config(tmp_path)
    warmed = await first_request(ScriptedModel([]), config)
    for name in ("alice-project", "bob"):
        ws = tmp_path / name
        ws.mkdir()
        (ws / "README.md").write_text("a project")
        model = ScriptedModel([reply("hi")])
        store = SessionStore(ws)
        session = store.new()
        await run_turn(model, ws, session, "hello")
        await session.aclose()
        store.close()
        sent = model.requests[0]
        assert (sent.system_static, sent.system_deployment, sent.tools) == (
            warmed.system_static,
            warmed.system_deployment,
            warmed.tools,
        )
        assert f"workspace {name}" in sent.messages[-1].content  # the status names it instead
