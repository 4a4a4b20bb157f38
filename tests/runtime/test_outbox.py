"""The outbox: notify and read state, ask_user answered / timed out / closed by a restart, stored answers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.models.types import ModelRequest, ModelResponse
from kairos.runtime import RUNTIME_RESOURCE, Component, Event, Runtime, RuntimeHandle, SqliteBus
from kairos.runtime.integrations.outbox import (
    MAX_ASK_S,
    Outbox,
    OutboxApprover,
    QuestionNotFoundError,
    ask_user,
    notify_user,
)
from kairos.security.approval import ApprovalRequest
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.base import ToolContext

Step = ModelResponse | Callable[[ModelRequest], ModelResponse]


def _ok(request: ModelRequest) -> ModelResponse:
    return reply("ok")


def _runtime(path: Path, outbox: Outbox | None, script: list[Step] | None = None) -> Runtime:
    components: list[Component] = [outbox] if outbox is not None else []
    model = ScriptedModel([*(script or []), *([_ok] * 20)])
    return Runtime(Agent(model, tools=[ask_user, notify_user]), SessionStore(path), components=components)


def _ctx(rt: Runtime, sid: str, workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace, session_id=sid, resources={RUNTIME_RESOURCE: RuntimeHandle(rt, sid)})


async def _until(cond: Callable[[], Any], timeout_s: float = 20.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if cond():
                return
            await asyncio.sleep(0.01)


def _bus(rt: Runtime, type: str, sid: str | None = None) -> list[dict[str, Any]]:
    assert isinstance(rt.bus, SqliteBus)
    return [e.data for e in rt.bus.history(sid, 0) if e.type == type]


async def test_a_notification_is_stored_published_and_kept_unread_until_marked(tmp_path: Path) -> None:
    outbox = Outbox()
    async with _runtime(tmp_path, outbox) as rt:
        await outbox.wait_ready()
        sid = rt.create_session("t")
        ann = rt.create_session("ann's", {"user": "ann"})
        result = await notify_user.call({"message": "the build is green", "priority": "high"}, _ctx(rt, sid, tmp_path))
        assert result.content == "notified" and not result.is_error
        await notify_user.call({"message": "for ann"}, _ctx(rt, ann, tmp_path))
        (published,) = _bus(rt, "outbox.message", sid)
        assert published["text"] == "the build is green" and published["priority"] == "high"
        (unread,) = outbox.list(unread_only=True)
        assert unread["id"] == published["id"] and unread["kind"] == "notify" and not unread["read"]
        assert [m["text"] for m in outbox.list("ann")] == ["for ann"]
        assert outbox.mark_read([unread["id"]], user="ann") == 0  # not ann's message
        assert outbox.mark_read([unread["id"], "m-unknown"]) == 1
        assert outbox.mark_read([unread["id"]]) == 0
        assert outbox.list(unread_only=True) == []
        assert outbox.list()[0]["read"] is True
        bad = await notify_user.call({"message": "   "}, _ctx(rt, sid, tmp_path))
        assert bad.is_error and "must not be empty" in bad.content


async def test_messages_survive_a_restart_while_no_client_is_connected(tmp_path: Path) -> None:
    outbox = Outbox()
    async with _runtime(tmp_path, outbox) as rt:
        await outbox.wait_ready()
        sid = rt.create_session()
        outbox.notify(sid, "while you were away: 3 mails archived")
    again = Outbox()
    async with _runtime(tmp_path, again) as rt:
        await again.wait_ready()
        assert [m["text"] for m in again.list(unread_only=True)] == ["while you were away: 3 mails archived"]


async def test_ask_user_returns_the_answer_given_through_the_outbox(tmp_path: Path) -> None:
    outbox = Outbox()
    async with _runtime(tmp_path, outbox) as rt:
        await outbox.wait_ready()
        sid = rt.create_session()
        args = {"question": "Deploy now?", "options": ["yes", "no"], "timeout_s": 600, "default": "no"}
        asking = asyncio.create_task(ask_user.call(args, _ctx(rt, sid, tmp_path)))
        await _until(outbox.questions)
        (q,) = outbox.questions()
        assert q["text"] == "Deploy now?" and q["status"] == "pending" and q["options"] == ["yes", "no"]
        with pytest.raises(ValueError, match="must be one of: yes, no"):
            outbox.answer(q["id"], "maybe")
        with pytest.raises(QuestionNotFoundError):
            outbox.answer("q-unknown", "yes")
        with pytest.raises(QuestionNotFoundError):
            outbox.answer(q["id"], "yes", user="mallory")
        record = outbox.answer(q["id"], "YES")
        assert record["status"] == "answered" and record["answer"] == "yes" and record["answered_by"] == "user"
        result = await asyncio.wait_for(asking, 20)
        assert result.content == "The user answered: yes"
        with pytest.raises(ValueError, match="already answered"):
            outbox.answer(q["id"], "no")
        assert outbox.questions() == [] and outbox.questions(pending_only=False)[0]["answer"] == "yes"


async def test_ask_user_uses_the_declared_default_when_nobody_answers(tmp_path: Path) -> None:
    outbox = Outbox()
    async with _runtime(tmp_path, outbox) as rt:
        await outbox.wait_ready()
        sid = rt.create_session()
        ctx = _ctx(rt, sid, tmp_path)
        result = await ask_user.call({"question": "Proceed?", "timeout_s": 0.2, "default": "proceed"}, ctx)
        assert result.content == "No answer within 0.2 s; using the declared default: proceed"
        (q,) = outbox.questions(pending_only=False)
        assert q["status"] == "expired" and q["answer"] == "proceed" and q["answered_by"] == "default"
        with pytest.raises(ValueError, match="already expired"):
            outbox.answer(q["id"], "stop")


async def test_ask_user_argument_errors_are_clear(tmp_path: Path) -> None:
    assert ask_user.timeout_s > MAX_ASK_S  # the executor never cuts a question before its own timeout
    bare = await ask_user.call({"question": "x?", "default": "y"}, ToolContext(workspace=tmp_path))
    assert bare.is_error and "needs the runtime" in bare.content
    outbox = Outbox()
    async with _runtime(tmp_path, outbox) as rt:
        await outbox.wait_ready()
        ctx = _ctx(rt, rt.create_session(), tmp_path)
        cases: list[tuple[dict[str, Any], str]] = [
            ({"question": "Proceed?", "timeout_s": 30}, "a default answer is required"),
            ({"question": "Colour?", "options": ["red"], "default": "blue"}, "must be one of the options"),
            ({"question": "Proceed?", "timeout_s": -1, "default": "y"}, "timeout_s must be between"),
            ({"question": " ", "default": "y"}, "question must not be empty"),
        ]
        for args, expected in cases:
            result = await ask_user.call(args, ctx)
            assert result.is_error and expected in result.content, (args, result.content)
        assert outbox.questions(pending_only=False) == []


async def test_a_question_open_at_a_restart_is_closed_with_its_default_and_the_session_told(tmp_path: Path) -> None:
    outbox = Outbox()
    asks = reply("", call("ask_user", {"question": "Overwrite the report?", "timeout_s": 900, "default": "no"}))
    rt = _runtime(tmp_path, outbox, [asks])
    async with rt:
        await outbox.wait_ready()
        sid = rt.create_session()
        await rt.submit(_user("update the report", sid))
        await _until(outbox.questions)
        await rt.aclose(grace_s=0.2)  # the process stops while the tool waits
    again = Outbox()
    async with _runtime(tmp_path, again) as rt2:
        await again.wait_ready()
        (q,) = again.questions(pending_only=False)
        assert q["status"] == "expired" and q["answered_by"] == "restart" and q["answer"] == "no"
        await _until(lambda: _accepted(rt2, sid, "question.closed"))
        await rt2.wait_idle(sid)
        texts = [m.content for m in rt2.store.trajectories.load_messages(sid)]
        assert any("got no answer before the runtime restarted; using the declared default: no" in t for t in texts)
    third = Outbox()
    async with _runtime(tmp_path, third) as rt3:
        await third.wait_ready()
        await rt3.wait_idle(sid)
        assert len(_accepted(rt3, sid, "question.closed")) == 1  # the bus keeps history: told once, in all


async def test_an_answer_given_just_before_a_crash_reaches_the_session_after_restart(tmp_path: Path) -> None:
    outbox = Outbox()
    asks = reply("", call("ask_user", {"question": "Which branch?", "timeout_s": 0}))
    async with _runtime(tmp_path, outbox, [asks]) as rt:
        await outbox.wait_ready()
        sid = rt.create_session()
        await rt.submit(_user("merge it", sid))
        await _until(outbox.questions)
        (q,) = outbox.questions()
        await rt.aclose(grace_s=0.2)
    # answered, but the process died before the waiting call returned it
    rt.db.write("UPDATE outbox_messages SET status = 'answered', answer = 'main' WHERE id = ?", (q["id"],))
    again = Outbox()
    async with _runtime(tmp_path, again) as rt2:
        await again.wait_ready()
        await _until(lambda: _accepted(rt2, sid, "user.input", "outbox"))
        (event,) = _accepted(rt2, sid, "user.input", "outbox")
        assert event["content"].endswith("\nmain") and q["id"] in event["content"]


async def test_final_answers_are_stored_unless_turned_off(tmp_path: Path) -> None:
    outbox = Outbox()
    async with _runtime(tmp_path, outbox, [reply("3 mails archived")]) as rt:
        await outbox.wait_ready()
        sid = rt.create_session()
        await rt.submit(_user("tidy the inbox", sid))
        await rt.wait_idle(sid)
        assert [(m["kind"], m["text"]) for m in outbox.list(unread_only=True)] == [("answer", "3 mails archived")]
    off = tmp_path / "off"
    off.mkdir()
    quiet = Outbox(store_answers=False)
    async with _runtime(off, quiet, [reply("done")]) as rt:
        await quiet.wait_ready()
        sid = rt.create_session()
        await rt.submit(_user("hi", sid))
        await rt.wait_idle(sid)
        assert quiet.list() == []


def _user(text: str, sid: str) -> Event:
    return Event("user.input", text, {"type": "user"}, "test", session=sid)


def _accepted(rt: Runtime, sid: str, type: str, channel: str | None = None) -> list[dict[str, Any]]:
    return [e for e in _bus(rt, "event.accepted", sid) if e["type"] == type and channel in (None, e["channel"])]


async def test_an_interrupted_question_is_closed_as_cancelled(tmp_path: Path) -> None:
    outbox = Outbox()
    asks = reply("", call("ask_user", {"question": "Delete the backups?", "timeout_s": 0}))
    async with _runtime(tmp_path, outbox, [asks]) as rt:
        await outbox.wait_ready()
        sid = rt.create_session()
        await rt.submit(_user("clean up", sid))
        await _until(outbox.questions)
        assert rt.interrupt(sid, "never mind")
        await rt.wait_idle(sid)
        (q,) = outbox.questions(pending_only=False)
        assert q["status"] == "cancelled"
        with pytest.raises(ValueError, match="already cancelled"):
            outbox.answer(q["id"], "yes")


async def test_the_outbox_approver_asks_the_user_and_fails_closed(tmp_path: Path) -> None:
    outbox = Outbox()
    async with _runtime(tmp_path, outbox) as rt:
        await outbox.wait_ready()
        sid = rt.create_session()
        request = ApprovalRequest("write_file", {"path": "a.txt", "content": "\x1b[2Jx"}, "c1", sid)
        approver = OutboxApprover(outbox, timeout_s=600)
        deciding = asyncio.create_task(approver.decide(request))
        await _until(outbox.questions)
        (q,) = outbox.questions()
        assert q["options"] == ["approve", "deny"] and q["default"] == "deny"
        assert q["text"].startswith("Allow write_file(") and "\x1b" not in q["text"]  # shown, not obeyed
        outbox.answer(q["id"], "approve")
        assert (await asyncio.wait_for(deciding, 20)).approved
        deciding = asyncio.create_task(approver.decide(request))
        await _until(outbox.questions)
        outbox.answer(outbox.questions()[0]["id"], "deny")
        no = await asyncio.wait_for(deciding, 20)
        assert not no.approved and no.reason == "the user said no"
        late = await OutboxApprover(outbox, timeout_s=0.2).decide(request)
        assert not late.approved and "nobody answered" in late.reason
    outside = await OutboxApprover(outbox).decide(request)  # the runtime has stopped: cannot ask
    assert not outside.approved and outside.by == "outbox"
