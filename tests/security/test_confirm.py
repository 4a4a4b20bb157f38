"""Check-then-confirm: previews, one-time tokens bound to the call, expiry, in the agent and for commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kairos.agent import Agent
from kairos.context.session import Session
from kairos.models.types import SystemPrompt
from kairos.plugins.defences import InjectionDefences
from kairos.security.confirm import PREVIEW_KEY, ConfirmTokens, check, confirm_reason, split_token
from kairos.security.gate import ReviewGate
from kairos.security.reviewer import ReviewConfig
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.audit import AUDIT_RESOURCE, AuditLog
from kairos.tools.base import ToolContext
from kairos.tools.builtins import default_tools
from kairos.tools.function import tool

DROPPED: list[str] = []


@tool(side_effects=True, irreversible=True)
def drop_table(name: str) -> str:
    """Delete a database table and its rows for good.

    Args:
        name: the table
    """
    DROPPED.append(name)
    return f"dropped {name}"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_token_works_once_for_its_own_call_until_it_expires() -> None:
    clock = Clock()
    tokens = ConfirmTokens(ttl_s=60, clock=clock)
    a = tokens.issue("drop_table", {"name": "users"})
    assert tokens.redeem("drop_table", {"name": "orders"}, a) == (
        "was issued for a different call (the tool or its arguments changed)"
    )
    assert tokens.redeem("other", {"name": "users"}, a) is not None
    assert tokens.redeem("drop_table", {"name": "users"}, a) is None  # the mismatches did not spend it
    assert tokens.redeem("drop_table", {"name": "users"}, a) == "is unknown or was already used (each token works once)"
    b = tokens.issue("drop_table", {"name": "users"})
    clock.now += 61
    assert tokens.redeem("drop_table", {"name": "users"}, b) == "expired (tokens are valid for 60 s)"
    assert tokens.redeem("drop_table", {"name": "users"}, "made-up") is not None


def test_the_irreversible_flag_adds_an_optional_token_argument_the_function_never_sees() -> None:
    schema = drop_table.spec.parameters
    assert "confirm_token" in schema["properties"] and schema["required"] == ["name"]
    assert drop_table.irreversible


async def test_the_function_is_called_without_the_token(tmp_path: Path) -> None:
    result = await drop_table.call({"name": "t", "confirm_token": "x"}, ToolContext(tmp_path))
    assert result.content == "dropped t"


def agent_with(model: ScriptedModel, config: ReviewConfig | None = None) -> Agent:
    gate = ReviewGate(config or ReviewConfig())
    return Agent(model, tools=[drop_table], system=SystemPrompt("t", ""), plugins=[InjectionDefences(review=gate)])


def outputs(session: Session) -> list[str]:
    return [m.content for m in session.messages if m.role == "tool"]


def token_in(session: Session) -> str:
    last = [m for m in session.messages if m.role == "tool"][-1].content
    return last.split('"confirm_token": "')[1].split('"')[0]


async def test_an_irreversible_call_previews_then_runs_with_its_token(session: Session, tmp_path: Path) -> None:
    session.tool_context.put(AUDIT_RESOURCE, AuditLog(tmp_path / "audit.jsonl"))
    DROPPED.clear()
    model = ScriptedModel([reply("", call("drop_table", {"name": "logs"}))])
    agent = agent_with(model)
    model.extend([lambda req: reply("", call("drop_table", {"name": "logs", "confirm_token": token_in(session)}))])
    model.extend([reply("done")])
    _ = [e async for e in agent.run(session, "drop the logs table")]
    first, second = outputs(session)
    assert (
        "Not run yet: this is a preview" in first
        and "'drop_table' needs confirming because it cannot be undone" in first
    )
    assert '"name": "logs"' in first
    assert second == "dropped logs" and DROPPED == ["logs"]
    lines = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert lines[0]["decision"].startswith("preview (confirm") and lines[1]["outcome"] == "ok"


async def test_a_reused_or_foreign_token_does_not_run_the_call(session: Session) -> None:
    DROPPED.clear()
    model = ScriptedModel([reply("", call("drop_table", {"name": "logs"}))])
    agent = agent_with(model)
    spent: list[str] = []

    def with_token(name: str) -> Any:
        def step(_: Any) -> Any:
            if not spent:
                spent.append(token_in(session))
            return reply("", call("drop_table", {"name": name, "confirm_token": spent[0]}))

        return step

    model.extend([with_token("logs"), with_token("logs"), with_token("users"), reply("stop")])
    _ = [e async for e in agent.run(session, "drop the logs table")]
    outs = outputs(session)
    assert outs[1] == "dropped logs" and DROPPED == ["logs"]
    assert "the confirm token is unknown or was already used" in outs[2]
    assert "the confirm token is unknown or was already used" in outs[3] and DROPPED == ["logs"]


async def test_confirmation_can_be_switched_off(session: Session) -> None:
    DROPPED.clear()
    model = ScriptedModel([reply("", call("drop_table", {"name": "t"})), reply("ok")])
    _ = [e async for e in agent_with(model, ReviewConfig(confirm_irreversible=False)).run(session, "drop t")]
    assert DROPPED == ["t"]


def test_commands_carry_the_token_as_a_trailing_comment() -> None:
    bash = next(t for t in default_tools() if t.name == "bash")
    args, token = split_token(bash, {"command": "rm -rf ~/old  # confirm: Ab_9-x", "timeout_s": 5})
    assert (args, token) == ({"command": "rm -rf ~/old", "timeout_s": 5}, "Ab_9-x")
    assert split_token(bash, {"command": "echo '#confirm'"}) == ({"command": "echo '#confirm'"}, None)
    assert confirm_reason(bash, {"command": "ls"}, irreversible=True, dangerous_commands=True) == ""
    why = confirm_reason(bash, {"command": "git push --force origin main"}, irreversible=True, dangerous_commands=True)
    assert why == "dangerous command: force push"
    assert confirm_reason(bash, {"command": "git push -f"}, irreversible=True, dangerous_commands=False) == ""


async def test_a_dangerous_command_previews_and_runs_with_its_comment_token(session: Session) -> None:
    bash = next(t for t in default_tools() if t.name == "bash")
    ctx = session.tool_context
    cmd = "rm -rf ~/.cache/kairos-test-nothing-here"
    why = confirm_reason(bash, {"command": cmd}, irreversible=True, dangerous_commands=True)
    preview = check(bash, {"command": cmd}, ctx, reason=why, ttl_s=60)
    assert preview is not None and not preview.is_error
    token = preview.metadata[PREVIEW_KEY]["token"]
    assert f"# confirm: {token}" in preview.content
    assert check(bash, {"command": f"{cmd}  # confirm: {token}"}, ctx, reason=why, ttl_s=60) is None
    again = check(bash, {"command": f"{cmd}  # confirm: {token}"}, ctx, reason=why, ttl_s=60)
    assert again is not None and again.is_error and "already used" in again.content
