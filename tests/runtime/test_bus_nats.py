"""What NatsBus adds to the shared suite (test_bus_conformance.py): its errors, names and latency."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("nats", reason="nats-py is not installed: pip install -e '.[scale]'")

from kairos.errors import ConfigError
from kairos.runtime.bus_nats import BusUnavailableError, NatsBus, session_token, stream_name
from kairos.testing.servers import NatsServer, ServerUnavailable, free_port


@pytest.fixture
def own_server() -> Iterator[NatsServer]:
    """A server of this test's own (it is stopped and started again)."""
    try:
        server = NatsServer.start()
    except ServerUnavailable as e:
        pytest.skip(str(e))
    try:
        yield server
    finally:
        server.stop()


def test_an_unreachable_server_is_named_at_once() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(BusUnavailableError, match="cannot reach NATS at " + url) as info:
        NatsBus(url, "s")
    assert time.monotonic() - began < 5
    assert info.value.url == url and "nats-server -js" in str(info.value)


def test_a_server_without_jetstream_is_named() -> None:
    try:
        server = NatsServer.start(jetstream=False)
    except ServerUnavailable as e:
        pytest.skip(str(e))
    try:
        with pytest.raises(BusUnavailableError, match="does not answer JetStream requests.*-js"):
            NatsBus(server.url, "s", timeout=1)
    finally:
        server.stop()


def test_a_missing_stream_is_created_unless_told_not_to(nats_url: str, nats_stream: str) -> None:
    with pytest.raises(BusUnavailableError, match=f"no stream '{nats_stream}'"):
        NatsBus(nats_url, nats_stream, create=False)
    NatsBus(nats_url, nats_stream).close()
    bus = NatsBus(nats_url, nats_stream, create=False)
    assert bus.last_cursor() == 0
    bus.close()


def test_a_stream_of_other_subjects_is_refused(nats_url: str, nats_stream: str) -> None:
    import asyncio

    import nats

    async def make_foreign_stream() -> None:
        nc = await nats.connect(nats_url)
        await nc.jetstream().add_stream(name=nats_stream, subjects=[f"other.{nats_stream}"])
        await nc.close()

    asyncio.run(make_foreign_stream())
    with pytest.raises(BusUnavailableError, match="does not take"):
        NatsBus(nats_url, nats_stream)


def test_bad_stream_names_are_config_errors(nats_url: str) -> None:
    for bad in ("a.b", "a b", "*", "", "x" * 65):
        with pytest.raises(ConfigError, match="bad NATS stream name"):
            NatsBus(nats_url, bad)


def test_stream_and_subject_names(tmp_path: Path) -> None:
    assert stream_name("prod-eu_1") == "prod-eu_1"  # a deployment name is kept
    ws = tmp_path / "my project.v2"
    name = stream_name(ws)
    assert name == stream_name(str(ws)) and name.startswith("kairos_my_project_v2_")
    assert name != stream_name(tmp_path / "other" / "my project.v2")
    assert session_token("abc-123_X") == "abc-123_X"
    assert {session_token(s) for s in ("a.b", "a b", "*", ">", "")} >= {"~YS5i", "~"}
    assert len({session_token(s) for s in ("a.b", "a_b", "a b", "a*b")}) == 4


def test_publishing_while_the_server_is_down_fails_then_recovers(own_server: NatsServer) -> None:
    bus = NatsBus(own_server.url, "s", timeout=1.0)
    try:
        before = bus.publish("a", "note", {"i": 1})
        own_server.halt()
        with pytest.raises(BusUnavailableError, match=own_server.url):
            bus.publish("a", "note", {"i": 2})
        own_server.run()  # same port, same store: the client reconnects by itself
        deadline = time.monotonic() + 15
        while True:
            try:
                after = bus.publish("a", "note", {"i": 3})
                break
            except BusUnavailableError:
                if time.monotonic() > deadline:
                    raise
        assert after.cursor > before.cursor
        assert [e.data["i"] for e in bus.history("a", 0)][0] == 1
    finally:
        bus.close()


def test_a_closed_bus_refuses_to_publish(nats_url: str, nats_stream: str) -> None:
    bus = NatsBus(nats_url, nats_stream)
    bus.close()
    with pytest.raises(BusUnavailableError, match="closed"):
        bus.publish("a", "note", {})


def test_publish_waits_for_the_ack_in_well_under_a_millisecond_on_loopback(nats_url: str, nats_stream: str) -> None:
    """Measured here: the median publish+ack is ~0.2 ms on loopback; the bound only catches a regression."""
    bus = NatsBus(nats_url, nats_stream)
    try:
        for _ in range(50):  # warm up
            bus.publish("a", "note", {"i": 0})
        took = []
        for i in range(500):
            began = time.perf_counter()
            bus.publish("a", "note", {"i": i})
            took.append(time.perf_counter() - began)
        assert statistics.median(took) < 0.005
    finally:
        bus.close()


def test_without_nats_py_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nats", None)  # what `import nats` sees when it is missing
    with pytest.raises(ConfigError, match=r"pip install 'kairos-harness\[scale\]'"):
        NatsBus("nats://127.0.0.1:4222", "s")
