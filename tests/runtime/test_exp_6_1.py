"""Exp 6-1 (book ch6): an event-driven email agent against real local mail servers, no user in the loop.

Three mails arrive over SMTP; the mail source wakes the agent (IMAP IDLE). A scripted model that
reads each request decides like the book's workflow: a meeting invite → check the calendar, draft a
reply; a customer complaint → extract the key facts, notify the user, flag it high priority; an
advert → archive it. The test checks the servers' state (Drafts, flags, Archive), not the model's words.

``notify_user`` is a local tool here: the outbox module is not on this branch.
"""

from __future__ import annotations

import asyncio
import json
import re
from email import message_from_bytes, policy
from pathlib import Path

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.models.types import Message, ModelRequest, ModelResponse
from kairos.runtime import Runtime
from kairos.runtime.integrations.calendar import Calendar
from kairos.runtime.integrations.calendar import tools as calendar_tools
from kairos.runtime.integrations.mail import MailSource
from kairos.runtime.integrations.mail import tools as mail_tools
from kairos.testing import ScriptedModel, call, reply, trajectory_problems
from kairos.tools.function import tool
from tests.support.mailserver import MailServer, mailserver_fixture  # noqa: F401  (pytest fixture)

NOTIFIED: list[str] = []


@tool(side_effects=True)
def notify_user(message: str) -> str:
    """Tell the user something that needs their attention."""
    NOTIFIED.append(message)
    return "the user was notified"


def _emails(messages: list[Message]) -> list[dict[str, str]]:
    """The email events the model has been shown: uid, subject, body."""
    found: dict[str, dict[str, str]] = {}
    for m in messages:
        for block in m.content.split("event: email.received")[1:]:
            uid, subject = re.search(r"uid: (\d+)", block), re.search(r"subject: (.*)", block)
            if uid and subject:
                found[uid.group(1)] = {"uid": uid.group(1), "subject": subject.group(1).strip(), "text": block}
    return list(found.values())


def agent_policy(request: ModelRequest) -> ModelResponse:
    """What a capable model would do next: one step of the Exp 6-1 workflow per mail still open."""
    messages = list(request.messages)
    done = [(c.name, json.loads(c.arguments), c.id) for m in messages for c in m.tool_calls]
    results = {m.tool_call_id: m.content for m in messages if m.role == "tool"}
    calls = []
    for mail in _emails(messages):
        uid, subject, text = int(mail["uid"]), mail["subject"].lower(), mail["text"]
        mine = [(name, cid) for name, args, cid in done if args.get("uid") == uid or args.get("ref") == uid]
        names = {name for name, _ in mine}
        if "meeting" in subject:
            start, end = re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d", text)[:2]
            checks = [cid for name, args, cid in done if name == "check_calendar" and args["start"] == start]
            if not checks:
                calls.append(call("check_calendar", {"start": start, "end": end}))
            elif "draft_reply" not in names and checks[0] in results:
                busy = results[checks[0]].startswith("conflicts")
                body = "I have a conflict then; could we find another time?" if busy else "Yes, that works for me."
                calls.append(call("draft_reply", {"uid": uid, "body": body}))
        elif "complaint" in subject or "broken" in text.lower():
            if "notify_user" not in {n for n, _, _ in done}:
                order = re.search(r"order #?(\d+)", text, re.IGNORECASE)
                facts = f"Complaint (uid {uid}): order {order.group(1) if order else '?'}, item arrived broken"
                calls.append(call("notify_user", {"message": facts}))
            if "flag_email" not in names:
                calls.append(call("flag_email", {"uid": uid, "flag": "high priority"}))
        elif "move_email" not in names:
            calls.append(call("move_email", {"uid": uid, "folder": "Archive"}))
    return reply("", *calls) if calls else reply("All new mail is handled.")


async def test_the_email_agent_handles_an_invite_a_complaint_and_an_advert(
    mailserver: MailServer, tmp_path: Path
) -> None:
    NOTIFIED.clear()
    store = SessionStore(tmp_path)
    model = ScriptedModel([agent_policy] * 40)
    agent = Agent(model, tools=[*mail_tools(), *calendar_tools(), notify_user])
    source = MailSource(mailserver.config(poll_s=3600))
    async with Runtime(agent, store, components=[source]) as rt:
        Calendar(rt.db).add("Board review", "2026-12-03T13:30", "2026-12-03T15:00")
        await asyncio.wait_for(source.connected.wait(), 30)
        invite = await asyncio.to_thread(
            mailserver.send,
            "Meeting: Q1 planning",
            "Can we meet 2026-12-03T14:00 to 2026-12-03T15:00 to plan Q1?",
            "boss@example.org",
        )
        complaint = await asyncio.to_thread(
            mailserver.send,
            "Complaint about my order",
            "Order #4471 arrived broken and nobody answers the phone. I want a refund.",
            "customer@example.org",
        )
        advert = await asyncio.to_thread(
            mailserver.send, "50% off all shoes!", "Huge sale this weekend only.", "deals@shop.example"
        )

        def settled() -> bool:
            inbox = mailserver.folder("INBOX").values()
            flagged = any(complaint.encode() in m[b"BODY[]"] and b"\\Flagged" in m[b"FLAGS"] for m in inbox)
            archived = any(advert.encode() in m[b"BODY[]"] for m in mailserver.folder("Archive").values())
            return flagged and archived and bool(mailserver.folder("Drafts")) and bool(NOTIFIED)

        async with asyncio.timeout(60):
            while True:
                if await asyncio.to_thread(settled):
                    break
                await asyncio.sleep(0.1)
        await rt.wait_idle(rt.default_session())
        messages = rt.store.trajectories.load_messages(rt.default_session())

    inbox = mailserver.folder("INBOX").values()
    assert not any(advert.encode() in m[b"BODY[]"] for m in inbox)  # moved, not copied
    assert [invite.encode() in m[b"BODY[]"] for m in inbox].count(True) == 1
    (draft,) = mailserver.folder("Drafts").values()
    reply_mail = message_from_bytes(draft[b"BODY[]"], policy=policy.default)
    assert reply_mail["In-Reply-To"] == invite and reply_mail["To"] == "boss@example.org"
    assert b"\\Draft" in draft[b"FLAGS"]
    assert "conflict" in reply_mail.get_content()  # the calendar's Board review overlaps the invite
    checks = [m.content for m in messages if m.role == "tool" and "Board review" in m.content]
    assert checks and checks[0].startswith("conflicts")
    assert len(NOTIFIED) == 1 and "4471" in NOTIFIED[0]
    assert sorted(source.dispatched) == sorted(f"email:{mid}" for mid in (invite, complaint, advert))
    assert trajectory_problems(messages) == []
