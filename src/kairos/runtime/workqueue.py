"""The deployment's work queue on NATS JetStream: which session has an event waiting (issue 26 §3).

A front end (``kairos serve --no-worker``) stores an event in the session's inbox (the shared
PostgreSQL store) and then announces it here: one message ``{"session", "seq"}`` on the subject
``kairos-work.<stream>.<session>`` of the stream ``<stream>-work`` (WorkQueue retention: a message is
gone once a worker acknowledges it). The bus's stream owns ``kairos.<stream>.>``, and JetStream
refuses two streams with overlapping subjects, hence the separate prefix.

Workers (``kairos worker``) pull from one durable consumer, ``workers``, with explicit
acknowledgement: a message not acknowledged within ``ack_wait`` seconds is delivered again (to any
worker), so a worker that dies holding one hands it over. A worker that is still at it says so
(``in_progress``) every third of ``ack_wait``. The message id is ``<session>:<seq>``: an event
announced twice within the duplicate window (2 minutes) is queued once.

A front end reaches the worker that runs a session (a stop button) with :meth:`WorkQueue.ask`: a core NATS
request on ``kairos-ctl.<stream>.<session>``, which every worker answers through :meth:`WorkQueue.answer`
only for the sessions it runs; no answer within :data:`ASK_WAIT_S` means none runs it.

Like :class:`~kairos.runtime.bus_nats.NatsBus`, the client runs on an event loop of its own in a
daemon thread: :meth:`WorkQueue.announce` is synchronous (the runtime calls it where it stores the
event, and it returns once JetStream stored the message); :meth:`WorkQueue.fetch` and a delivery's
``ack``/``nak``/``in_progress`` are awaitable from the caller's loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kairos.errors import ConfigError
from kairos.runtime.bus_nats import INSTALL_HINT, BusUnavailableError, session_token
from kairos.storage.config import mask_url

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js.client import JetStreamContext

_T = TypeVar("_T")
CONSUMER = "workers"
"""The durable consumer every worker of a deployment pulls from."""
ASK_WAIT_S = 1.0
"""How long a front end waits for the worker that runs a session to answer (none answers: none runs it)."""
ControlHandler = Callable[[str, str, dict[str, Any]], dict[str, Any] | None]
"""``(session, verb, arguments)``: a worker's reply, or None when the session is not its own (it stays silent)."""


@dataclass(eq=False)
class Delivery:
    """One work-queue message handed to this worker: session ``session`` has inbox event ``seq``."""

    queue: WorkQueue
    msg: Msg
    session: str
    seq: int
    attempt: int
    """1 on the first delivery, more when it was delivered before (a worker died, or it was put back)."""

    async def ack(self) -> None:
        """Done: the event's turn is in the store."""
        await self.queue._await(self.msg.ack())

    async def nak(self, delay_s: float = 0.0) -> None:
        """Put it back, delivered again after ``delay_s`` (the session is held by another worker)."""
        await self.queue._await(self.msg.nak(delay=delay_s or None))

    async def in_progress(self) -> None:
        """Still at it: restart the ``ack_wait`` clock."""
        await self.queue._await(self.msg.in_progress())


class WorkQueue:
    """The work queue of the deployment whose bus stream is ``stream``; see the module docstring.

    Args:
        url: the NATS server, ``nats://host:port``.
        stream: the deployment's stream name (:func:`kairos.runtime.backends.bus_stream`).
        ack_wait_s: seconds before an unacknowledged message is delivered again (set when the
            consumer is created: the first worker of a deployment decides it).
        timeout: seconds to wait for the server.

    Raises:
        ConfigError: nats-py is missing.
        BusUnavailableError: the server cannot be reached or has no JetStream.
    """

    def __init__(self, url: str, stream: str, *, ack_wait_s: float = 10.0, timeout: float = 5.0) -> None:
        try:
            import nats  # noqa: F401  (checked here so the error names the extra)
        except ImportError as exc:
            raise ConfigError(f"the NATS work queue needs nats-py: {INSTALL_HINT}") from exc
        self.url = url
        self.shown_url = mask_url(url)
        self.stream = f"{stream}-work"
        self.prefix = f"kairos-work.{stream}"
        self.control = f"kairos-ctl.{stream}"  # core NATS: outside both streams' subjects, never stored
        self.ack_wait_s = ack_wait_s
        self._timeout = timeout
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._sub: Any = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"kairos-work-{stream}", daemon=True)
        self._thread.start()
        try:
            self._call(self._connect())
        except BaseException:
            self.close()
            raise

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(self._timeout * 3)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise BusUnavailableError(
                f"NATS at {self.shown_url} did not answer within {self._timeout * 3:.0f} s", url=self.shown_url
            ) from None

    async def _await(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the client's loop, awaited from the caller's."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _connect(self) -> None:
        import nats
        import nats.js.errors
        from nats.js.api import RetentionPolicy, StorageType, StreamConfig

        try:
            self._nc = await nats.connect(
                self.url,
                connect_timeout=self._timeout,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                name=f"kairos-work-{self.stream}",
            )
        except Exception as exc:
            raise BusUnavailableError(
                f"cannot reach NATS at {self.shown_url} ({type(exc).__name__}); start `nats-server -js` there",
                url=self.shown_url,
            ) from None
        self._js = self._nc.jetstream(timeout=self._timeout)
        try:
            await self._js.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            config = StreamConfig(
                name=self.stream,
                subjects=[f"{self.prefix}.>"],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
                duplicate_window=120.0,
                description="kairos work queue (kairos.runtime.workqueue)",
            )
            with contextlib.suppress(nats.js.errors.BadRequestError):  # another process made it meanwhile
                await self._js.add_stream(config)

    def announce(self, session: str, seq: int) -> None:
        """Queue ``(session, seq)`` for a worker; returns once JetStream stored it (a repeat is a no-op).

        Raises:
            BusUnavailableError: the server did not store it in time.
        """
        data = json.dumps({"session": session, "seq": seq}).encode()
        subject = f"{self.prefix}.{session_token(session)}"

        async def publish() -> None:
            assert self._js is not None
            await self._js.publish(subject, data, headers={"Nats-Msg-Id": f"{session}:{seq}"})

        self._call(publish())

    async def fetch(self, batch: int, timeout_s: float = 1.0) -> list[Delivery]:
        """Up to ``batch`` messages for this worker, waiting at most ``timeout_s`` for the first."""
        return await self._await(self._fetch(batch, timeout_s))

    async def _fetch(self, batch: int, timeout_s: float) -> list[Delivery]:
        import nats.errors
        from nats.js.api import AckPolicy, ConsumerConfig

        assert self._js is not None
        if self._sub is None:
            config = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=self.ack_wait_s, max_ack_pending=-1)
            self._sub = await self._js.pull_subscribe(
                f"{self.prefix}.>", durable=CONSUMER, stream=self.stream, config=config
            )
        try:
            msgs = await self._sub.fetch(batch, timeout=timeout_s)
        except (nats.errors.TimeoutError, TimeoutError):  # nothing came (nats-py raises either)
            return []
        out = []
        for msg in msgs:
            try:
                item = json.loads(msg.data)
                session, seq = str(item["session"]), int(item["seq"])
            except (ValueError, KeyError, TypeError):
                await msg.term()  # not ours to read: never delivered again
                continue
            out.append(Delivery(self, msg, session, seq, int(msg.metadata.num_delivered or 1)))
        return out

    async def ask(self, session: str, verb: str, **arguments: Any) -> dict[str, Any] | None:
        """Ask the worker that runs ``session`` to ``verb`` (``interrupt``); its reply, None when none answers."""
        import nats.errors

        data = json.dumps({"session": session, "verb": verb, "arguments": arguments}).encode()

        async def request() -> dict[str, Any] | None:
            assert self._nc is not None
            try:
                msg = await self._nc.request(f"{self.control}.{session_token(session)}", data, timeout=ASK_WAIT_S)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError, TimeoutError):
                return None
            reply = json.loads(msg.data)
            return reply if isinstance(reply, dict) else None

        return await self._await(request())

    async def answer(self, handler: ControlHandler, loop: asyncio.AbstractEventLoop) -> None:
        """Answer the front ends' requests for the sessions run here: ``handler`` runs on ``loop`` (the runtime's)."""

        async def on_request(msg: Msg) -> None:
            try:
                item = json.loads(msg.data)
                session, verb, arguments = str(item["session"]), str(item["verb"]), dict(item.get("arguments") or {})
            except (ValueError, KeyError, TypeError):
                return  # not ours to read
            call = asyncio.run_coroutine_threadsafe(_run(handler, session, verb, arguments), loop)
            reply = await asyncio.wrap_future(call)
            if reply is not None:
                await msg.respond(json.dumps(reply).encode())

        async def subscribe() -> None:
            assert self._nc is not None
            await self._nc.subscribe(f"{self.control}.>", cb=on_request)

        await self._await(subscribe())

    def close(self) -> None:
        """Close the connection and stop the client's thread (idempotent)."""
        if self._loop.is_closed():
            return
        nc = self._nc
        if nc is not None:
            self._nc = None
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(nc.close(), self._loop).result(self._timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()


async def _run(handler: ControlHandler, session: str, verb: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
    return handler(session, verb, arguments)


__all__ = ["ASK_WAIT_S", "CONSUMER", "ControlHandler", "Delivery", "WorkQueue"]
