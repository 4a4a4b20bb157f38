"""Collaboration: request_approval / request_input (outbox, terminal, defaults) and notify (SMTP, webhook)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from email import message_from_bytes
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.runtime import RUNTIME_RESOURCE, Runtime, RuntimeHandle
from kairos.runtime.integrations.outbox import Outbox
from kairos.server.auth import verify
from kairos.testing import ScriptedModel, reply
from kairos.tools.base import Tool, ToolContext
from kairos.tools.toolsets import NotifyConfig, collaboration_tools
from kairos.tools.toolsets.collaboration import HUMAN_RESOURCE, TerminalHuman

from .conftest import HttpFixture, Route, run


def named(tools: list[Tool]) -> dict[str, Tool]:
    return {t.name: t for t in tools}


class Scripted:
    """A Human that answers from a list (None: nobody answers, the default stands)."""

    def __init__(self, answers: list[str | None]) -> None:
        self.answers = answers
        self.asked: list[dict[str, Any]] = []

    async def wait_answer(
        self, session: str, question: str, *, options: Sequence[str] = (), timeout_s: float = 300, default: str = ""
    ) -> tuple[str, bool]:
        self.asked.append({"session": session, "question": question, "options": list(options), "default": default})
        answer = self.answers.pop(0)
        return (default, False) if answer is None else (answer, True)


async def test_request_approval_answers_and_conservative_default(ctx: ToolContext) -> None:
    human = Scripted(["approve", None])
    t = named(collaboration_tools(human=human))["request_approval"]
    assert t.spec.parameters["properties"]["default"]["default"] == "deny"
    yes = json.loads((await run(t, ctx, question="Delete the drafts?")).content)
    assert yes == {"approved": True, "answer": "approve", "by": "user"}
    no = json.loads((await run(t, ctx, question="Wire 100 EUR?", timeout_s=5)).content)
    assert no["approved"] is False and no["by"] == "default" and "declared default 'deny'" in no["note"]
    assert human.asked[0]["options"] == ["approve", "deny"] and human.asked[0]["default"] == "deny"


async def test_request_input_needs_a_default_and_a_sane_timeout(ctx: ToolContext) -> None:
    human = Scripted(["main", None])
    t = named(collaboration_tools(human=human))["request_input"]
    assert "default" in t.spec.parameters["required"]
    got = json.loads((await run(t, ctx, question="Which branch?", default="staging")).content)
    assert got == {"answer": "main", "by": "user"}
    dflt = json.loads((await run(t, ctx, question="Which branch?", default="staging", timeout_s=2)).content)
    assert dflt["answer"] == "staging" and dflt["by"] == "default"
    bad: list[dict[str, Any]] = [
        {"default": " "},
        {"default": "x", "timeout_s": 0},
        {"default": "x", "timeout_s": 10**9},
    ]
    for args in bad:
        res = await run(t, ctx, question="q?", **args)
        assert res.is_error and res.content.startswith("Not asked")
    assert len(human.asked) == 2  # invalid calls never reached the human


async def test_a_human_in_the_context_wins_over_the_fallback(ctx: ToolContext) -> None:
    fallback, given = Scripted(["deny"]), Scripted(["approve"])
    ctx.put(HUMAN_RESOURCE, given)
    t = named(collaboration_tools(human=fallback))["request_approval"]
    assert json.loads((await run(t, ctx, question="ok?")).content)["approved"] is True
    assert not fallback.asked and given.asked


# --- under the runtime: the outbox answers -----------------------------------------------------


async def _until(cond: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    async with asyncio.timeout(timeout_s):
        while True:
            if found := cond():
                return found
            await asyncio.sleep(0.01)


async def test_under_the_runtime_questions_go_through_the_outbox(tmp_path: Path) -> None:
    outbox = Outbox()
    tools = named(collaboration_tools(human=Scripted([])))  # the fallback must not be used
    agent = Agent(ScriptedModel([reply("ok")] * 5), tools=list(tools.values()))
    async with Runtime(agent, SessionStore(tmp_path), components=[outbox]) as rt:
        await outbox.wait_ready()
        sid = rt.create_session("t")
        ctx = ToolContext(workspace=tmp_path, session_id=sid, resources={RUNTIME_RESOURCE: RuntimeHandle(rt, sid)})
        call = asyncio.ensure_future(run(tools["request_approval"], ctx, question="Deploy now?", timeout_s=60))
        (q,) = await _until(outbox.questions)
        assert q["text"] == "Deploy now?" and q["options"] == ["approve", "deny"] and q["default"] == "deny"
        outbox.answer(q["id"], "approve")
        assert json.loads((await call).content) == {"approved": True, "answer": "approve", "by": "user"}
        # nobody answers: the declared default, and the question is closed as expired
        res = await run(tools["request_input"], ctx, question="Branch?", default="staging", timeout_s=1)
        assert json.loads(res.content)["answer"] == "staging"
        closed = outbox.questions(pending_only=False)[-1]
        assert closed["status"] == "expired" and closed["answer"] == "staging"


# --- the terminal -----------------------------------------------------------------------------


async def test_terminal_human_reads_a_line_and_keeps_a_late_read(ctx: ToolContext) -> None:
    lines: list[str] = []
    release = threading.Event()
    prompts: list[str] = []

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        if not lines:
            assert release.wait(60)
        return lines.pop(0)

    human = TerminalHuman(ask=ask, interactive=True)
    t = named(collaboration_tools(human=human))["request_approval"]
    # the first read times out: the default; the read stays pending
    late = json.loads((await run(t, ctx, question="Go?", timeout_s=1)).content)
    assert late["by"] == "default" and late["approved"] is False
    # the next question waits on that same read instead of starting a second one
    pending = asyncio.ensure_future(run(t, ctx, question="Go now?", timeout_s=60))
    lines.append("approve\n")
    release.set()
    assert json.loads((await pending).content)["approved"] is True
    assert len(prompts) == 1 and "[approve/deny]" in prompts[0] and "no answer in 1 s: deny" in prompts[0]
    lines.append("maybe\n")
    odd = json.loads((await run(t, ctx, question="Go?", timeout_s=30)).content)
    assert odd["by"] == "default"  # an answer that is not an option is not taken as one


async def test_no_terminal_means_the_default_at_once(ctx: ToolContext) -> None:
    def never(prompt: str) -> str:
        raise AssertionError("must not read without a terminal")

    t = named(collaboration_tools(human=TerminalHuman(ask=never, interactive=False)))["request_input"]
    res = json.loads((await run(t, ctx, question="Name?", default="anonymous", timeout_s=600)).content)
    assert res["answer"] == "anonymous" and res["by"] == "default" and "terminal" in res["note"]


# --- notify: webhook --------------------------------------------------------------------------


def _webhook_cfg(url: str, **extra: Any) -> NotifyConfig:
    return NotifyConfig.model_validate({"channels": [{"name": "ops", "kind": "webhook", "url": url, **extra}]})


async def test_webhook_is_signed_like_kairos_serve_checks(
    ctx: ToolContext, http_fixture: HttpFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_NOTIFY_SECRET", "hook-secret")
    http_fixture.routes["/hook"] = Route(status=204, content_type="text/plain")
    cfg = _webhook_cfg(http_fixture.url("/hook"), secret_env="TEST_NOTIFY_SECRET")
    t = named(collaboration_tools(cfg))["notify"]
    assert t.side_effects and "ops (webhook)" in t.spec.description
    res = await run(t, ctx, channel="ops", message="backup failed", subject="Backup")
    assert not res.is_error and "HTTP 204" in res.content and "hook-secret" not in res.content
    req = http_fixture.requests[-1]
    h = {k.lower(): v for k, v in req["headers"].items()}
    assert verify("hook-secret", req["body"], h["x-kairos-signature"], h["x-kairos-timestamp"]) == ""
    assert verify("other", req["body"], h["x-kairos-signature"], h["x-kairos-timestamp"]) == "signature mismatch"
    body = json.loads(req["body"])
    assert body["message"] == "backup failed" and body["subject"] == "Backup" and body["channel"] == "ops"


async def test_webhook_errors(ctx: ToolContext, http_fixture: HttpFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    http_fixture.routes["/down"] = Route(status=500, content_type="text/plain", body=b"boom")
    t = named(collaboration_tools(_webhook_cfg(http_fixture.url("/down"))))["notify"]
    failed = await run(t, ctx, channel="ops", message="x")
    assert failed.is_error and "HTTP 500" in failed.content
    unknown = await run(t, ctx, channel="sms", message="x")
    assert unknown.is_error and "configured channels are: ops (webhook)" in unknown.content
    assert (await run(t, ctx, channel="ops", message="  ")).is_error
    monkeypatch.delenv("TEST_NOTIFY_SECRET", raising=False)
    nosecret = named(collaboration_tools(_webhook_cfg(http_fixture.url("/down"), secret_env="TEST_NOTIFY_SECRET")))
    res = await run(nosecret["notify"], ctx, channel="ops", message="x")
    assert res.is_error and "TEST_NOTIFY_SECRET is not set" in res.content
    assert len([r for r in http_fixture.requests if r["path"] == "/down"]) == 1  # unsigned was never sent


def test_notify_is_offered_only_with_channels_and_config_is_checked() -> None:
    assert "notify" not in named(collaboration_tools())
    with pytest.raises(ValueError, match="unique"):
        NotifyConfig.model_validate({"channels": [{"name": "a", "kind": "webhook", "url": "https://x"}] * 2})
    with pytest.raises(ValueError, match="needs url"):
        NotifyConfig.model_validate({"channels": [{"name": "a", "kind": "webhook"}]})
    with pytest.raises(ValueError, match="needs host"):
        NotifyConfig.model_validate({"channels": [{"name": "a", "kind": "smtp", "host": "h"}]})


# --- notify: SMTP (aiosmtpd on loopback) ------------------------------------------------------


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope)
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def smtp_server() -> Iterator[tuple[_Inbox, int]]:
    inbox = _Inbox()

    def auth(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        ok = isinstance(data, LoginPassword) and data.login == b"bot" and data.password == b"s3cret"
        return AuthResult(success=ok, handled=False)

    port = _free_port()
    ctl = Controller(inbox, hostname="127.0.0.1", port=port, authenticator=auth, auth_require_tls=False)
    ctl.start()
    try:
        yield inbox, port
    finally:
        ctl.stop()


def _smtp_cfg(port: int, **extra: Any) -> NotifyConfig:
    chan = {"name": "me", "kind": "smtp", "host": "127.0.0.1", "port": port, "starttls": False,
            "from_address": "kairos@example.org", "to": ["me@example.org"], **extra}  # fmt: skip
    return NotifyConfig.model_validate({"channels": [chan]})


async def test_smtp_notification_arrives(
    ctx: ToolContext, smtp_server: tuple[_Inbox, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox, port = smtp_server
    monkeypatch.setenv("TEST_SMTP_PASSWORD", "s3cret")
    t = named(collaboration_tools(_smtp_cfg(port, user="bot", password_env="TEST_SMTP_PASSWORD")))["notify"]
    assert "me (email)" in t.spec.description
    res = await run(t, ctx, channel="me", message="The job finished.\nAll green.", subject="Job done")
    assert not res.is_error, res.content
    assert "mailed to 1 recipient(s)" in res.content
    (env,) = await _until(lambda: inbox.messages)
    assert env.rcpt_tos == ["me@example.org"]
    msg = message_from_bytes(env.content)
    assert msg["Subject"] == "Job done" and "All green." in msg.get_payload()


async def test_smtp_errors_are_clear(
    ctx: ToolContext, smtp_server: tuple[_Inbox, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox, port = smtp_server
    monkeypatch.setenv("TEST_SMTP_PASSWORD", "wrong")
    t = named(collaboration_tools(_smtp_cfg(port, user="bot", password_env="TEST_SMTP_PASSWORD")))["notify"]
    bad = await run(t, ctx, channel="me", message="x")
    assert bad.is_error and "refused the login" in bad.content and "wrong" not in bad.content
    monkeypatch.delenv("TEST_SMTP_PASSWORD")
    missing = await run(t, ctx, channel="me", message="x")
    assert missing.is_error and "TEST_SMTP_PASSWORD is not set" in missing.content
    tls = named(collaboration_tools(_smtp_cfg(port, starttls=True)))["notify"]
    no_tls = await run(tls, ctx, channel="me", message="x")
    assert no_tls.is_error and "STARTTLS" in no_tls.content
    closed = named(collaboration_tools(_smtp_cfg(_free_port())))["notify"]
    down = await run(closed, ctx, channel="me", message="x")
    assert down.is_error and "cannot send through 127.0.0.1" in down.content
    assert inbox.messages == []
