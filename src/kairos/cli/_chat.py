"""``kairos chat`` on the event runtime: the terminal as one more front end of the runtime ``serve`` runs.

Typed lines become ``user.input`` events; everything the session's agent does is printed as it
happens, including runs nobody typed for (a timer fired, an async task ended, mail arrived), and
what the agent tells or asks the user (``notify_user``, ``ask_user``, approvals) appears in the
terminal and is answered by typing.

stdin is read in a daemon thread, so typing while the agent works is possible and quitting never
waits for a blocked read. On a terminal a line typed during a run is submitted at once (the
router decides queue or interrupt) and acknowledged ("queued: joins at the next safe point");
from a pipe the chat waits until the session is idle (or asks something) before it reads the
next line, so piped chats are deterministic. While the agent works, a status line on stderr
(a terminal only) says what it is doing.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

from kairos.agent.events import AgentEvent
from kairos.cli._output import EventPrinter, _text, console, err_console, finish_memory_with_status
from kairos.errors import KairosError
from kairos.runtime import Event, Outbox, Runtime
from kairos.runtime.bus import BusEvent, SubscriberTooSlow
from kairos.runtime.outbound import (
    EventAccepted,
    OutboxClosed,
    OutboxMessage,
    ParallelAnswer,
    RunEnded,
    SessionError,
)

T = TypeVar("T")
GRACE_S = 2.0
"""Seconds a running turn gets to finish when the chat quits (then it is interrupted; nothing is lost)."""
SETTLE_S = 1e9
"""Piped input waits this long at most for the session to become idle (i.e. as long as it takes)."""
HELP = """\
Type a message and press Enter; you can type while the agent works: the line joins the running turn
at its next safe point (at once while the model is still reading its prompt).
Timers, finished tasks, file watches and mail wake the agent here too, and their runs are shown.
When the agent asks something (a question or an approval), the next line you type answers it
(an option's first letters are enough; y or n for approve or deny), or by id: /answer ID TEXT
Ctrl-C stops a running turn; Ctrl-C at the prompt, Ctrl-D or /exit quits. /help shows this."""


class LineReader:
    """stdin in a daemon thread, handed to the loop line by line (None: end of input).

    ``continuous`` (a terminal): read ahead all the time. Otherwise read a line only when
    :meth:`next` asks for one.
    """

    def __init__(self, continuous: bool) -> None:
        self.continuous = continuous
        self._loop = asyncio.get_running_loop()
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._want = threading.Semaphore(0)
        self._closed = False
        self._raw = _raw_lines(_stdin_fd()) if not (sys.stdin.isatty() and sys.stdout.isatty()) else None
        threading.Thread(target=self._read, name="kairos-chat-stdin", daemon=True).start()

    def _read(self) -> None:
        while True:
            if not self.continuous:
                self._want.acquire()
            if self._closed:
                return
            try:  # a terminal gets line editing; else the fd itself, so no lock of sys.stdin is held at exit
                line: str | None = console.input("") if self._raw is None else next(self._raw, None)
            except (EOFError, OSError, ValueError, UnicodeDecodeError):
                line = None
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens any more
                self._loop.call_soon_threadsafe(self._lines.put_nowait, line)
            if line is None:
                return

    async def next(self) -> str | None:
        """The next line, None at end of input."""
        if not self.continuous:
            self._want.release()
        return await self._lines.get()

    def close(self) -> None:
        """Let a waiting reader thread end (one blocked in a read ends with the process)."""
        self._closed = True
        self._want.release()


def _stdin_fd() -> int | None:
    try:
        return sys.stdin.fileno()
    except (OSError, ValueError):  # replaced by something without a descriptor (a test runner)
        return None


def _raw_lines(fd: int | None) -> Iterator[str] | None:
    """Lines read straight from ``fd`` (None: no descriptor, read ``sys.stdin`` instead).

    A daemon thread blocked in ``sys.stdin.readline()`` holds the buffer's lock, and the
    interpreter aborts when it exits meanwhile (Ctrl-C at the prompt of a piped chat); a blocked
    ``os.read`` holds nothing.
    """
    if fd is None:
        return None

    def lines() -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        buffered = ""
        while True:
            while "\n" not in buffered:
                chunk = os.read(fd, 65536)
                buffered += decoder.decode(chunk, final=not chunk)
                if not chunk:
                    if buffered:
                        yield buffered
                    return
            line, buffered = buffered.split("\n", 1)
            yield line.removesuffix("\r")

    return lines()


class Chat:
    """One terminal chat on a running :class:`Runtime`, bound to one session."""

    def __init__(self, runtime: Runtime, session: str, *, trace: bool, interactive: bool) -> None:
        self.runtime = runtime
        self.session = session
        self.interactive = interactive
        self.printer = EventPrinter(trace)
        self.outbox = runtime.service(Outbox)
        self.questions: dict[str, dict[str, Any]] = {}
        """Open ``ask_user`` questions of this session, oldest first."""
        self.prompt_open = asyncio.Event()
        """Set while the agent waits for the user (a question, an approval)."""
        self.quit = asyncio.Event()
        self.stopped_by: int | None = None
        self._prompt_shown = False

    # -- output -------------------------------------------------------------------------------------

    def _clear_prompt(self) -> None:
        if self._prompt_shown:
            console.print()
            self._prompt_shown = False

    @contextlib.contextmanager
    def _printing(self) -> Iterator[None]:
        """Print a line of the chat's own: after the prompt or a streamed line, above the status line."""
        self._clear_prompt()
        with self.printer.above():
            yield

    def _show_prompt(self) -> None:
        if not self._prompt_shown:
            console.print("[bold blue]you>[/] ", end="")
            self._prompt_shown = True

    def on_agent_event(self, session: str, event: AgentEvent) -> None:
        """Print the session's agent events as they happen (a :attr:`Runtime.agent_listeners` entry)."""
        if session == self.session:
            self._clear_prompt()
            self.printer(event)

    async def follow(self) -> None:
        """Print what the bus says about the session beyond the agent's events (outbox, parallel answers)."""
        while True:
            try:
                async for ev in self.runtime.bus.subscribe(self.session):
                    self._on_bus(ev)
                return
            except SubscriberTooSlow:
                continue

    def _on_bus(self, ev: BusEvent) -> None:
        match ev.payload:
            case OutboxMessage(kind="question") as q:
                self.questions[q.id] = q.to_data()
                self._say_question(q.to_data())
            case OutboxMessage() as m:
                if m.kind == "notify":
                    with self._printing():
                        console.print(f"[bold yellow]notification ({_text(m.priority)}):[/] {_text(m.text)}")
                if self.outbox is not None:  # shown here (an answer was streamed already): read
                    self.outbox.mark_read([m.id])
            case OutboxClosed() as q if self.questions.pop(q.id, None) is not None:
                if q.answered_by != "user":
                    said = f"; the agent uses the default: {q.answer}" if q.answer else ""
                    with self._printing():
                        console.print(f"[yellow]question {_text(q.id)} is {_text(str(q.status))}{said}[/]")
            case EventAccepted() as e if e.channel != "cli":  # what wakes the agent besides you
                first = (e.content.strip().splitlines() or [""])[0]
                with self._printing():
                    console.print(f"[dim]» {_text(e.type)}: {_text(first[:160])} ({_text(e.strategy)})[/]")
            case ParallelAnswer(question=question, answer=answer):
                with self._printing():
                    console.print(
                        f"[dim](answered beside the running task)[/] {_text(question)}\n[bold]{_text(answer)}[/]"
                    )
            case SessionError(message=message):
                with self._printing():
                    err_console.print(f"[bold red]error:[/] {_text(message)}")
            case RunEnded() if not self.runtime.busy(self.session):
                self.printer.status.clear()  # also after a run that failed before its final answer
                if self.interactive:
                    self._show_prompt()
        self._update_prompt_open()

    def _say_question(self, q: dict[str, Any]) -> None:
        options = " " + _text(f"[{' / '.join(q['options'])}]") if q.get("options") else ""
        default = f"; default {_text(q['default'])} after {q['timeout_s']:g} s" if q.get("timeout_s") else ""
        with self._printing():
            console.print(f"[bold magenta]? {_text(str(q['text']))}[/]{options} [dim](question {q['id']}{default})[/]")
            console.print("[dim]type your answer (or /answer ID TEXT)[/]")

    def _update_prompt_open(self) -> None:
        if self.questions:
            self.prompt_open.set()
        else:
            self.prompt_open.clear()

    # -- input ------------------------------------------------------------------------------------------

    def on_signal(self, signum: int) -> None:
        """Ctrl-C stops a running turn (or quits at the prompt); SIGTERM and SIGHUP quit."""
        if signum == signal.SIGINT and self.runtime.busy(self.session):
            self.runtime.interrupt(self.session, reason="Ctrl-C")
            return
        if signum != signal.SIGINT:
            self.stopped_by = signum
        self.quit.set()

    async def _until_quit(self, aw: Awaitable[T]) -> T | None:
        """``aw``'s result, or None when the chat is told to quit first."""
        task = asyncio.ensure_future(aw)
        quitting = asyncio.ensure_future(self.quit.wait())
        try:
            await asyncio.wait({task, quitting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            quitting.cancel()
            if not task.done():
                task.cancel()
        return None if task.cancelled() or not task.done() else task.result()

    async def _settle(self) -> None:
        """Until the session is idle or waits for the user (piped input reads its next line then)."""
        idle = asyncio.ensure_future(self.runtime.wait_idle(self.session, SETTLE_S))
        asking = asyncio.ensure_future(self.prompt_open.wait())
        try:
            await asyncio.wait({idle, asking}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (idle, asking):
                t.cancel()

    async def loop(self) -> None:
        """Read lines until end of input, /exit, or a signal that quits."""
        reader = LineReader(continuous=self.interactive)
        if self.interactive and not self.prompt_open.is_set():
            self._show_prompt()
        try:
            while not self.quit.is_set():
                if not self.interactive:
                    await self._until_quit(self._settle())
                    if self.quit.is_set():
                        break
                if not self.interactive and not self.prompt_open.is_set():
                    self._show_prompt()
                line = await self._until_quit(reader.next())
                if self.interactive:  # the terminal echoed the line and its newline
                    self._prompt_shown = False
                    self.printer.line_typed()
                if line is None or line.strip() in ("/exit", "/quit"):
                    break
                submitted = await self.handle(line)
                idle = not self.prompt_open.is_set() and not self.runtime.busy(self.session)
                if self.interactive and not submitted and idle:
                    self._show_prompt()  # else the run shows it again when it ends
        finally:
            reader.close()

    async def handle(self, line: str) -> bool:
        """One typed line: an answer to what the agent asked, a command, or a message for the session.

        Returns whether it was sent to the session as a message.
        """
        text = line.strip()
        if text == "/help":
            console.print(HELP, markup=False)
        elif text.startswith("/answer"):
            qid, _, answer = text.removeprefix("/answer").strip().partition(" ")
            if not qid or not answer.strip():
                err_console.print("usage: /answer ID TEXT", markup=False)
            else:
                self._answer(qid, answer.strip())
        elif self.questions and text:
            self._answer(next(iter(self.questions)), text)
        elif text:
            typed, busy = time.time(), self.runtime.busy(self.session)
            event = Event("user.input", line, source={"type": "user"}, channel="cli", session=self.session)
            try:
                receipt = await self.runtime.submit(event)
            except KairosError as e:
                with self._printing():
                    err_console.print(f"[bold red]error:[/] {_text(str(e))}")
                return False
            if busy or receipt.strategy == "drop":  # it joins a run going on: say so at once, and when it was typed
                said = _ACK.get(receipt.strategy) or f"dropped: {receipt.reason}"
                with self._printing():
                    console.print(f"[dim]» {_text(said)} (typed {time.strftime('%H:%M:%S', time.localtime(typed))})[/]")
            return receipt.strategy != "drop"
        return False

    def _answer(self, qid: str, text: str) -> None:
        if self.outbox is None:
            err_console.print("[bold red]error:[/] the outbox is not running")
            return
        q = self.questions.get(qid)
        if q is not None and q.get("options"):
            text = _shortcut(text, q["options"])
        try:
            self.outbox.answer(qid, text, user=self.outbox.user_of(self.session))  # only this user's questions
        except (KairosError, ValueError) as e:
            err_console.print(f"[bold red]error:[/] {_text(str(e))}")
            if q is not None and q.get("status", "pending") == "pending":
                self._say_question(q)
            return
        self.questions.pop(qid, None)
        self._update_prompt_open()

    async def greet(self) -> None:
        """Show what waits for the user: unread notifications and open questions of this session."""
        if self.outbox is None:
            return
        try:
            await self.outbox.wait_ready()
            unread = [m for m in self.outbox.list(unread_only=True) if m["kind"] == "notify"]
        except (TimeoutError, KairosError):  # the outbox did not start: nothing to show
            return
        for m in unread:
            console.print(f"[bold yellow]notification ({_text(m['priority'])}, {m['created']}):[/] {_text(m['text'])}")
        self.outbox.mark_read([m["id"] for m in unread])
        for q in self.outbox.questions():
            if q["session"] == self.session and q["id"] not in self.questions:
                self.questions[q["id"]] = q
                self._say_question(q)
        self._update_prompt_open()


_ACK = {
    "queue": "queued: joins at the next safe point",
    "interrupt": "interrupting: the running step stops and the agent takes this up",
    "parallel": "answering it beside the running task",
}
"""What the chat says at once about a line typed while the agent works, by the router's strategy."""
_YES_NO = {"y": "approve", "yes": "approve", "n": "deny", "no": "deny"}


def _shortcut(text: str, options: list[str]) -> str:
    """The option ``text`` stands for: y/n for approve/deny, or the one option it begins (else ``text``)."""
    folded = {o.casefold(): o for o in options}
    wanted = text.strip().casefold()
    if wanted in folded:
        return folded[wanted]
    if _YES_NO.get(wanted) in folded:
        return folded[_YES_NO[wanted]]
    starting = [o for f, o in folded.items() if wanted and f.startswith(wanted)]
    return starting[0] if len(starting) == 1 else text


async def run_chat(runtime: Runtime, session: str, *, trace: bool, interactive: bool) -> int | None:
    """Chat on ``session`` until the user quits; returns the signal that ended it (SIGTERM, SIGHUP), if one did.

    ``runtime`` is not started yet: this runs it, and closes it at the end.
    """
    loop = asyncio.get_running_loop()
    chat = Chat(runtime, session, trace=trace, interactive=interactive)
    runtime.agent_listeners.append(chat.on_agent_event)  # before the runtime starts: recovered runs show too
    follower = asyncio.create_task(chat.follow(), name="chat:follow")
    async with runtime:
        stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        for sig in stops:
            loop.add_signal_handler(sig, chat.on_signal, sig)
        try:
            await chat.greet()
            await chat.loop()
        finally:
            for sig in stops:
                loop.remove_signal_handler(sig)
            chat.quit.set()
            await runtime.aclose(GRACE_S)
            await finish_memory_with_status(runtime.agent)  # stops saving memory at once; the rest is saved later
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
    return chat.stopped_by


__all__ = ["GRACE_S", "HELP", "Chat", "LineReader", "run_chat"]
