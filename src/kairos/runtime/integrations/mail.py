"""Email in (IMAP IDLE, polling as fallback) and out (SMTP) for the runtime (book ch6 §3.3, Exp 6-1).

:class:`MailSource` is a runtime component: it logs in, takes up the folder's new mail, then waits
in IMAP IDLE so a new message wakes it at once; when the server lacks IDLE or IDLE fails it polls
every ``poll_s`` seconds. IDLE reports only what arrives while it runs (dovecot measured: a message
that landed between the last SEARCH and IDLE went unreported for 40 s and more), so IDLE is ended and
the folder searched again every ``idle_renew_s`` (60 s): that bounds how late such a message is seen.
Each message becomes an ``email.received`` event whose id is ``email:<Message-ID>``, so redelivery
is idempotent; the highest uid taken up is kept in ``runtime.db`` (``mail_state``) so a restart does
not dispatch old mail again. A refused login raises :class:`MailAuthError` (a missing password a
ConfigError): the runtime reports it and restarts the component with backoff.

The tools in :func:`tools` (send, draft, move, flag, read) reach the component through the
session's runtime handle; each opens its own short IMAP connection. The password comes only from
the environment variable the config names: never from workspace files, never into events, tool
results or the trajectory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from imapclient.exceptions import IMAPClientError  # type: ignore[import-untyped]

from kairos.config import MailConfig
from kairos.runtime.events import Event
from kairos.runtime.handle import RuntimeContext, caller_of
from kairos.runtime.integrations import _mail_client as mc
from kairos.runtime.integrations._mail_client import MailAuthError, MailError
from kairos.runtime.integrations._mail_parse import ParsedMail
from kairos.runtime.runtime import runtime_service
from kairos.storage import Migration
from kairos.tools.base import Resource, Tool, ToolContext, ToolResult
from kairos.tools.executor import idempotency_key
from kairos.tools.function import tool

if TYPE_CHECKING:
    from imapclient import IMAPClient  # type: ignore[import-untyped]

log = logging.getLogger("kairos.runtime.integrations.mail")
IDEMPOTENCY_RESOURCE: Resource[str] = Resource("kairos.idempotency_key")
"""A fixed idempotency key for the mail and calendar tools (tests); otherwise the executor's key of the call
(:func:`~kairos.tools.executor.idempotency_key`, stable across a crash and a redelivery)."""
IDLE_CHECK_S = 30.0
"""Longest a thread blocks in one IDLE wait (cancelling also closes the socket, so it returns at once)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS mail_state (
    account TEXT PRIMARY KEY, uidvalidity INTEGER NOT NULL, last_uid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS mail_threads (
    account TEXT NOT NULL, message_id TEXT NOT NULL, session TEXT NOT NULL, PRIMARY KEY (account, message_id));
CREATE TABLE IF NOT EXISTS mail_sent (
    key TEXT PRIMARY KEY, message_id TEXT NOT NULL, recipients TEXT NOT NULL, subject TEXT NOT NULL, at REAL NOT NULL);
"""
MIGRATIONS: tuple[Migration, ...] = (SCHEMA,)
"""The ``mail`` tables' versions in ``runtime.db``; 1 is the schema from before versions (kairos.storage)."""


class MailSource:
    """The mail component (``name = "mail"``); see the module docstring.

    Attributes ``mode`` (``idle``/``poll``/``""``), ``idle_wakeups``, ``polls`` and ``dispatched``
    (event ids) say how mail was noticed, for status displays and tests. ``connected`` is set once the
    folder is watched (in IDLE, or between polls): a message that arrives from then on is seen at once.
    """

    name = "mail"
    leader_only = True  # one mailbox reader per deployment (a leader lease)

    def __init__(self, config: MailConfig) -> None:
        self.config = config
        self.mode = ""
        self.idle_wakeups = 0
        self.polls = 0
        self.dispatched: list[str] = []
        self.connected = asyncio.Event()
        self._runtime: RuntimeContext | None = None

    # -- the source ----------------------------------------------------------------------------

    async def run(self, runtime: RuntimeContext) -> None:
        """Connect and deliver new mail until cancelled; connection errors end it (the runtime restarts it)."""
        self._runtime = runtime
        runtime.db.ensure("mail", MIGRATIONS)
        password = self.config.password()
        client = await asyncio.to_thread(mc.connect, self.config, password)
        try:
            await self._serve(runtime, client)
        except (OSError, IMAPClientError) as e:  # a dropped connection: the runtime reconnects with backoff
            where = f"{self.config.imap_host}:{self.config.imap_port}"
            raise MailError(f"the IMAP connection to {where} failed: {type(e).__name__}: {e}") from None
        finally:
            self.connected.clear()
            self.mode = ""
            mc.close(client)

    async def _serve(self, runtime: RuntimeContext, client: IMAPClient) -> None:
        cfg = self.config
        try:
            info = await asyncio.to_thread(client.select_folder, cfg.folder)
        except Exception as e:
            raise MailError(f"cannot open the folder {cfg.folder!r}: {e}") from None
        validity = int(info.get(b"UIDVALIDITY", 0))
        rows = runtime.db.read("SELECT uidvalidity, last_uid FROM mail_state WHERE account = ?", (cfg.account,))
        last = int(rows[0][1]) if rows and int(rows[0][0]) == validity else None
        if last is None:  # first start (or the folder was rebuilt): unseen mail is new, the rest is old
            await self._deliver(runtime, client, validity, ["UNSEEN"], 0)
            floor = int(info.get(b"UIDNEXT", 1)) - 1
            last = max(floor, self._last(runtime, validity))
            self._save(runtime, validity, last)
        use_idle = cfg.idle and b"IDLE" in await asyncio.to_thread(client.capabilities)
        while True:
            last = await self._deliver(runtime, client, validity, ["UID", f"{last + 1}:*"], last)
            if use_idle:
                try:
                    await self._idle(client)
                    continue
                except MailError as e:  # the server refused IDLE: poll instead on this connection
                    log.warning("IMAP IDLE failed (%s); polling every %ss", e, cfg.poll_s)
                    use_idle = False
            self.mode = "poll"
            self.connected.set()
            await asyncio.sleep(cfg.poll_s)
            self.polls += 1
            await asyncio.to_thread(client.noop)

    async def _idle(self, client: IMAPClient) -> None:
        """Wait in IDLE until the folder gets new mail or the renew time passes."""
        try:
            await asyncio.to_thread(client.idle)
        except Exception as e:
            raise MailError(f"IDLE refused: {e}") from None
        self.mode = "idle"
        self.connected.set()
        deadline = time.monotonic() + self.config.idle_renew_s
        woken = False
        while not woken and (left := deadline - time.monotonic()) > 0:
            responses = await asyncio.to_thread(client.idle_check, min(IDLE_CHECK_S, left))
            for r in responses:
                if isinstance(r, tuple) and len(r) >= 2 and r[1] in (b"EXISTS", b"RECENT"):
                    woken = True
                elif isinstance(r, tuple) and r and r[0] == b"BYE":
                    raise ConnectionError("the IMAP server closed the connection")
        await asyncio.to_thread(client.idle_done)
        if woken:
            self.idle_wakeups += 1

    async def _deliver(
        self, runtime: RuntimeContext, client: IMAPClient, validity: int, criteria: list[str], last: int
    ) -> int:
        """Submit every message matching ``criteria`` above ``last``; returns the new highest uid."""
        uids = sorted(u for u in await asyncio.to_thread(client.search, criteria) if u > last)
        for uid in uids:
            got = await asyncio.to_thread(mc.fetch, client, uid, self.config.max_message_bytes)
            if got is not None:
                event = self.event(got[0], uid)
                if self.config.thread_sessions:
                    event = replace(event, session=self._thread_session(runtime, got[0]))
                await runtime.submit(event)
                self.dispatched.append(event.id)
            last = max(last, uid)
            self._save(runtime, validity, last)
        return last

    def event(self, mail: ParsedMail, uid: int) -> Event:
        """The ``email.received`` event for a parsed message."""
        context: dict[str, Any] = {
            "subject": mail.subject,
            "message_id": mail.message_id,
            "date": mail.date,
            "to": mail.to,
            "uid": uid,
        }
        if mail.problems:
            context["problems"] = "; ".join(mail.problems)
        return Event(
            "email.received",
            mail.text(self.config.max_body_chars),
            source={"type": "email", "sender": mail.sender or "unknown sender"},
            channel="imap",
            context=context,
            session=self.config.session,
            id=f"email:{mail.message_id}",
        )

    def session_for(self, message_id: str) -> str | None:
        """The session a mail went to with ``thread_sessions`` on (None: not seen, or the option is off)."""
        if self._runtime is None:
            return None
        rows = self._runtime.db.read(
            "SELECT session FROM mail_threads WHERE account = ? AND message_id = ?", (self.config.account, message_id)
        )
        return str(rows[0][0]) if rows else None

    def _thread_session(self, runtime: RuntimeContext, mail: ParsedMail) -> str:
        """The session of the mail's thread: its parent's (by In-Reply-To), else a new one; recorded first.

        Recorded before the event is submitted, so a mail delivered again after a crash finds the
        same session (and its event id makes the second submit a duplicate).
        """
        sid = self.session_for(mail.message_id)
        if sid is None and mail.in_reply_to:
            sid = self.session_for(mail.in_reply_to)
        if sid is None or not runtime.has_session(sid):
            sid = runtime.create_session(f"mail: {mail.subject[:60] or mail.sender}", {"mail_thread": mail.message_id})
        runtime.db.write(
            "INSERT INTO mail_threads (account, message_id, session) VALUES (?, ?, ?) "
            "ON CONFLICT (account, message_id) DO UPDATE SET session = excluded.session",
            (self.config.account, mail.message_id, sid),
        )
        return sid

    def _last(self, runtime: RuntimeContext, validity: int) -> int:
        rows = runtime.db.read(
            "SELECT last_uid FROM mail_state WHERE account = ? AND uidvalidity = ?", (self.config.account, validity)
        )
        return int(rows[0][0]) if rows else 0

    def _save(self, runtime: RuntimeContext, validity: int, last: int) -> None:
        runtime.db.write(
            "INSERT INTO mail_state (account, uidvalidity, last_uid) VALUES (?, ?, ?) "
            "ON CONFLICT (account) DO UPDATE SET uidvalidity = excluded.uidvalidity, last_uid = excluded.last_uid",
            (self.config.account, validity, last),
        )

    # -- operations the tools use ---------------------------------------------------------------

    async def _imap(self, work: Any) -> Any:
        return await asyncio.to_thread(mc.session, self.config, self.config.password(), work)

    async def read(self, uid: int) -> tuple[ParsedMail, list[str]]:
        """Message ``uid`` of the configured folder and its flags.

        Raises:
            MailError: no such message, or the server failed.
        """

        def work(c: IMAPClient) -> tuple[ParsedMail, list[str]]:
            got = mc.fetch(c, uid, self.config.max_message_bytes)
            if got is None:
                raise MailError(f"no message with uid {uid} in {self.config.folder}")
            return got

        result: tuple[ParsedMail, list[str]] = await self._imap(work)
        return result

    async def move(self, uid: int, folder: str) -> str:
        """Move message ``uid`` to ``folder`` (created when missing)."""
        target = mc.check_folder(folder)

        def work(c: IMAPClient) -> str:
            mc.require(c, uid, self.config.folder)
            mc.ensure_folder(c, target)
            if b"MOVE" in c.capabilities():
                c.move([uid], target)
            else:
                c.copy([uid], target)
                c.delete_messages([uid])
                c.uid_expunge([uid])
            return f"moved message {uid} to {target}"

        return str(await self._imap(work))

    async def flag(self, uid: int, flag: str) -> str:
        r"""Set a flag on message ``uid`` (``high priority`` → ``\\Flagged``)."""
        value = mc.flag_of(flag)

        def work(c: IMAPClient) -> str:
            mc.require(c, uid, self.config.folder)
            c.add_flags([uid], [value])
            return f"message {uid} flagged {value}"

        return str(await self._imap(work))

    async def draft_reply(self, uid: int, body: str, key: str | None = None) -> str:
        """Save a reply to message ``uid`` in the drafts folder (once per idempotency key)."""
        cfg = self.config
        original, _ = await self.read(uid)
        mid = mc.message_id(key, cfg.from_address)
        subject = original.subject if original.subject.lower().startswith("re:") else f"Re: {original.subject}"
        to = original.sender or ""
        msg = mc.compose(cfg, to, subject, body, mid, in_reply_to=original.message_id)

        def work(c: IMAPClient) -> str:
            mc.ensure_folder(c, cfg.drafts_folder)
            c.select_folder(cfg.drafts_folder)
            if key and c.search(["HEADER", "Message-ID", mid]):
                return f"the draft reply to message {uid} was already saved in {cfg.drafts_folder}"
            new = mc.append_uid(c.append(cfg.drafts_folder, msg.as_bytes(), flags=["\\Draft"]))
            where = f" (uid {new})" if new is not None else ""
            return f"draft reply to {to} saved in {cfg.drafts_folder}{where}, subject {subject!r}"

        return str(await self._imap(work))

    async def send(
        self,
        to: str,
        subject: str,
        body: str,
        in_reply_to: str = "",
        key: str | None = None,
        caller: RuntimeContext | None = None,
    ) -> str:
        """Send a message over SMTP; with a key, a second call with the same key sends nothing.

        The key is claimed in ``mail_sent`` before SMTP is called, so two workers given the same
        event (a redelivery) cannot both send: the loser says "already sent". A failed send gives
        the claim back; a crash while SMTP talks leaves it (at most once: never a second copy). ``caller``: the
        calling session's runtime, whose records are used on a worker where this source does not run.
        """
        cfg = self.config
        runtime = self._runtime or caller
        db = runtime.db if runtime is not None else None
        mid = mc.message_id(key, cfg.from_address)
        record = "INSERT INTO mail_sent (key, message_id, recipients, subject, at) VALUES (?, ?, ?, ?, ?)"
        if key and db is not None:
            db.ensure("mail", MIGRATIONS)
            if not db.write(record + " ON CONFLICT (key) DO NOTHING", (key, mid, to, subject, time.time())):
                rows = db.read("SELECT message_id FROM mail_sent WHERE key = ?", (key,))
                return f"already sent (Message-ID {rows[0][0] if rows else mid}); not sent again"
        try:
            msg = mc.compose(cfg, to, subject, body, mid, in_reply_to=in_reply_to)
            password = cfg.password(smtp=True) if cfg.smtp_login_user else None
            await asyncio.to_thread(mc.smtp_send, cfg, password, msg)
        except BaseException:
            if key and db is not None:
                db.write("DELETE FROM mail_sent WHERE key = ?", (key,))
            raise
        if db is not None and not key:
            db.ensure("mail", MIGRATIONS)
            db.write(record + " ON CONFLICT (key) DO UPDATE SET at = excluded.at", (mid, mid, to, subject, time.time()))
        return f"sent to {to} (Message-ID {mid})"


# -- tools ------------------------------------------------------------------------------------


def _source(ctx: ToolContext) -> MailSource | ToolResult:
    found = runtime_service(ctx, MailSource, "email is not configured: the runtime has no mail source")
    return found if isinstance(found, ToolResult) else found[0]


async def _do(ctx: ToolContext, op: Any) -> ToolResult:
    source = _source(ctx)
    if isinstance(source, ToolResult):
        return source
    try:
        return ToolResult(str(await op(source)))
    except MailError as e:
        return ToolResult(str(e), is_error=True)


def effect_key(ctx: ToolContext) -> str | None:
    """The idempotency key of this side-effecting call (a sent mail, a saved draft, a calendar entry)."""
    return ctx.get(IDEMPOTENCY_RESOURCE) or idempotency_key()


@tool(side_effects=True, external=True, timeout_s=120)
async def send_email(to: str, subject: str, body: str, in_reply_to: str = "", *, ctx: ToolContext) -> ToolResult:
    """Send an email now (plain text).

    Args:
        to: recipient addresses, comma-separated.
        subject: the subject line.
        body: the message text.
        in_reply_to: the Message-ID of the mail this answers, to keep the thread.
    """
    caller = caller_of(ctx)
    return await _do(ctx, lambda s: s.send(to, subject, body, in_reply_to, effect_key(ctx), caller))


@tool(side_effects=True, external=True, timeout_s=120)
async def draft_reply(uid: int, body: str, *, ctx: ToolContext) -> ToolResult:
    """Save a reply to an email as a draft (not sent), for the user to review.

    Args:
        uid: the email's uid (from the email event).
        body: the reply text.
    """
    return await _do(ctx, lambda s: s.draft_reply(uid, body, effect_key(ctx)))


@tool(side_effects=True, external=True, timeout_s=120)
async def move_email(uid: int, folder: str, *, ctx: ToolContext) -> ToolResult:
    """Move an email to another folder, e.g. Archive (the folder is created if missing).

    Args:
        uid: the email's uid (from the email event).
        folder: the target folder.
    """
    return await _do(ctx, lambda s: s.move(uid, folder))


@tool(side_effects=True, external=True, timeout_s=120)
async def flag_email(uid: int, flag: str, *, ctx: ToolContext) -> ToolResult:
    """Flag an email: 'flagged' (high priority), 'seen', 'answered' or a one-word keyword.

    Args:
        uid: the email's uid (from the email event).
        flag: the flag to set.
    """
    return await _do(ctx, lambda s: s.flag(uid, flag))


@tool(read_only=True, external=True, timeout_s=120)
async def read_email(uid: int, *, ctx: ToolContext) -> ToolResult:
    """Read an email in full: headers, text, attachment names.

    Args:
        uid: the email's uid (from the email event).
    """

    async def op(s: MailSource) -> str:
        mail, flags = await s.read(uid)
        lines = [
            f"From: {mail.sender_name} <{mail.sender}>" if mail.sender_name else f"From: {mail.sender}",
            f"To: {mail.to}",
            f"Subject: {mail.subject}",
            f"Date: {mail.date}",
            f"Message-ID: {mail.message_id}",
            f"Flags: {' '.join(flags) or '(none)'}",
        ]
        if mail.problems:
            lines.append("Problems: " + "; ".join(mail.problems))
        return "\n".join(lines) + "\n\n" + mail.text(s.config.max_body_chars)

    return await _do(ctx, op)


def tools() -> list[Tool]:
    """The mail tools the model gets."""
    return [send_email, draft_reply, move_email, flag_email, read_email]


__all__ = ["IDEMPOTENCY_RESOURCE", "MailAuthError", "MailConfig", "MailError", "MailSource", "effect_key", "tools"]
