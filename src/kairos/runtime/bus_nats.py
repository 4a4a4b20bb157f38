"""The event bus on NATS JetStream: one stream per workspace, shared by every process of a deployment.

Records are JetStream messages on ``kairos.<stream>.<session>`` in the stream ``<stream>`` (one per
workspace or deployment: :func:`stream_name` derives it from a workspace folder). A record's cursor
is its stream sequence, so every process publishing to the stream shares one sequence and a client
resumes from any of them. Subscriptions are ordered consumers from a sequence (history, then live,
with gaps detected and the consumer recreated by nats-py); :meth:`NatsBus.history` reads through an
ephemeral pull consumer. Sessions whose id is not a plain subject token (dots, spaces, wildcards) are
encoded (``~`` + base64url), and the record itself (session, type, data, time) travels as JSON.

**Publish stays synchronous**, as the :class:`~kairos.runtime.bus.EventBus` protocol has it: the
runtime publishes from its event loop and needs the cursor at once. The NATS client runs on an event
loop of its own in a daemon thread; :meth:`NatsBus.publish` hands it the message and blocks until
JetStream acknowledges it (the record is stored when publish returns, unlike
:class:`~kairos.runtime.bus.SqliteBus`, which writes once per tick). On loopback that costs 0.19 ms
per record (median of 2,000; p99 0.33 ms; 0.28 ms from inside a running event loop; nats-server
2.9 with file storage), against a model turn of hundreds of milliseconds, so the synchronous
protocol stays (``tests/runtime/test_bus_nats.py`` guards the bound). A server that is down blocks
the caller for ``timeout`` seconds and then raises; such a publish may still be stored (the client
resends its buffer after reconnecting), which is what ``msg_id`` is for. Subscribers live on the
caller's loop: each message crosses threads with ``call_soon_threadsafe``.

``publish(..., msg_id=...)`` sets ``Nats-Msg-Id``: within the stream's duplicate window (2 minutes)
a second publish with the same id is not stored again and returns the first one's cursor. The
protocol has no such argument (SqliteBus has one writer and no redelivery); a worker that may
publish twice after a crash passes it directly.

Needs ``nats-py`` (``pip install 'kairos-harness[scale]'``), imported when a bus is created, and a
``nats-server -js``. Errors: :class:`BusUnavailableError` names the URL (its password or token
masked) and what to do.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kairos.errors import ConfigError, KairosError
from kairos.runtime.bus import _QUEUE_LIMIT, _SLOW, BusEvent, SubscriberTooSlow
from kairos.storage.config import mask_url

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription
    from nats.js.client import JetStreamContext

INSTALL_HINT = "pip install 'kairos-harness[scale]'"
_T = TypeVar("_T")
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,200}")
_STREAM = re.compile(r"[A-Za-z0-9_-]{1,64}")
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_PAGE = 1000
"""Messages fetched per pull request by :meth:`NatsBus.history`."""


class BusUnavailableError(KairosError):
    """The NATS server cannot be reached, has no JetStream, or lacks the stream; the message says what to do."""

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url
        """The server's URL, its password or token masked."""


def stream_name(workspace: Path | str) -> str:
    """A stream name for a workspace folder (its name plus a hash of its path) or a deployment name.

    A plain name (letters, digits, ``_``, ``-``) is kept as it is, so every machine of a deployment
    that passes the same name shares the stream; a path becomes ``kairos_<folder>_<hash>``.
    """
    text = str(workspace)
    if _STREAM.fullmatch(text):
        return text
    path = Path(text).expanduser().resolve()
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", path.name)[:32] or "root"
    return f"kairos_{slug}_{hashlib.sha256(str(path).encode()).hexdigest()[:10]}"


def session_token(session: str) -> str:
    """The subject token for a session id (the id itself, or ``~`` + base64url where it is not a valid token)."""
    if _TOKEN.fullmatch(session):
        return session
    return "~" + base64.urlsafe_b64encode(session.encode()).decode().rstrip("=")


@dataclass(eq=False)
class _Subscriber:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[BusEvent | None]
    sub: Subscription | None = None
    dropped: bool = False

    def put(self, item: BusEvent | None) -> None:
        """Queue an item (runs on the subscriber's loop)."""
        if self.dropped:
            return
        if item is not None and self.queue.qsize() >= _QUEUE_LIMIT:
            self.dropped = True
            self.queue.put_nowait(_SLOW)
        else:
            self.queue.put_nowait(item)

    def send(self, item: BusEvent | None) -> None:
        """Queue an item from another thread (dropped when the subscriber's loop is gone)."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.put, item)


class NatsBus:
    """An :class:`~kairos.runtime.bus.EventBus` on a JetStream stream.

    Args:
        url: the server, ``nats://host:port`` (several: comma-separated).
        stream: the stream's name (see :func:`stream_name`); subjects are ``kairos.<stream>.>``.
        keep: records kept (older ones are dropped, like SqliteBus's ``keep``); used when creating the stream.
        create: create the stream when it is missing (False: raise :class:`BusUnavailableError`).
        timeout: seconds to wait for the server (connect, acknowledgements, requests).

    Raises:
        ConfigError: nats-py is not installed, or ``stream`` is not a valid name.
        BusUnavailableError: the server is down, has no JetStream, or lacks the stream.
    """

    def __init__(
        self, url: str, stream: str, *, keep: int = 200_000, create: bool = True, timeout: float = 5.0
    ) -> None:
        try:
            import nats  # noqa: F401  (checked here so the error names the extra)
        except ImportError as exc:
            raise ConfigError(f"the NATS event bus needs nats-py: {INSTALL_HINT}") from exc
        if not _STREAM.fullmatch(stream):
            raise ConfigError(f"bad NATS stream name {stream!r}: use letters, digits, '_' and '-' (at most 64)")
        self.url = url
        self.shown_url = mask_url(url)
        """The URL with its password or token masked: what errors and logs show."""
        self.stream = stream
        self.prefix = f"kairos.{stream}"
        self._keep = keep
        self._timeout = timeout
        self._closed = False
        self._subscribers: set[_Subscriber] = set()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"kairos-nats-{stream}", daemon=True)
        self._thread.start()
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        try:
            self._call(self._connect(create), timeout * 3)
        except BaseException:
            self._stop_loop()
            raise

    # -- the client's own loop -------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        """Run ``coro`` on the client's loop and wait for its result."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("NatsBus methods may not be called from its own client thread")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout or self._timeout * 2)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise BusUnavailableError(
                f"NATS at {self.shown_url} did not answer within {timeout or self._timeout * 2:.0f} s; "
                "is nats-server running (with -js)?",
                url=self.shown_url,
            ) from None

    def _stop_loop(self) -> None:
        """Cancel what still runs on the client's loop (a connect that never ended), then stop it."""
        if self._loop.is_closed():
            return

        async def cancel_rest() -> None:
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_rest(), self._loop).result(self._timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    async def _connect(self, create: bool) -> None:
        import nats
        import nats.errors
        import nats.js.errors
        from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

        errors: list[Exception] = []

        async def quiet(exc: Exception) -> None:  # reconnects are reported by the calls that fail
            errors[:] = [exc]

        try:
            # a first connection that gives up after two tries: nats-py retries an unreachable server
            # forever when reconnecting is unbounded, and a wrong URL must fail at once
            probe = await nats.connect(
                self.url,
                connect_timeout=self._timeout,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.05,
                error_cb=quiet,
                name="kairos-probe",
            )
            await probe.close()
            self._nc = await nats.connect(
                self.url,
                connect_timeout=self._timeout,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                error_cb=quiet,
                name=f"kairos-bus-{self.stream}",
            )
        except Exception as exc:
            cause = errors[0] if errors else exc
            raise BusUnavailableError(
                f"cannot reach NATS at {self.shown_url} ({type(cause).__name__}: {self._scrub(cause)}); "
                "start `nats-server -js` there or pass the URL of a running one (--bus nats://host:port)",
                url=self.shown_url,
            ) from None
        self._js = self._nc.jetstream(timeout=self._timeout)
        subjects = [f"{self.prefix}.>"]
        try:
            try:
                info = await self._js.stream_info(self.stream)
            except nats.js.errors.NotFoundError:
                if not create:
                    raise BusUnavailableError(
                        f"NATS at {self.shown_url} has no stream {self.stream!r}; create it (nats stream add "
                        f"{self.stream} --subjects '{subjects[0]}') or let kairos create it",
                        url=self.shown_url,
                    ) from None
                config = StreamConfig(
                    name=self.stream,
                    subjects=subjects,
                    retention=RetentionPolicy.LIMITS,
                    storage=StorageType.FILE,
                    discard=DiscardPolicy.OLD,
                    max_msgs=self._keep or -1,
                    duplicate_window=120.0,
                    description="kairos event bus (kairos.runtime.bus_nats)",
                )
                info = await self._js.add_stream(config)
        except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError, nats.errors.TimeoutError):
            await self._nc.close()
            raise BusUnavailableError(
                f"NATS at {self.shown_url} does not answer JetStream requests; start nats-server with -js "
                "(JetStream enabled)",
                url=self.shown_url,
            ) from None
        except BusUnavailableError:
            await self._nc.close()
            raise
        if subjects[0] not in (info.config.subjects or []):
            await self._nc.close()
            raise BusUnavailableError(
                f"the stream {self.stream!r} on {self.shown_url} does not take {subjects[0]!r} "
                f"(its subjects: {info.config.subjects}); pick another stream name",
                url=self.shown_url,
            )

    def _scrub(self, exc: BaseException) -> str:
        """An error's text with the URL masked wherever the client quoted it."""
        text = str(exc)
        for url in {self.url, *self.url.split(",")}:
            text = text.replace(url.strip(), mask_url(url.strip())) if url.strip() else text
        return text

    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def _jetstream(self) -> JetStreamContext:
        if self._closed or self._js is None:
            raise BusUnavailableError(f"the NATS bus on {self.shown_url} is closed", url=self.shown_url)
        return self._js

    def _subject(self, session: str | None) -> str:
        return f"{self.prefix}.>" if session is None else f"{self.prefix}.{session_token(session)}"

    @staticmethod
    def _decode(msg: Msg) -> BusEvent:
        body = json.loads(msg.data)
        seq = msg.metadata.sequence.stream
        return BusEvent(int(seq), str(body["session"]), str(body["type"]), body["data"], float(body["at"]))

    def _failed(self, what: str, exc: BaseException) -> BusUnavailableError:
        return BusUnavailableError(
            f"{what} on NATS at {self.shown_url} failed ({type(exc).__name__}: {self._scrub(exc)}); "
            f"is nats-server running with -js, and does the stream {self.stream!r} exist?",
            url=self.shown_url,
        )

    # -- EventBus --------------------------------------------------------------------------------

    def publish(self, session: str, type: str, data: dict[str, Any], *, msg_id: str | None = None) -> BusEvent:
        """Publish a record and wait for JetStream's acknowledgement; its cursor is the stream sequence.

        Args:
            session: the session the record belongs to.
            type: the record's type (see :mod:`kairos.runtime.outbound`).
            data: its JSON-serialisable payload.
            msg_id: an idempotency id: a repeat within 2 minutes is not stored and returns the first cursor.

        Raises:
            BusUnavailableError: the server did not acknowledge (down, no stream, bus closed).
        """
        at = time.time()
        body = _encode({"session": session, "type": type, "data": data, "at": at}).encode()
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        js = self._jetstream
        try:
            ack = self._call(js.publish(self._subject(session), body, timeout=self._timeout, headers=headers))
        except BusUnavailableError:
            raise
        except Exception as exc:
            raise self._failed("publishing", exc) from None
        return BusEvent(int(ack.seq), session, type, data, at)

    def last_cursor(self) -> int:
        """The stream's last sequence (0 when nothing was published).

        Raises:
            BusUnavailableError: the server did not answer.
        """
        js = self._jetstream
        try:
            info = self._call(js.stream_info(self.stream))
        except BusUnavailableError:
            raise
        except Exception as exc:
            raise self._failed("reading the stream's state", exc) from None
        return int(info.state.last_seq)

    def history(self, session: str | None, after: int, limit: int = 1000) -> list[BusEvent]:
        """Stored records of ``session`` (None: all) after ``after``, oldest first, at most ``limit``.

        Raises:
            BusUnavailableError: the server did not answer.
        """
        if limit <= 0:
            return []
        try:
            return self._call(self._history(session, after, limit), self._timeout * 4)
        except BusUnavailableError:
            raise
        except Exception as exc:
            raise self._failed("reading history", exc) from None

    async def _history(self, session: str | None, after: int, limit: int) -> list[BusEvent]:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        js = self._jetstream
        assert self._nc is not None
        name = "kairos-history-" + self._nc._nuid.next().decode()
        config = ConsumerConfig(
            name=name,
            filter_subject=self._subject(session),
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(after, 0) + 1,
            ack_policy=AckPolicy.NONE,
            mem_storage=True,
            inactive_threshold=30.0,
            num_replicas=1,
        )
        info = await js.add_consumer(self.stream, config)
        try:
            want = min(limit, info.num_pending or 0)
            events: list[BusEvent] = []
            if want == 0:
                return events
            sub = await js.pull_subscribe_bind(name=name, stream=self.stream)
            try:
                while len(events) < want:
                    batch = await sub.fetch(min(_PAGE, want - len(events)), timeout=self._timeout)
                    events.extend(self._decode(m) for m in batch)
            finally:
                await sub.unsubscribe()
            return events
        finally:
            with contextlib.suppress(Exception):
                await js.delete_consumer(self.stream, name)

    def subscribe(self, session: str | None = None, after: int | None = None) -> AsyncIterator[BusEvent]:
        """Records of ``session`` (None: all) with a cursor above ``after`` (None: those published from now on).

        The starting cursor is fixed when this is called, so nothing published after the call is missed
        even if iteration starts later. Iterate on an event loop; the iterator ends when the bus closes.

        Raises:
            BusUnavailableError: the server did not answer (when called with ``after=None``, or on iteration).
            SubscriberTooSlow: (on iteration) the consumer fell 50,000 records behind.
        """
        start = self.last_cursor() if after is None else max(after, 0)
        return self._follow(session, start)

    async def _follow(self, session: str | None, start: int) -> AsyncIterator[BusEvent]:
        from nats.js.api import ConsumerConfig, DeliverPolicy

        subscriber = _Subscriber(asyncio.get_running_loop(), asyncio.Queue())
        with self._lock:
            if self._closed:
                return
            self._subscribers.add(subscriber)
        decode = self._decode

        async def on_message(msg: Msg) -> None:
            subscriber.send(decode(msg))

        try:
            js = self._jetstream
            coro = js.subscribe(
                self._subject(session),
                stream=self.stream,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                config=ConsumerConfig(opt_start_seq=start + 1),
                inactive_threshold=30.0,
                cb=on_message,
            )
            try:
                subscriber.sub = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))
            except BusUnavailableError:
                raise
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self.closed() and (task is None or not task.cancelling()):
                    return  # closing the bus cancelled the consumer's creation, not our caller
                raise
            except Exception as exc:
                if self.closed():
                    return
                raise self._failed("subscribing", exc) from None
            last = start
            while True:
                item = await subscriber.queue.get()
                if item is None:  # the bus closed
                    return
                if item is _SLOW:
                    raise SubscriberTooSlow("the subscriber fell behind; reconnect with the last cursor it saw")
                if item.cursor > last:
                    last = item.cursor
                    yield item
        finally:
            with self._lock:
                self._subscribers.discard(subscriber)
            sub = subscriber.sub
            if sub is not None and not self._closed:
                with contextlib.suppress(RuntimeError):  # the client's loop is gone
                    asyncio.run_coroutine_threadsafe(sub.unsubscribe(), self._loop)

    def close(self) -> None:
        """End every subscription, close the connection and stop the client's thread (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            subscribers, self._subscribers = list(self._subscribers), set()
        for subscriber in subscribers:
            subscriber.send(None)
        nc = self._nc
        if nc is not None:
            with contextlib.suppress(Exception):
                self._call(nc.close(), self._timeout)
        self._stop_loop()


__all__ = ["INSTALL_HINT", "BusUnavailableError", "NatsBus", "session_token", "stream_name"]
