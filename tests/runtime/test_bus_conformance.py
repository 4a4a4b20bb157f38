"""One conformance suite for :class:`~kairos.runtime.bus.EventBus`, run against every backend.

``sqlite`` is the embedded :class:`SqliteBus` on a runtime database; ``nats`` is :class:`NatsBus` on a
real ``nats-server -js`` on loopback (skipped with the install hint when it or nats-py is missing).
A case a backend does not promise is skipped with the reason, so the table of what each one
guarantees is this file's skip list.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kairos.runtime.bus import BusEvent, EventBus, SqliteBus
from kairos.runtime.db import RuntimeDB

WAIT_S = 10.0


@dataclass
class Backend:
    name: str
    open: Callable[[], EventBus]
    """A new client of the same bus (NATS: another connection to the same stream)."""
    shared_sequence: bool
    """Two clients (two processes' worth) share one sequence."""
    idempotent_publish: bool
    """``publish(..., msg_id=...)`` stores a repeat once."""
    opened: list[EventBus] = field(default_factory=list)


@pytest.fixture(params=["sqlite", "nats"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        db = RuntimeDB(tmp_path / "runtime.db")
        backend = Backend("sqlite", lambda: SqliteBus(db), shared_sequence=False, idempotent_publish=False)
    else:
        pytest.importorskip("nats", reason="nats-py is not installed: pip install -e '.[scale]'")
        from kairos.runtime.bus_nats import NatsBus

        url, stream = request.getfixturevalue("nats_url"), request.getfixturevalue("nats_stream")
        backend = Backend("nats", lambda: NatsBus(url, stream), shared_sequence=True, idempotent_publish=True)
    make = backend.open

    def open_and_keep() -> EventBus:
        bus = make()
        backend.opened.append(bus)
        return bus

    backend.open = open_and_keep
    try:
        yield backend
    finally:
        for bus in backend.opened:
            bus.close()
        if request.param == "sqlite":
            db.close()


@pytest.fixture
def bus(backend: Backend) -> EventBus:
    return backend.open()


def _key(events: list[BusEvent]) -> list[tuple[int, str, str, dict[str, Any]]]:
    return [(e.cursor, e.session, e.type, e.data) for e in events]


async def _take(it: AsyncIterator[BusEvent], n: int) -> list[BusEvent]:
    """The next ``n`` records of a subscription (bounded wait)."""
    got: list[BusEvent] = []

    async def run() -> None:
        async for event in it:
            got.append(event)
            if len(got) == n:
                return

    await asyncio.wait_for(run(), WAIT_S)
    return got


async def _started(it: AsyncIterator[BusEvent]) -> asyncio.Task[BusEvent]:
    """Start iterating (the first ``__anext__`` registers the subscriber) and return the pending first record."""
    first: asyncio.Task[BusEvent] = asyncio.ensure_future(anext(it))  # type: ignore[arg-type]
    for _ in range(3):
        await asyncio.sleep(0)
    return first


def test_an_empty_bus(bus: EventBus) -> None:
    assert bus.last_cursor() == 0
    assert bus.history(None, 0) == []
    assert bus.history("a", 0) == []


def test_publish_assigns_growing_cursors_and_history_keeps_order(bus: EventBus) -> None:
    published = [bus.publish(s, "note", {"i": i}) for i, s in enumerate("abab")]
    cursors = [e.cursor for e in published]
    assert cursors == sorted(cursors) and len(set(cursors)) == 4 and cursors[0] >= 1
    assert bus.last_cursor() == cursors[-1]
    assert _key(bus.history(None, 0)) == _key(published)
    assert _key(bus.history("a", 0)) == _key(published[0::2])
    assert _key(bus.history("b", published[1].cursor)) == _key([published[3]])


def test_history_after_a_cursor_and_limits(bus: EventBus) -> None:
    published = [bus.publish("a", "note", {"i": i}) for i in range(10)]
    assert _key(bus.history(None, published[2].cursor, limit=4)) == _key(published[3:7])
    assert _key(bus.history("a", published[7].cursor, limit=100)) == _key(published[8:])
    assert bus.history("a", published[-1].cursor) == []
    assert bus.history(None, 0, limit=0) == []
    assert [e.data["i"] for e in bus.history("a", 0, limit=1)] == [0]


def test_records_round_trip(bus: EventBus) -> None:
    data = {"text": "héllo ✓ 日本", "n": 1.5, "nested": {"list": [1, None, True], "empty": {}}, "big": 2**53}
    event = bus.publish("a", "message.delta", data)
    assert (event.session, event.type, event.data) == ("a", "message.delta", data)
    (stored,) = bus.history("a", 0)
    assert _key([stored]) == _key([event])
    assert abs(stored.at - event.at) < 1e-3
    assert stored.to_record()["cursor"] == event.cursor


def test_session_ids_that_are_not_simple_tokens_are_kept_apart(bus: EventBus) -> None:
    sessions = ["a", "a.b", "a b", "a.*", ">", "ü-1", "", "~YQ", "x" * 300]
    for s in sessions:
        bus.publish(s, "note", {"s": s})
    for s in sessions:
        assert [e.session for e in bus.history(s, 0)] == [s], s
    assert len(bus.history(None, 0)) == len(sessions)


async def test_subscribe_from_a_cursor_replays_then_follows_live(bus: EventBus) -> None:
    first = bus.publish("a", "note", {"i": 0})
    bus.publish("a", "note", {"i": 1})
    bus.publish("b", "note", {"i": 2})
    bus.publish("a", "note", {"i": 3})
    it = bus.subscribe("a", after=first.cursor)
    replayed = await _take(it, 2)
    assert [e.data["i"] for e in replayed] == [1, 3]
    pending = asyncio.ensure_future(_take(it, 2))
    bus.publish("b", "note", {"i": 4})
    bus.publish("a", "note", {"i": 5})
    bus.publish("a", "note", {"i": 6})
    live = await pending
    assert [e.data["i"] for e in live] == [5, 6]
    await it.aclose()  # type: ignore[attr-defined]


async def test_subscribe_to_every_session(bus: EventBus) -> None:
    published = [bus.publish(s, "note", {"i": i}) for i, s in enumerate("abc")]
    it = bus.subscribe(None, after=0)
    assert _key(await _take(it, 3)) == _key(published)
    pending = asyncio.ensure_future(_take(it, 2))
    more = [bus.publish("z", "note", {}), bus.publish("a", "note", {})]
    assert _key(await pending) == _key(more)
    await it.aclose()  # type: ignore[attr-defined]


async def test_a_subscriber_without_cursor_gets_only_what_is_published_after_it(bus: EventBus) -> None:
    bus.publish("a", "note", {"old": True})
    it = bus.subscribe("a")
    first = await _started(it)
    new = [bus.publish("a", "note", {"i": i}) for i in range(3)]
    got = [await asyncio.wait_for(first, WAIT_S), *await _take(it, 2)]
    assert _key(got) == _key(new)
    await it.aclose()  # type: ignore[attr-defined]


async def test_nothing_is_missed_or_repeated_between_history_and_live(bus: EventBus) -> None:
    """A subscriber that starts from 0 while records keep coming crosses history pages (SqliteBus: 1000) into live."""
    for i in range(1200):
        bus.publish("a" if i % 3 else "b", "note", {"i": i})
    it = bus.subscribe(None, after=0)
    got: list[BusEvent] = []

    async def consume() -> None:
        async for event in it:
            got.append(event)
            if len(got) == 1300:
                return

    consumer = asyncio.ensure_future(consume())
    for i in range(1200, 1300):
        bus.publish("a", "note", {"i": i})
        if i % 10 == 0:
            await asyncio.sleep(0)
    await asyncio.wait_for(consumer, WAIT_S * 3)
    assert [e.data["i"] for e in got] == list(range(1300))
    cursors = [e.cursor for e in got]
    assert cursors == sorted(set(cursors))
    await it.aclose()  # type: ignore[attr-defined]


async def test_a_subscriber_resumes_from_the_last_cursor_it_saw(bus: EventBus) -> None:
    published = [bus.publish("a", "note", {"i": i}) for i in range(6)]
    it = bus.subscribe("a", after=0)
    seen = await _take(it, 2)
    await it.aclose()  # type: ignore[attr-defined]  (the client disconnects)
    published += [bus.publish("a", "note", {"i": i}) for i in range(6, 8)]
    resumed = bus.subscribe("a", after=seen[-1].cursor)
    assert _key(seen + await _take(resumed, 6)) == _key(published)
    await resumed.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize("settle_s", [0.0, 0.2], ids=["at-once", "settled"])
async def test_closing_the_bus_ends_its_subscriptions(bus: EventBus, settle_s: float) -> None:
    """Also while a subscription is still being set up (NatsBus creates its consumer on the client's loop)."""
    bus.publish("a", "note", {})
    it = bus.subscribe("a")
    first = await _started(it)
    await asyncio.sleep(settle_s)
    bus.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(first, WAIT_S)
    bus.close()  # idempotent


async def test_two_clients_share_one_sequence(backend: Backend) -> None:
    if not backend.shared_sequence:
        pytest.skip(f"{backend.name}: one process's bus (a second instance on the file would reuse cursors)")
    one, two = backend.open(), backend.open()
    watcher = two.subscribe(None, after=0)
    published = []
    for i in range(10):
        published.append((one if i % 2 else two).publish(f"s{i % 3}", "note", {"i": i}))
    cursors = [e.cursor for e in published]
    assert cursors == sorted(set(cursors))
    assert one.last_cursor() == two.last_cursor() == cursors[-1]
    assert _key(one.history(None, 0)) == _key(two.history(None, 0)) == _key(published)
    assert _key(await _take(watcher, 10)) == _key(published)
    await watcher.aclose()  # type: ignore[attr-defined]


def test_a_repeated_publish_with_the_same_id_is_stored_once(backend: Backend) -> None:
    if not backend.idempotent_publish:
        pytest.skip(f"{backend.name}: EventBus.publish takes no idempotency id (one writer, nothing redelivered)")
    one, two = backend.open(), backend.open()
    first = one.publish("a", "tool.done", {"n": 1}, msg_id="turn-7/effect-1")  # type: ignore[call-arg]
    again = two.publish("a", "tool.done", {"n": 1}, msg_id="turn-7/effect-1")  # type: ignore[call-arg]
    other = one.publish("a", "tool.done", {"n": 2}, msg_id="turn-7/effect-2")  # type: ignore[call-arg]
    assert again.cursor == first.cursor < other.cursor
    assert [e.data["n"] for e in one.history("a", 0)] == [1, 2]
