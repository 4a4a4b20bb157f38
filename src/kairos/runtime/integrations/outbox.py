"""The outbox: what the agent tells or asks the user, kept until read (book ch6 §3.1, issue 9 §3).

Every message (``notify``, ``question``, ``answer``) is a row of ``outbox_messages`` in the
runtime's database before it is published on the bus as ``outbox.message``, so a user with no
client connected loses nothing: it stays unread until a front end (CLI, SSE, WebSocket, the HTTP
API) lists it and marks it read. Messages belong to a user (the session's ``meta["user"]``, else
``"local"``).

``ask_user`` stores a question and waits for :meth:`Outbox.answer` (the HTTP API and the CLI
call it) or its timeout, after which the declared default is used. Final answers of runs are
also stored (kind ``answer``, on by default: ``Outbox(store_answers=False)`` turns it off), so
what the agent did while the user was away — a timer or a mail woke it — is waiting for them.

After a restart the waiting tool call is gone (its turn was closed with the interrupted
placeholder), so at restore an unanswered question is closed with its declared default and the
session gets a ``question.closed`` event saying so; a question answered just before the crash,
whose answer never reached the agent, is delivered as the user's input instead.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from kairos.agent.events import FinalAnswer
from kairos.errors import KairosError
from kairos.runtime.events import Event
from kairos.runtime.handle import RuntimeContext
from kairos.runtime.outbound import OutboxClosed, OutboxMessage, OutboxRead
from kairos.runtime.runtime import runtime_service
from kairos.security.approval import ApprovalRequest
from kairos.security.approval import Decision as ApprovalDecision
from kairos.storage import Migration
from kairos.tools.base import Tool, ToolContext, ToolResult
from kairos.tools.function import tool

log = logging.getLogger("kairos.runtime.integrations.outbox")

SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox_messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    "user" TEXT NOT NULL,
    session TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    priority TEXT NOT NULL DEFAULT 'normal',
    created REAL NOT NULL,
    read_at REAL,
    options TEXT NOT NULL DEFAULT '[]',
    default_answer TEXT NOT NULL DEFAULT '',
    timeout_s REAL NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT '',
    answer TEXT,
    answered_at REAL,
    answered_by TEXT NOT NULL DEFAULT '',
    delivered INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_by_user ON outbox_messages ("user", read_at);
"""
MIGRATIONS: tuple[Migration, ...] = (SCHEMA,)
"""The ``outbox`` tables' versions in ``runtime.db``; 1 is the schema from before versions (kairos.storage)."""
Kind = Literal["notify", "question", "answer"]
Priority = Literal["low", "normal", "high", "urgent"]
MAX_ASK_S = 86400.0
"""The longest an ``ask_user`` call may wait (``timeout_s=0`` waits this long at most)."""
MAX_TEXT = 20_000
_COLUMNS = (
    'id, "user", session, kind, text, priority, created, read_at, options, default_answer, timeout_s, status, '
    "answer, answered_at, answered_by"
)

_MISSING = "the outbox is not enabled in this runtime; ask the user to enable it"


class QuestionNotFoundError(KairosError, LookupError):
    """No question with that id (for this user)."""


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


def _record(row: Sequence[Any]) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": row[0],
        "user": row[1],
        "session": row[2],
        "kind": row[3],
        "text": row[4],
        "priority": row[5],
        "created": _iso(row[6]),
        "read": row[7] is not None,
        "read_at": _iso(row[7]),
    }
    if row[3] == "question":
        rec.update(
            options=json.loads(row[8]),
            default=row[9],
            timeout_s=row[10],
            status=row[11],
            answer=row[12],
            answered_at=_iso(row[13]),
            answered_by=row[14],
        )
    return rec


class Outbox:
    """The outbox component (``name = "outbox"``) and the service front ends and tools use.

    Args:
        store_answers: also keep every final answer of a run as an unread ``answer`` message.
        default_user: the user of sessions whose meta names none.
    """

    name = "outbox"
    leader_only = False

    def __init__(self, *, store_answers: bool = True, default_user: str = "local") -> None:
        self.store_answers = store_answers
        self.default_user = default_user
        self._runtime: RuntimeContext | None = None
        self._waiters: dict[str, asyncio.Future[str]] = {}
        self._ready = asyncio.Event()

    # -- life cycle -------------------------------------------------------------------------------

    async def run(self, runtime: RuntimeContext) -> None:
        """Close the questions a restart left open, listen for final answers, then idle until cancelled."""
        runtime.db.ensure("outbox", MIGRATIONS)
        self._runtime = runtime
        if self.store_answers:
            runtime.answer_listeners.append(self._on_answer)
        try:
            await self._restore(runtime)
            self._ready.set()
            await asyncio.Event().wait()
        finally:
            self._ready.clear()
            if self._on_answer in runtime.answer_listeners:
                runtime.answer_listeners.remove(self._on_answer)
            self._runtime = None

    async def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Until :meth:`run` has restored (tests; tools run later anyway)."""
        async with asyncio.timeout(timeout_s):
            await self._ready.wait()

    async def _restore(self, runtime: RuntimeContext) -> None:
        rows = runtime.db.read(
            f"SELECT {_COLUMNS} FROM outbox_messages WHERE kind = 'question' AND delivered = 0 "
            "AND status IN ('pending', 'answered') ORDER BY seq"
        )
        for row in rows:
            q = _record(row)
            if q["id"] in self._waiters:  # a live ask in this process (the component was restarted)
                continue
            if q["status"] == "pending":
                default = q["default"]
                self._close(q["id"], "expired", default, "restart")
                said = f"using the declared default: {default}" if default else "no default was declared"
                content = (
                    f"Your question {q['id']} to the user got no answer before the runtime restarted; {said}.\n"
                    f"Question: {q['text']}"
                )
                event = Event("question.closed", content, {"type": "outbox"}, "outbox", {"question_id": q["id"]},
                              q["session"], f"question:{q['id']}:closed")  # fmt: skip
            else:
                content = f"(answer to your question {q['id']}: {q['text']!r})\n{q['answer']}"
                event = Event("user.input", content, {"type": "user"}, "outbox", {"question_id": q["id"]},
                              q["session"], f"question:{q['id']}:answer")  # fmt: skip
            try:
                await runtime.submit(event)
            except KairosError as e:  # the session is gone, or the runtime stops: nobody to tell
                log.warning("question %s: %s", q["id"], e)
            runtime.db.write("UPDATE outbox_messages SET delivered = 1 WHERE id = ?", (q["id"],))

    def _bound(self) -> RuntimeContext:
        if self._runtime is None:
            raise KairosError("the outbox component is not running (add it to the runtime's components)")
        return self._runtime

    def user_of(self, session: str) -> str:
        """The user a session's messages go to."""
        rt = self._bound()
        user = rt.session_meta(session).get("user") if session else None
        return user if isinstance(user, str) and user else self.default_user

    # -- writing ----------------------------------------------------------------------------------

    def _store(self, session: str, kind: Kind, text: str, priority: str = "normal", **question: Any) -> dict[str, Any]:
        rt = self._bound()
        mid = f"{kind[0]}-{uuid.uuid4().hex[:12]}"
        rt.db.write(
            'INSERT INTO outbox_messages (id, "user", session, kind, text, priority, created, options, '
            "default_answer, timeout_s, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (mid, self.user_of(session), session, kind, text, priority, time.time(),
             json.dumps(question.get("options", [])), question.get("default", ""), question.get("timeout_s", 0.0),
             "pending" if kind == "question" else ""),
        )  # fmt: skip
        record = self.get(mid)
        assert record is not None
        rt.publish(session, OutboxMessage.model_validate(record))
        return record

    def notify(self, session: str, text: str, priority: Priority = "normal") -> dict[str, Any]:
        """Store and publish a message for the session's user; returns its record.

        Raises:
            ValueError: empty or too long text.
        """
        _check_text("message", text)
        return self._store(session, "notify", text, priority)

    def _on_answer(self, session: str, answer: FinalAnswer) -> None:
        if answer.text.strip() and self._runtime is not None:
            self._store(session, "answer", answer.text[:MAX_TEXT])

    async def ask(
        self, session: str, question: str, *, options: Sequence[str] = (), timeout_s: float = 300, default: str = ""
    ) -> str:
        """Ask the session's user and wait for :meth:`answer` or ``timeout_s`` (0: up to :data:`MAX_ASK_S`).

        Returns what the tool returns to the model: the answer, or a sentence saying the default was used.

        Raises:
            ValueError: a bad argument (a timeout without a default, a default not among the options …).
        """
        answer, by_user = await self.wait_answer(
            session, question, options=options, timeout_s=timeout_s, default=default
        )
        if by_user:
            return f"The user answered: {answer}"
        return f"No answer within {timeout_s:g} s; using the declared default: {answer}"

    async def wait_answer(
        self, session: str, question: str, *, options: Sequence[str] = (), timeout_s: float = 300, default: str = ""
    ) -> tuple[str, bool]:
        """Like :meth:`ask`, but returns ``(answer, whether the user gave it)`` (False: the default)."""
        _check_text("question", question)
        opts = [o.strip() for o in options if o.strip()]
        if not 0 <= timeout_s <= MAX_ASK_S:
            raise ValueError(f"timeout_s must be between 0 (wait for the answer) and {MAX_ASK_S:g}")
        if timeout_s > 0 and not default.strip():
            raise ValueError("a default answer is required when timeout_s > 0 (it is used when nobody answers)")
        if default and opts and _match(default, opts) is None:
            raise ValueError(f"default {default!r} must be one of the options: {', '.join(opts)}")
        rec = self._store(session, "question", question, "high", options=opts, default=default, timeout_s=timeout_s)
        qid = rec["id"]
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiters[qid] = fut
        try:
            async with asyncio.timeout(timeout_s or MAX_ASK_S):
                answer = await fut
        except TimeoutError:
            if self._close(qid, "expired", default, "default"):
                self._delivered(qid)
                return default, False
            answer = str((self.get(qid) or {}).get("answer", ""))  # answered at the last moment
        except asyncio.CancelledError:
            rt = self._runtime
            if rt is not None and rt.accepting:  # interrupted, not a shutdown: nobody waits any more
                self._close(qid, "cancelled", "", "")
            raise
        finally:
            self._waiters.pop(qid, None)
        self._delivered(qid)
        return answer, True

    def answer(self, question_id: str, text: str, *, user: str | None = None) -> dict[str, Any]:
        """Answer an open question (from the HTTP API or the CLI); returns its record.

        Raises:
            QuestionNotFoundError: no such question (for ``user``, when given).
            ValueError: the question is closed, or the text is empty or not one of its options.
        """
        q = self.get(question_id)
        if q is None or q["kind"] != "question" or (user is not None and q["user"] != user):
            raise QuestionNotFoundError(f"no question {question_id!r}")
        if q["status"] != "pending":
            raise ValueError(f"question {question_id} is already {q['status']} (answer: {q['answer']!r})")
        _check_text("answer", text)
        if q["options"]:
            chosen = _match(text, q["options"])
            if chosen is None:
                raise ValueError(f"the answer must be one of: {', '.join(q['options'])}")
            text = chosen
        if not self._close(question_id, "answered", text, "user"):
            raise ValueError(f"question {question_id} was closed meanwhile")
        fut = self._waiters.get(question_id)
        if fut is not None and not fut.done():
            fut.set_result(text)
        record = self.get(question_id)
        assert record is not None
        return record

    def _close(self, qid: str, status: str, answer: str, by: str) -> bool:
        """Close a pending question; False when it was not pending any more (someone else closed it)."""
        rt = self._bound()
        changed = rt.db.write(
            "UPDATE outbox_messages SET status = ?, answer = ?, answered_at = ?, answered_by = ? "
            "WHERE id = ? AND status = 'pending'",
            (status, answer, time.time(), by, qid),
        )
        if changed:
            record = self.get(qid)
            if record is not None:
                rt.publish(record["session"], OutboxClosed.model_validate(record))
        return bool(changed)

    def _delivered(self, qid: str) -> None:
        self._bound().db.write("UPDATE outbox_messages SET delivered = 1 WHERE id = ?", (qid,))

    # -- reading ----------------------------------------------------------------------------------

    def get(self, message_id: str) -> dict[str, Any] | None:
        """One message's record, or None."""
        rows = self._bound().db.read(f"SELECT {_COLUMNS} FROM outbox_messages WHERE id = ?", (message_id,))
        return _record(rows[0]) if rows else None

    def list(
        self, user: str | None = None, unread_only: bool = False, limit: int = 100
    ) -> builtins.list[dict[str, Any]]:
        """A user's messages (default: :attr:`default_user`), oldest first, the newest ``limit``."""
        sql = f'SELECT {_COLUMNS} FROM outbox_messages WHERE "user" = ?' + (
            " AND read_at IS NULL" if unread_only else ""
        )
        rows = self._bound().db.read(sql + " ORDER BY seq DESC LIMIT ?", (user or self.default_user, max(limit, 0)))
        return [_record(r) for r in reversed(rows)]

    def questions(self, user: str | None = None, pending_only: bool = True) -> builtins.list[dict[str, Any]]:
        """A user's questions (the open ones by default), oldest first."""
        sql = f"SELECT {_COLUMNS} FROM outbox_messages WHERE \"user\" = ? AND kind = 'question'"
        sql += " AND status = 'pending'" if pending_only else ""
        return [_record(r) for r in self._bound().db.read(sql + " ORDER BY seq", (user or self.default_user,))]

    def mark_read(self, ids: Iterable[str], user: str | None = None) -> int:
        """Mark messages read (only ``user``'s when given); returns how many were unread."""
        rt = self._bound()
        wanted = [str(i) for i in ids]
        if not wanted:
            return 0
        marks = ",".join("?" * len(wanted))
        sql = f"UPDATE outbox_messages SET read_at = ? WHERE read_at IS NULL AND id IN ({marks})"
        args: builtins.list[Any] = [time.time(), *wanted]
        if user is not None:
            sql += ' AND "user" = ?'
            args.append(user)
        changed = rt.db.write(sql, args)
        if changed:
            rt.publish("", OutboxRead(ids=wanted, user=user))
        return changed


class OutboxApprover:
    """Asks the session's user to approve a side-effecting call through the outbox; no answer is a no.

    The approver of ``kairos serve`` and ``kairos chat``: the question shows in ``GET /v1/questions``
    (answered with ``POST /v1/questions/{id}/answer``) and in the chat, with the options approve
    and deny; it fails closed (deny) on a timeout or any error.
    """

    def __init__(self, outbox: Outbox, timeout_s: float = 300.0) -> None:
        self.outbox = outbox
        self.timeout_s = timeout_s

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        """The user's approve or deny; deny after :attr:`timeout_s`."""
        question = f"Allow {request.describe()}? ({request.reason})"
        try:
            answer, by_user = await self.outbox.wait_answer(
                request.session_id, question, options=("approve", "deny"), timeout_s=self.timeout_s, default="deny"
            )
        except (ValueError, KairosError) as e:  # cannot ask: fail closed
            return ApprovalDecision(False, f"the user could not be asked ({e})", by="outbox")
        if not by_user:
            return ApprovalDecision(False, f"nobody answered within {self.timeout_s:g} s", by="outbox")
        approved = answer == "approve"
        return ApprovalDecision(approved, "approved by the user" if approved else "the user said no", by="outbox")


def _check_text(field: str, text: str) -> None:
    if not text.strip():
        raise ValueError(f"{field} must not be empty")
    if len(text) > MAX_TEXT:
        raise ValueError(f"{field} is {len(text):,} characters; the limit is {MAX_TEXT:,}")


def _match(text: str, options: Sequence[str]) -> str | None:
    wanted = text.strip().casefold()
    return next((o for o in options if o.casefold() == wanted), None)


# -- tools ---------------------------------------------------------------------------------------


@tool(side_effects=True)
async def notify_user(message: str, ctx: ToolContext, priority: Priority = "normal") -> str | ToolResult:
    """Send the user a message they will see even if they are away (it waits in their outbox).

    Use it to report something important (a finished job, a problem) without waiting for a reply.

    Args:
        message: what to tell the user.
        priority: low, normal, high or urgent.
        ctx: injected by the harness (not shown to the model).
    """
    found = runtime_service(ctx, Outbox, _MISSING)
    if isinstance(found, ToolResult):
        return found
    outbox, session = found
    try:
        outbox.notify(session, message, priority)
    except (ValueError, KairosError) as e:
        return ToolResult(f"Not sent: {e}", is_error=True)
    return "notified"


@tool(timeout_s=MAX_ASK_S + 60)  # its own timeout_s ends it first; the executor's must not cut it short
async def ask_user(
    question: str,
    ctx: ToolContext,
    options: list[str] | None = None,
    timeout_s: float = 300,
    default: str = "",
) -> str | ToolResult:
    """Ask the user a question and wait for the answer (or use `default` after `timeout_s` seconds).

    Ask only what you cannot find out yourself; prefer a short list of options.

    Args:
        question: the question.
        options: the allowed answers (empty: free text).
        timeout_s: seconds to wait before using the default (0: wait for the answer).
        default: the answer used when nobody answers in time (required when timeout_s > 0).
        ctx: injected by the harness (not shown to the model).
    """
    found = runtime_service(ctx, Outbox, _MISSING)
    if isinstance(found, ToolResult):
        return found
    outbox, session = found
    try:
        return await outbox.ask(session, question, options=options or (), timeout_s=timeout_s, default=default)
    except (ValueError, KairosError) as e:
        return ToolResult(f"Not asked: {e}", is_error=True)


def tools() -> builtins.list[Tool]:
    """The outbox tools: notify_user, ask_user."""
    return [notify_user, ask_user]


__all__ = ["MAX_ASK_S", "SCHEMA", "Outbox", "OutboxApprover", "QuestionNotFoundError", "tools"]
