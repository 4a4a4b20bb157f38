"""Several workers: ``kairos worker`` processes share the sessions of one deployment (issue 26 §3).

The runtime of every process runs with ``dispatch`` set to :meth:`WorkQueue.announce`: an event it
stores for a session it does not hold goes to the work queue (:mod:`kairos.runtime.workqueue`).
:class:`Workers` pulls that queue in a worker process and, for each message ``(session, seq)``:

1. takes the session (:meth:`Runtime.take`: its write lease, an advisory lock in PostgreSQL that dies
   with the holder's connection; a session held here already queues the new event). Held by another
   process: the message is put back (``nak``) with a short delay — one owner per session — while
   the owner finds the event itself (:meth:`Workers.watch_held`);
2. waits until the event is consumed (the append that consumes it committed: exactly once, see
   :mod:`kairos.context.store`) and the turn it started has ended, saying ``in_progress`` meanwhile;
3. acknowledges. Only then is the message gone.

A worker killed mid-turn stops saying ``in_progress`` and its lease dies with its connection; the
message goes to another worker (after ``ack_wait``, or at its next delivery when it was put back),
whose :meth:`Runtime.take` resumes the session: a cut tool call gets its placeholder or its saved
result (:meth:`SessionStore.resume`). The event was consumed with the turn's first append, so it is
not taken up again; a turn left without an answer and with nothing pending gets one
:data:`HANDOVER` note (keyed by the trajectory's length: posted once) so the model finishes it.
Nothing is answered twice: the user message is in the trajectory once, and side-effect records live
in the session store (``frozen``), shared by every worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from kairos.context.inbox import TaskCompleted
from kairos.models.types import Message
from kairos.runtime.runtime import Runtime
from kairos.runtime.workqueue import Delivery, WorkQueue

log = logging.getLogger("kairos.worker")

HANDOVER = (
    "The worker that ran this turn stopped before the turn ended (its process died) and another worker took "
    "the session over. Tool calls it cut have a placeholder result. Continue the turn where it stopped."
)
"""The note a new owner posts when it finds a turn cut by a dead worker (a failed task, so the model acts)."""


def turn_ended(messages: Sequence[Message]) -> bool:
    """Whether the trajectory ends with an answer (an assistant message that calls no tool)."""
    return bool(messages) and messages[-1].role == "assistant" and not messages[-1].tool_calls


class Workers:
    """Pulls the work queue and runs each message's session in ``runtime``; see the module docstring.

    Args:
        runtime: this process's runtime (running, with ``dispatch`` set to ``queue.announce``).
        queue: the deployment's work queue.
        concurrency: messages held at once (sessions running in this process).
        busy_delay_s: how long a message for a session another worker holds waits before it is delivered
            again (times its delivery count, at most 2 s).
        poll_s: how often the sessions held here are checked for events stored elsewhere (:meth:`watch_held`).
    """

    def __init__(
        self,
        runtime: Runtime,
        queue: WorkQueue,
        *,
        concurrency: int = 64,
        busy_delay_s: float = 0.25,
        poll_s: float = 0.25,
    ) -> None:
        self.runtime = runtime
        self.queue = queue
        self.concurrency = concurrency
        self.busy_delay_s = busy_delay_s
        self.poll_s = poll_s
        self.heartbeat_s = max(0.2, queue.ack_wait_s / 3)
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """Pull and serve messages until ``stop`` is set (then stop the runtime and :meth:`close`)."""
        await self.queue.answer(self.control, asyncio.get_running_loop())
        watcher = asyncio.create_task(self.watch_held(stop), name="work:held")
        self._tasks.add(watcher)
        watcher.add_done_callback(self._tasks.discard)
        while not stop.is_set():
            room = self.concurrency - len(self._tasks)
            if room <= 0:
                await asyncio.wait(self._tasks, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                got = await self.queue.fetch(room, timeout_s=0.5)
            except Exception as e:  # the server went away: nats-py reconnects; try again soon
                log.warning("fetching from the work queue failed: %r", e)
                await asyncio.sleep(1.0)
                continue
            for delivery in got:
                task = asyncio.create_task(self.serve(delivery), name=f"work:{delivery.session}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def control(self, session: str, verb: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """A front end's request for a session (:meth:`WorkQueue.ask`): answered only where the session runs."""
        if verb == "interrupt" and self.runtime.interrupt(session, str(arguments.get("reason", ""))):
            return {"interrupted": True}
        return None

    async def close(self, timeout_s: float = 5.0) -> None:
        """After the runtime stopped: held messages end (acked when done, else put back); the rest are cut."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def serve(self, delivery: Delivery) -> None:
        """Serve one message: ack once its turn is stored, nak when the session is held elsewhere."""
        beat = asyncio.create_task(self._heartbeat(delivery))
        try:
            delay = await self._handle(delivery)
        except asyncio.CancelledError:  # this worker is stopping: another one takes it now
            with contextlib.suppress(Exception):
                await delivery.nak()
            raise
        except Exception:
            log.exception("serving %s of session %s failed", delivery.seq, delivery.session)
            delay = 1.0
        finally:
            beat.cancel()
        with contextlib.suppress(Exception):  # unacknowledged: delivered again after ack_wait
            if delay is None:
                await delivery.ack()
            else:
                await delivery.nak(delay)

    async def _heartbeat(self, delivery: Delivery) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            with contextlib.suppress(Exception):
                await delivery.in_progress()

    async def _handle(self, d: Delivery) -> float | None:
        """None when the message is done (ack), else the delay before it is delivered again (nak)."""
        rt, store = self.runtime, self.runtime.store.trajectories
        while True:
            pending = {e.seq for e in await asyncio.to_thread(store.pending_events, d.session)}
            session = rt.open_session(d.session)
            if session is not None:
                if d.seq not in pending and not rt.busy(d.session) and not len(session.inbox):
                    return None  # consumed here, and its turn is over
                rt.take(d.session)  # held here: queue what other processes stored meanwhile
            else:
                if d.seq not in pending and d.session not in rt.active_sessions():
                    messages = await asyncio.to_thread(store.load_messages, d.session)
                    if turn_ended(messages):
                        return None  # consumed and answered (here before, or by another worker)
                taken = rt.take(d.session)
                if taken == "busy":  # its owner runs it; the message stays until its turn is over
                    return min(2.0, self.busy_delay_s * d.attempt)
                if taken == "resumed":
                    self._continue_cut_turn(d.session)  # before its worker task first runs: no await between
            with contextlib.suppress(TimeoutError):
                await rt.wait_idle(d.session, timeout_s=self.heartbeat_s)
            await asyncio.sleep(0.02)  # a worker that ended at once (its session unreadable) is not polled hot

    def _continue_cut_turn(self, session_id: str) -> None:
        """Just resumed here: a turn a dead worker left open (no answer, nothing pending) gets the handover note.

        Synchronous, right after :meth:`Runtime.take` resumed the session, so it sees the session as the
        dead worker left it: with an ``await`` in between, the new worker task could take up the event
        first and this check would take its own running turn for a cut one (a message answered twice).
        """
        session = self.runtime.open_session(session_id)
        if session is None:
            return
        messages = session.message_list()
        if not messages or turn_ended(messages):
            return
        stored = self.runtime.store.trajectories.pending_events(session_id)  # one quick query, no await
        if any(p.event.kind != "interrupt" for p in session.inbox.pending()) or any(
            e.kind != "interrupt" for e in stored
        ):
            return  # a run starts anyway, with the whole conversation in view
        note = TaskCompleted(f"handover-{len(messages)}", HANDOVER, source="kairos worker", ok=False)
        if self.runtime.post(session_id, note, key=f"kairos.handover:{session_id}:{len(messages)}") is not None:
            log.info("session %s: a turn cut by a dead worker continues here", session_id)

    async def watch_held(self, stop: asyncio.Event) -> None:
        """Queue events stored for sessions held here (one query every ``poll_s``).

        Their messages go to any worker; one that lands elsewhere is put back until it reaches this
        one, which this spares the wait (it is acknowledged wherever it lands once its turn is over).
        """
        store = self.runtime.store.trajectories
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_s)
            held = set(self.runtime.active_sessions())
            if not held:
                continue
            try:
                waiting = set(await asyncio.to_thread(store.sessions_with_pending))
            except Exception as e:  # the database is away: the queue's messages still get there
                log.warning("reading pending events failed: %s", e)
                continue
            for sid in held & waiting:
                with contextlib.suppress(Exception):
                    self.runtime.take(sid)


__all__ = ["HANDOVER", "Workers", "turn_ended"]
