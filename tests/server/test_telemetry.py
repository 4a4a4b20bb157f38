"""GenAI spans from the bus, collected with the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.runtime import Event, Runtime
from kairos.server import GenAITelemetry, telemetry_from_env
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.function import tool
from tests.server.conftest import until


@tool
def weather(city: str) -> str:
    """The weather."""
    return f"sunny in {city}"


@tool
def broken() -> str:
    """Fails."""
    raise ValueError("no")


async def test_runs_model_calls_and_tool_calls_become_genai_spans(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = GenAITelemetry(provider)
    model = ScriptedModel(
        [reply("", call("weather", {"city": "Oslo"}, id="c1"), call("broken", id="c2")), reply("it is sunny")]
    )
    async with Runtime(Agent(model, tools=[weather, broken]), SessionStore(tmp_path), components=[telemetry]) as rt:
        sid = rt.create_session()
        await asyncio.sleep(0)  # the component subscribes
        await rt.submit(Event("user.input", "weather in Oslo?", {"type": "user"}, session=sid))
        await rt.wait_idle(sid)
        await until(lambda: any(s.name.startswith("invoke_agent") for s in exporter.get_finished_spans()))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    run, chat = spans["invoke_agent kairos"], spans["chat scripted"]
    tool_span, failed = spans["execute_tool weather"], spans["execute_tool broken"]
    assert run.attributes is not None and chat.attributes is not None and tool_span.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.conversation.id"] == sid
    assert chat.attributes["gen_ai.operation.name"] == "chat" and chat.attributes["gen_ai.request.model"] == "scripted"
    assert int(chat.attributes["gen_ai.usage.input_tokens"]) > 0  # type: ignore[arg-type]
    assert tool_span.attributes["gen_ai.tool.name"] == "weather" and tool_span.attributes["gen_ai.tool.call.id"] == "c1"
    assert failed.status.status_code == StatusCode.ERROR
    assert len([s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]) == 2
    for child in (chat, tool_span, failed):  # all inside the run
        assert child.parent is not None and child.parent.span_id == run.context.span_id
    assert run.attributes["gen_ai.usage.input_tokens"] >= chat.attributes["gen_ai.usage.input_tokens"]  # type: ignore[operator]


def test_nothing_is_exported_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert telemetry_from_env() is None
