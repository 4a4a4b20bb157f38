"""OpenTelemetry spans for runs, model calls and tool calls, following the GenAI semantic conventions.

:class:`GenAITelemetry` is a runtime component that reads the bus (what every front end sees) and
turns its records into spans: ``invoke_agent kairos`` for a run (``run.started`` … ``run.ended``),
``chat <model>`` for each model request (``agent.request``, timed by its ``total_s``) and
``execute_tool <name>`` for each tool call (``agent.tool_started`` … ``agent.tool_finished``), with
``gen_ai.*`` attributes. It needs only ``opentelemetry-api``: without a configured SDK the spans
cost nothing and go nowhere. :func:`telemetry_from_env` builds one only when tracing is configured.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from kairos.runtime import BusEvent, SubscriberTooSlow
from kairos.runtime.handle import RuntimeContext
from kairos.runtime.outbound import (
    AgentError,
    AgentFinal,
    AgentRequest,
    AgentToolFinished,
    AgentToolStarted,
    RunEnded,
    RunStarted,
)

log = logging.getLogger("kairos.server.telemetry")
AGENT_NAME = "kairos"
_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def _ns(at: float) -> int:
    return int(at * 1e9)


class GenAITelemetry:
    """A runtime component: bus records → GenAI spans (see the module docstring).

    Args:
        tracer_provider: where spans go (default: the global provider, a no-op unless an SDK is set).
        model: ``gen_ai.request.model`` (default: the runtime agent's model name).
    """

    name = "telemetry"
    leader_only = False

    def __init__(self, tracer_provider: TracerProvider | None = None, model: str | None = None) -> None:
        provider = tracer_provider or trace.get_tracer_provider()
        self.tracer = provider.get_tracer("kairos.runtime")
        self.model = model
        self._runs: dict[str, Span] = {}
        self._usage: dict[str, list[int]] = {}
        self._tools: dict[tuple[str, str], Span] = {}

    async def run(self, runtime: RuntimeContext) -> None:
        """Follow the bus until the runtime stops; open spans are ended then."""
        if self.model is None:
            self.model = runtime.model_name
        after: int | None = None
        try:
            while True:
                try:
                    async for ev in runtime.bus.subscribe(None, after=after):
                        after = ev.cursor
                        self.record(ev)
                    return
                except SubscriberTooSlow:
                    log.warning("telemetry fell behind the bus; resuming from cursor %s", after)
        finally:
            self.close("the runtime stopped")

    def record(self, ev: BusEvent) -> None:
        """Turn one bus record into span starts and ends (never raises; unknown records are skipped)."""
        try:
            self._record(ev)
        except Exception:
            log.exception("telemetry could not record %s", ev.type)

    def _base(self, session: str, operation: str) -> dict[str, Any]:
        return {
            "gen_ai.operation.name": operation,
            "gen_ai.conversation.id": session,
            "gen_ai.request.model": self.model or "unknown",
        }

    def _parent(self, session: str) -> Any:
        run = self._runs.get(session)
        return trace.set_span_in_context(run) if run is not None else None

    def _record(self, ev: BusEvent) -> None:
        sid, at = ev.session, ev.at
        match ev.payload:
            case RunStarted():
                self._end_run(sid, at, "a new run started")
                attrs = {**self._base(sid, "invoke_agent"), "gen_ai.agent.name": AGENT_NAME}
                name = f"invoke_agent {AGENT_NAME}"
                self._runs[sid] = self.tracer.start_span(
                    name, kind=SpanKind.INTERNAL, start_time=_ns(at), attributes=attrs
                )
                self._usage[sid] = [0, 0]
            case AgentRequest() as req:
                self._request(sid, at, req)
            case AgentToolStarted(name=name, id=call_id):
                attrs = {**self._base(sid, "execute_tool"), "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}
                self._tools[(sid, call_id)] = self.tracer.start_span(
                    f"execute_tool {name}", context=self._parent(sid), start_time=_ns(at), attributes=attrs
                )
            case AgentToolFinished() as done:
                tool_span = self._tools.pop((sid, done.id), None)
                if tool_span is not None:
                    if done.is_error:
                        tool_span.set_attribute("error.type", "tool_error")
                        tool_span.set_status(Status(StatusCode.ERROR, done.content[:200]))
                    tool_span.end(end_time=_ns(at))
            case AgentError(message=message) if sid in self._runs:
                self._runs[sid].set_attribute("error.type", "agent_error")
                self._runs[sid].set_status(Status(StatusCode.ERROR, message[:200]))
            case AgentFinal(stop_reason=stop_reason) if sid in self._runs:
                self._runs[sid].set_attribute("kairos.stop_reason", stop_reason)
            case RunEnded():
                self._end_run(sid, at, "")

    def _request(self, sid: str, at: float, req: AgentRequest) -> None:
        """A ``chat`` span for a model request that ended at ``at`` (it began ``total_s`` earlier)."""
        attrs = {
            **self._base(sid, "chat"),
            "gen_ai.usage.input_tokens": req.prompt_tokens,
            "gen_ai.usage.output_tokens": req.completion_tokens,
            "gen_ai.usage.cache_read.input_tokens": req.cached_prompt_tokens,
        }
        span = self.tracer.start_span(
            f"chat {self.model}",
            context=self._parent(sid),
            kind=SpanKind.CLIENT,
            start_time=_ns(at - req.total_s),
            attributes=attrs,
        )
        span.end(end_time=_ns(at))
        if sid in self._usage:
            self._usage[sid][0] += req.prompt_tokens
            self._usage[sid][1] += req.completion_tokens

    def _end_run(self, sid: str, at: float, why: str) -> None:
        for key in [k for k in self._tools if k[0] == sid]:
            self._tools.pop(key).end(end_time=_ns(at))
        span = self._runs.pop(sid, None)
        if span is None:
            return
        prompt, completion = self._usage.pop(sid, [0, 0])
        span.set_attribute("gen_ai.usage.input_tokens", prompt)
        span.set_attribute("gen_ai.usage.output_tokens", completion)
        if why:
            span.set_attribute("kairos.unfinished", why)
        span.end(end_time=_ns(at))

    def close(self, why: str) -> None:
        """End every open span (the runtime stops)."""
        for span in self._tools.values():
            span.end()
        self._tools.clear()
        for sid in list(self._runs):
            span = self._runs.pop(sid)
            span.set_attribute("kairos.unfinished", why)
            span.end()


def telemetry_from_env(model: str | None = None) -> GenAITelemetry | None:
    """A telemetry component when tracing is configured, else None (nothing is exported then).

    Configured means an OTLP endpoint in the environment (``OTEL_EXPORTER_OTLP_ENDPOINT``; this
    needs ``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``) or a global SDK
    tracer provider set by the host program (e.g. ``opentelemetry-instrument``).
    """
    if any(os.environ.get(v) for v in _ENDPOINT_VARS):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter,
            )
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider as SdkProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as e:
            log.warning(
                "OTEL_EXPORTER_OTLP_ENDPOINT is set but the exporter is missing (%s); install "
                "opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http. No spans are exported.",
                e,
            )
            return None
        provider = SdkProvider(
            resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "kairos")})
        )
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return GenAITelemetry(provider, model)
    current = trace.get_tracer_provider()
    if type(current).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return None
    return GenAITelemetry(current, model)


__all__ = ["AGENT_NAME", "GenAITelemetry", "telemetry_from_env"]
