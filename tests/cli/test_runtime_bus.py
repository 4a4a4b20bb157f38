"""build_runtime (``kairos serve`` and ``kairos chat``) publishes on the bus ``[storage] bus`` names."""

from __future__ import annotations

from pathlib import Path

import pytest

from kairos.cli._runtime import build_runtime
from kairos.config import KairosConfig
from kairos.context.session import SessionStore
from kairos.runtime import Event, SqliteBus
from kairos.testing import ScriptedModel, reply
from kairos.testing.servers import free_port

pytest.importorskip("nats", reason="nats-py is not installed: pip install -e '.[scale]'")

from kairos.runtime.bus_nats import BusUnavailableError, NatsBus


def _config(**storage: str) -> KairosConfig:
    return KairosConfig.model_validate({"storage": storage})


async def test_a_session_runs_on_the_nats_bus(tmp_path: Path, nats_url: str, nats_stream: str) -> None:
    store = SessionStore(tmp_path)
    try:
        rt = build_runtime(
            ScriptedModel([reply("on nats")]), tmp_path, _config(bus=nats_url, deployment=nats_stream), store
        )
        assert isinstance(rt.bus, NatsBus) and rt.bus.stream == nats_stream
        async with rt:
            receipt = await rt.submit(Event("user.message", "hi"))
            await rt.wait_idle(receipt.session)
            types = [e.type for e in rt.bus.history(receipt.session, 0)]
        assert "agent.final" in types
    finally:
        store.close()


def test_the_embedded_bus_is_the_default(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    try:
        rt = build_runtime(ScriptedModel([]), tmp_path, KairosConfig(), store)
        assert isinstance(rt.bus, SqliteBus)
        rt.bus.close()
    finally:
        store.close()


def test_an_unreachable_bus_fails_the_build(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    try:
        with pytest.raises(BusUnavailableError, match="nats-server -js"):
            build_runtime(ScriptedModel([]), tmp_path, _config(bus=f"nats://127.0.0.1:{free_port()}"), store)
    finally:
        store.close()
