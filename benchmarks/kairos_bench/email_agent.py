"""``email-agent`` (book Exp 6-1): an event-driven email agent on the bundled model, no user in the loop.

Per trial: a fresh private mail server (dovecot IMAP + aiosmtpd SMTP on loopback, from
:mod:`kairos.testing.mailserver`), a fresh workspace and runtime with a :class:`MailSource`, the
outbox and one calendar entry. Three mails arrive over SMTP one after another, each once the agent
is idle again (the book's queue processes events in arrival order, one thinking cycle each, which
also gives every scenario its own time and cost): a meeting invite that overlaps the calendar
entry, a customer complaint, an advert. Each trial uses another wording of the three (three
variants), since the model decodes greedily and identical trials would repeat one result.

The agent is the product's (:func:`kairos.app.build_agent`) plus the mail tools, the calendar
tools and ``notify_user``; ``ask_user`` is left out (nobody is there to answer: the experiment is
"no user intervention"). Skills are off to keep the prompt lean. The operator's wishes are the
same in both setups (:data:`SETUPS`) and name no tools:

- ``handlers`` (the documented email-assistant setup): a one-line role as ``instructions``, an
  ``on_email_received`` handler (:data:`MAIL_HANDLER`) whose three cases the agent's own model
  triages, ``[tools] builtins = ["current_time"]`` (no shell or file tools) and
  ``thread_sessions`` (each mail thread in a session of its own);
- ``instructions``: the three wishes as one standing instruction (:data:`INSTRUCTIONS`), every
  built-in tool (the setup this bench measured first).

Scored from the servers' and stores' state, never from the model's words:

- invite: a draft replying to it (``In-Reply-To``) is in Drafts and ``check_calendar`` was called;
- complaint: the message carries ``\\Flagged`` and the outbox holds a ``notify`` message about it
  (naming its order number, sender or the word complaint); ``key_facts`` says whether the order
  number was in it (reported, not required);
- advert: it is in ``Archive`` and nowhere else, not flagged, no draft or mail answered it.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.context.session import SessionStore
from kairos.models.base import Model
from kairos.runtime import Runtime
from kairos.runtime.handlers import Case, EventHandler, Handlers
from kairos.runtime.integrations.calendar import Calendar
from kairos.runtime.integrations.calendar import tools as calendar_tools
from kairos.runtime.integrations.mail import MailSource
from kairos.runtime.integrations.mail import tools as mail_tools
from kairos.runtime.integrations.outbox import Outbox, notify_user
from kairos.runtime.outbound import AgentFinal
from kairos.testing.mailserver import ADDRESS, PASSWORD_ENV, MailServer
from kairos_bench._agent_bench import (
    N_CTX,
    calls_in,
    calls_since,
    make_agent,
    run_trials,
    settle,
    success_summary,
    until,
    usage_since,
)
from kairos_bench._local import bench_model, model_name

SCENARIOS = ("invite", "complaint", "advert")
INSTRUCTIONS = """You are the email assistant of Alice (alice@example.test). New mail reaches you as email events;
handle each one on your own (nobody is there to answer questions), then say in one line what you did.
- A meeting invitation: check my calendar for that time, then draft a reply (accept if I am free, decline
  politely if I am busy). Do not send it.
- A customer complaint: flag it as high priority and notify me with the key facts (who, which order, what went wrong).
- Advertising or newsletters: move it to the Archive folder.
"""
ASSISTANT = """You are the email assistant of Alice (alice@example.test). New mail reaches you as email events;
handle each one on your own (nobody is there to answer questions).
"""
MAIL_HANDLER = EventHandler(
    "Then say in one line what you did.",
    (
        Case(
            "a meeting invitation",
            "check my calendar for that time, then draft a reply (accept if I am free, decline politely if I am "
            "busy). Do not send it.",
        ),
        Case(
            "a customer complaint",
            "flag it as high priority and notify me with the key facts (who, which order, what went wrong).",
        ),
        Case("advertising or a newsletter", "move it to the Archive folder."),
    ),
    type="email.received",
)


@dataclass(frozen=True, slots=True)
class Setup:
    """How the operator set the assistant up (the same three wishes, said two ways)."""

    instructions: str
    handlers: tuple[EventHandler, ...] = ()
    builtins: tuple[str, ...] | None = None
    """``[tools] builtins`` (None: all eight)."""
    thread_sessions: bool = False
    """``[runtime.mail] thread_sessions``: each mail thread in a session of its own."""

    def describe(self) -> dict[str, Any]:
        """The setup as the JSON's params show it."""
        return {
            "instructions": self.instructions,
            "handlers": [asdict(h) for h in self.handlers],
            "builtins": list(self.builtins) if self.builtins is not None else "all",
            "thread_sessions": self.thread_sessions,
        }


SETUPS: dict[str, Setup] = {
    "handlers": Setup(ASSISTANT, (MAIL_HANDLER,), ("current_time",), thread_sessions=True),
    "instructions": Setup(INSTRUCTIONS),
}
"""``handlers``: the documented email-assistant setup (an ``on_email_received`` handler with three cases,
no shell or file tools, each mail thread in its own session: the book's "each event triggers an
independent thinking cycle"); ``instructions``: the same wishes as one standing instruction, default tools,
one shared session."""


@dataclass(frozen=True, slots=True)
class Mail:
    """One incoming mail of a scenario."""

    scenario: str
    sender: str
    subject: str
    body: str
    keys: tuple[str, ...] = ()
    """Complaint: strings a notification about it contains (order number first)."""
    busy: tuple[str, str, str] = ("", "", "")
    """Invite: the calendar entry it overlaps (title, start, end)."""


VARIANTS: tuple[tuple[Mail, Mail, Mail], ...] = (
    (
        Mail(
            "invite",
            "boss@example.org",
            "Meeting: Q1 planning",
            "Hi Alice,\n\nCan we meet on 2026-12-03 from 14:00 to 15:00 UTC to plan Q1?\n\nThanks, Bob",
            busy=("Board review", "2026-12-03T13:30", "2026-12-03T15:00"),
        ),
        Mail(
            "complaint",
            "customer@example.org",
            "Complaint about my order",
            "Order #4471 arrived broken and nobody answers the phone. I want a refund.\n\nJane Miller",
            keys=("4471", "customer@example.org", "jane", "complain"),
        ),
        Mail("advert", "deals@shop.example", "50% off all shoes!", "Huge sale this weekend only. Shop now!"),
    ),
    (
        Mail(
            "invite",
            "pm@example.org",
            "Invitation: design review",
            "Hello Alice,\n\nI'd like to invite you to the design review on 2026-12-04, 10:00-11:00 UTC.\n"
            "Does that work for you?\n\nPriya",
            busy=("Dentist", "2026-12-04T10:30", "2026-12-04T11:30"),
        ),
        Mail(
            "complaint",
            "j.doe@example.net",
            "Very disappointed - order 5823",
            "I was charged twice for order 5823 and support has ignored my two emails. "
            "Please fix this now.\n\nJohn Doe",
            keys=("5823", "j.doe@example.net", "john", "complain"),
        ),
        Mail(
            "advert",
            "news@gadgets.example",
            "Black Friday: gadgets at half price",
            "Save up to 60% on headphones and speakers. Unsubscribe at any time.",
        ),
    ),
    (
        Mail(
            "invite",
            "hr@example.org",
            "Meeting request: 1:1 check-in",
            "Hi Alice, are you free for a 1:1 check-in on 2026-12-07 from 16:00 to 16:30 UTC?\n\nSam",
            busy=("Customer call", "2026-12-07T16:00", "2026-12-07T17:00"),
        ),
        Mail(
            "complaint",
            "m.rossi@example.com",
            "Wrong item delivered",
            "I ordered a blue kettle (order #6190) and received a toaster. This is the second time.\n"
            "I expect a replacement this week.\n\nMarco Rossi",
            keys=("6190", "m.rossi@example.com", "rossi", "complain"),
        ),
        Mail(
            "advert",
            "offers@travel.example",
            "Your exclusive travel deals",
            "Flights to Lisbon from 49 EUR. Book before Sunday!",
        ),
    ),
)


@dataclass
class Snapshot:
    """The mailbox and the outbox after a trial."""

    folders: dict[str, list[tuple[set[str], EmailMessage]]] = field(default_factory=dict)
    notifications: list[str] = field(default_factory=list)
    sent: list[EmailMessage] = field(default_factory=list)
    """Mail the agent sent over SMTP (From: Alice)."""

    def find(self, message_id: str) -> list[tuple[str, set[str]]]:
        """(folder, flags) of every copy of a message."""
        return [
            (name, flags) for name, msgs in self.folders.items() for flags, m in msgs if m["Message-ID"] == message_id
        ]

    def replies_to(self, message_id: str) -> list[EmailMessage]:
        """Drafts and sent mail answering a message."""
        drafts = [m for _, m in self.folders.get("Drafts", []) if m["In-Reply-To"] == message_id]
        return drafts + [m for m in self.sent if m["In-Reply-To"] == message_id]


def _parse(raw: bytes) -> EmailMessage:
    msg = message_from_bytes(raw, policy=policy.default)
    assert isinstance(msg, EmailMessage)
    return msg


def snapshot(server: MailServer, notifications: list[str]) -> Snapshot:
    """Read every folder of the server (blocking: run it in a thread)."""
    client = server.dovecot.imap()
    try:
        names = [str(f[2]) for f in client.list_folders()]
    finally:
        client.logout()
    folders: dict[str, list[tuple[set[str], EmailMessage]]] = {}
    for name in names:
        got = server.folder(name)
        folders[name] = [
            ({f.decode() if isinstance(f, bytes) else str(f) for f in v[b"FLAGS"]}, _parse(v[b"BODY[]"]))
            for v in got.values()
        ]
    sent = [m for m in (_parse(r) for r in server.handler.received) if ADDRESS in str(m["From"] or "")]
    return Snapshot(folders, notifications, sent)


def _uid_calls(calls: list[tuple[int, str, dict[str, Any]]], uid: int | None) -> list[str]:
    return [name for _, name, args in calls if uid is not None and args.get("uid") == uid]


def score(
    scenario: str, mail: Mail, message_id: str, snap: Snapshot, calls: list[tuple[int, str, dict[str, Any]]]
) -> dict[str, Any]:
    """Success and the checks behind it for one scenario (see the module docstring)."""
    where = snap.find(message_id)
    flagged = any("\\Flagged" in flags for _, flags in where)
    replies = snap.replies_to(message_id)
    if scenario == "invite":
        drafts = [m for _, m in snap.folders.get("Drafts", []) if m["In-Reply-To"] == message_id]
        checked = any(name == "check_calendar" for _, name, _ in calls)
        body = _text(drafts[0]).lower() if drafts else ""
        declines = any(w in body for w in ("conflict", "busy", "not available", "unavailable", "decline", "another"))
        return {
            "success": bool(drafts) and checked,
            "checks": {"draft": bool(drafts), "calendar_checked": checked, "draft_declines": declines},
        }
    if scenario == "complaint":
        about = [n for n in snap.notifications if any(k.lower() in n.lower() for k in mail.keys)]
        key_facts = bool(mail.keys) and any(mail.keys[0] in n for n in about)
        return {
            "success": flagged and bool(about),
            "checks": {"flagged": flagged, "notified": bool(about), "key_facts": key_facts},
        }
    folders = {name for name, _ in where}
    archived = {f.lower() for f in folders} == {"archive"}
    untouched = not flagged and not replies
    checks = {"archived": archived, "untouched": untouched, "folders": sorted(folders)}
    return {"success": archived and untouched, "checks": checks}


def _text(msg: EmailMessage) -> str:
    part = msg.get_body(("plain",))
    return str(part.get_content()) if part is not None else ""


async def run_trial(
    llm: Model,
    trial: int,
    root: Path,
    *,
    setup: str = "handlers",
    mail_timeout_s: float = 300.0,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """One trial: a fresh mail server, workspace and runtime; the three mails; one row per scenario."""
    variant = VARIANTS[trial % len(VARIANTS)]
    chosen = SETUPS[setup]
    ws = root / setup / f"trial{trial:02d}" / "ws"  # same path every trial: the system prompt is shared
    ws.mkdir(parents=True)
    server = await asyncio.to_thread(MailServer.start)
    previous = os.environ.get(PASSWORD_ENV)
    os.environ[PASSWORD_ENV] = server.password
    rows: list[dict[str, Any]] = []
    try:
        store = SessionStore(ws, state_dir=ws.parent / "state")
        tools = [*mail_tools(), *calendar_tools(), notify_user]
        agent = make_agent(llm, ws, tools, chosen.instructions, chosen.builtins)
        source = MailSource(server.config(poll_s=2.0, thread_sessions=chosen.thread_sessions))
        outbox = Outbox(store_answers=False)
        handlers = Handlers(chosen.handlers, llm)  # no [runtime] classifier: the agent's model triages
        async with Runtime(agent, store, handlers=handlers, components=[source, outbox]) as rt:
            invite = variant[0]
            Calendar(rt.db).add(*invite.busy)
            if not await until(source.connected.is_set, 60):
                raise RuntimeError("the mail source did not connect to the private dovecot")
            sent: list[tuple[Mail, str, dict[str, Any]]] = []
            sessions: list[str] = []
            for mail in variant:
                cursor = rt.bus.last_cursor()
                t0 = time.perf_counter()
                mid = await asyncio.to_thread(server.send, mail.subject, mail.body, mail.sender)
                arrived = await until(lambda mid=mid: f"email:{mid}" in source.dispatched, 60)  # type: ignore[misc]
                sid = source.session_for(mid) or rt.default_session()
                sessions.append(sid)
                done = arrived and await settle(rt, sid, mail_timeout_s)
                seconds = time.perf_counter() - t0
                usage = usage_since(rt, sid, cursor)
                finals = [p for e in rt.bus.history(sid, cursor) if isinstance(p := e.payload, AgentFinal)]
                sent.append(
                    (
                        mail,
                        mid,
                        {
                            "seconds": round(seconds, 2),
                            **usage.to_record(),
                            "timed_out": not done,
                            "calls": calls_since(rt, sid, cursor),
                            "answer": finals[-1].text[:300] if finals else "",
                        },
                    )
                )
                if progress is not None:
                    progress()
            messages = [m for sid in dict.fromkeys(sessions) for m in rt.store.trajectories.load_messages(sid)]
            notes = [str(m["text"]) for m in outbox.list(limit=1000) if m["kind"] == "notify"]
        snap = await asyncio.to_thread(snapshot, server, notes)
    finally:
        if previous is None:
            os.environ.pop(PASSWORD_ENV, None)
        else:
            os.environ[PASSWORD_ENV] = previous
        await asyncio.to_thread(server.close)
    calls = calls_in(messages)
    uids = _uids(messages)
    for mail, mid, measured in sent:
        verdict = score(mail.scenario, mail, mid, snap, calls)
        rows.append(
            {
                "setup": setup,
                "trial": trial,
                "scenario": mail.scenario,
                "variant": trial % len(VARIANTS),
                "subject": mail.subject,
                "success": verdict["success"],
                **measured,
                "checks": verdict["checks"],
                "actions": _uid_calls(calls, uids.get(mid)),
            }
        )
    return rows


def _uids(messages: list[Any]) -> dict[str, int]:
    """Message-ID → uid, from the email events the model was shown."""
    found: dict[str, int] = {}
    for m in messages:
        for block in m.content.split("event: email.received")[1:]:
            uid, mid = re.search(r"uid: (\d+)", block), re.search(r"message_id: (\S+)", block)
            if uid and mid:
                found[mid.group(1)] = int(uid.group(1))
    return found


async def run_all(llm: Model, trials: int, root: Path, console: Console, setups: Sequence[str]) -> list[dict[str, Any]]:
    """Every setup, every trial in turn, with a progress bar (one step per mail)."""
    rows: list[dict[str, Any]] = []
    for setup in setups:

        def trial(i: int, step: Callable[[], None], setup: str = setup) -> Awaitable[list[dict[str, Any]]]:
            return run_trial(llm, i, root, setup=setup, progress=step)

        rows += await run_trials(console, f"email-agent {setup}", trials, len(SCENARIOS), trial, "actions")
    return rows


def run(
    console: Console | None = None,
    quick: bool = False,
    trials: int | None = None,
    model: str | Model | None = None,
    modes: Sequence[str] | str | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Exp 6-1 on ``model`` (default the bundled ``local``); ``quick`` runs one trial.

    ``modes``: the setups to run (:data:`SETUPS`, default both); ``email_success`` is the first one's.
    """
    console = console or Console()
    n = trials if trials is not None else (1 if quick else 3)
    setups = [m.strip() for m in modes.split(",")] if isinstance(modes, str) else list(modes or SETUPS)
    if unknown := [m for m in setups if m not in SETUPS]:
        raise ValueError(f"unknown email-agent setup(s) {', '.join(unknown)}: choose from {', '.join(SETUPS)}")
    chosen: str | Model = model if model is not None else "local"
    with bench_model(chosen, N_CTX, console) as llm, tempfile.TemporaryDirectory() as d:
        rows = asyncio.run(run_all(llm, n, Path(d), console, setups))
    summary = {
        "setup": setups[0],
        **success_summary([r for r in rows if r["setup"] == setups[0]], SCENARIOS, "email_success"),
    }
    for other in setups[1:]:
        mine = success_summary([r for r in rows if r["setup"] == other], SCENARIOS, "email_success")
        summary |= {f"{key}_{other}": value for key, value in mine.items() if key.endswith("success")}
    return {
        "bench": "email-agent",
        "params": {
            "model": model_name(chosen),
            "trials": n,
            "n_ctx": N_CTX,
            "scenarios": list(SCENARIOS),
            "setups": {name: SETUPS[name].describe() for name in setups},
            "tools": "build_agent with the setup's [tools] builtins + mail tools + calendar tools + notify_user "
            "(no ask_user); skills off",
            "arrival": "one mail at a time, the next once the agent is idle",
            "triage": "the agent's own model (no [runtime] classifier)",
        },
        "rows": rows,
        "summary": summary,
    }


if __name__ == "__main__":
    import json
    import sys

    out = run(quick="--quick" in sys.argv)
    print(json.dumps(out["summary"], indent=2))
