"""OpenAICompatModel against a loopback chat-completions server (real SDK, real sockets)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest

from kairos.errors import ModelError, ModelUnavailableError
from kairos.models._retry import Retry, RetryPolicy, retry_after_seconds, stream_with_retries
from kairos.models.base import Model, complete
from kairos.models.openai_compat import NO_KEY_PLACEHOLDER, OpenAICompatModel
from kairos.models.types import (
    HARNESS,
    SYSTEM_CACHE_BOUNDARY,
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    ReasoningPolicy,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
)
from tests.models.fake_servers import FakeServer, Reply, chat_chunk, chat_stream, openai_error, tool_fragment

READ = ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as s:
        yield s


def make_model(server: FakeServer, **kw: Any) -> OpenAICompatModel:
    kw.setdefault("backoff_s", 0.001)
    return OpenAICompatModel("fake-model", base_url=server.openai_base_url, api_key="sk-test", **kw)


def make_request(*messages: Message, tools: tuple[ToolSpec, ...] = (), deployment: str = "cwd: /repo") -> ModelRequest:
    return ModelRequest(
        system_static="You are kairos.",
        system_deployment=deployment,
        tools=tools,
        messages=messages or (Message.user("hi"),),
        max_tokens=256,
        temperature=0.2,
    )


async def collect(model: OpenAICompatModel, request: ModelRequest) -> tuple[list[StreamEvent], ModelResponse]:
    events = [e async for e in model.stream(request)]
    done = [e for e in events if isinstance(e, ResponseDone)]
    assert len(done) == 1 and events[-1] is done[0]
    return events[:-1], done[0].response


async def test_text_stream_is_assembled(server: FakeServer) -> None:
    server.script(
        chat_stream({"content": "Hel"}, {"content": "lo"}, usage={"prompt_tokens": 12, "completion_tokens": 2})
    )
    async with make_model(server) as model:
        assert isinstance(model, Model)
        deltas, response = await collect(model, make_request())
    assert deltas == [TextDelta("Hel"), TextDelta("lo")]
    assert response.message == Message.assistant("Hello")
    assert response.finish_reason == "stop"
    usage = response.usage
    assert (usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens) == (12, 0, 2)
    assert usage.ttft_s is not None and usage.total_s >= usage.ttft_s >= 0


async def test_parallel_tool_calls_are_assembled_from_fragments(server: FakeServer) -> None:
    server.script(
        chat_stream(
            tool_fragment(0, id="call_a", name="read_file", arguments=""),
            tool_fragment(1, id="call_b", name="read_file", arguments='{"pa'),
            tool_fragment(0, arguments='{"path": '),
            tool_fragment(1, arguments='th": "b.py"}'),
            tool_fragment(0, arguments='"a.py"}'),
            finish_reason="tool_calls",
            usage={"prompt_tokens": 30, "completion_tokens": 20},
        )
    )
    async with make_model(server) as model:
        deltas, response = await collect(model, make_request(tools=(READ,)))
    assert deltas[0] == ToolCallDelta(0, "call_a", "read_file", "")
    assert deltas[1] == ToolCallDelta(1, "call_b", "read_file", '{"pa')
    assert deltas[2] == ToolCallDelta(0, None, None, '{"path": ')
    assert response.message.tool_calls == (
        ToolCall("call_a", "read_file", '{"path": "a.py"}'),
        ToolCall("call_b", "read_file", '{"path": "b.py"}'),
    )
    assert response.finish_reason == "tool_calls"


async def test_cached_tokens_come_from_prompt_tokens_details(server: FakeServer) -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 96}}
    server.script(chat_stream({"content": "ok"}, usage=usage))
    async with make_model(server) as model:
        _, response = await collect(model, make_request())
    assert response.usage.cached_prompt_tokens == 96
    assert response.usage.new_prompt_tokens == 4


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_deltas(server: FakeServer, field: str) -> None:
    server.script(chat_stream({field: "think "}, {field: "hard"}, {"content": "done"}, usage={"prompt_tokens": 1}))
    async with make_model(server) as model:
        deltas, response = await collect(model, make_request())
    assert deltas == [ReasoningDelta("think "), ReasoningDelta("hard"), TextDelta("done")]
    assert response.message.reasoning == "think hard"
    assert response.message.content == "done"


async def test_missing_usage_falls_back_to_estimates(server: FakeServer) -> None:
    server.script(chat_stream({"content": "a reply"}))
    async with make_model(server) as model:
        request = make_request()
        _, response = await collect(model, request)
    assert response.usage.prompt_tokens == model.count_tokens(request) > 0
    assert response.usage.completion_tokens > 0


async def test_rate_limit_is_retried(server: FakeServer) -> None:
    server.script(openai_error(429, "slow down", {"Retry-After": "0"}), chat_stream({"content": "ok"}))
    async with make_model(server) as model:
        response = await complete(model, make_request())
    assert response.message.content == "ok"
    bodies = server.bodies()
    assert len(bodies) == 2 and bodies[0] == bodies[1]
    assert all(r.headers.get("x-stainless-retry-count", "0") == "0" for r in server.requests)  # SDK retries off


async def test_server_errors_until_the_last_retry_raise_unavailable(server: FakeServer) -> None:
    server.script(*[openai_error(503, "overloaded") for _ in range(3)])
    async with make_model(server, max_retries=2) as model:
        with pytest.raises(ModelUnavailableError) as info:
            await complete(model, make_request())
    assert info.value.attempts == 3
    assert info.value.model == "fake-model"
    text = str(info.value)
    assert "3 attempt" in text and server.openai_base_url in text and "503" in text and "overloaded" in text
    assert len(server.requests) == 3


async def test_client_error_is_not_retried(server: FakeServer) -> None:
    server.script(openai_error(400, "max_tokens is too large"))
    async with make_model(server) as model:
        with pytest.raises(ModelError) as info:
            await complete(model, make_request())
    assert not isinstance(info.value, ModelUnavailableError)
    assert "max_tokens is too large" in str(info.value)
    assert len(server.requests) == 1


async def test_unreachable_server_raises_unavailable() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAICompatModel("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff_s=0.001)
    async with model:
        with pytest.raises(ModelUnavailableError) as info:
            await complete(model, make_request())
    assert info.value.attempts == 2
    assert "connection" in str(info.value).lower()


async def test_error_after_output_started_is_not_retried(server: FakeServer) -> None:
    reply = chat_stream({"content": "partial"}, hold_open=True)
    assert reply.events is not None
    reply.events.append((None, {"error": {"message": "engine died", "code": "503"}}))
    reply.hold_open = False
    server.script(reply, chat_stream({"content": "never"}))
    seen: list[StreamEvent] = []
    async with make_model(server) as model:
        with pytest.raises(ModelUnavailableError, match="after output had started"):
            async for event in model.stream(make_request()):
                seen.append(event)
    assert seen == [TextDelta("partial")]
    assert len(server.requests) == 1


async def test_request_shape(server: FakeServer) -> None:
    server.script(chat_stream({"content": "ok"}), chat_stream({"content": "ok"}))
    async with make_model(server, extra_body={"top_k": 20}) as model:
        await complete(model, make_request(Message.user("hi"), tools=(READ,)))
        await complete(model, make_request(Message.user("hi"), deployment=""))
    first, second = server.bodies()
    assert server.requests[0].path == "/v1/chat/completions"
    assert SYSTEM_CACHE_BOUNDARY.strip() not in json.dumps(first)
    assert first["messages"][0] == {"role": "system", "content": "You are kairos.\n\ncwd: /repo"}
    assert first["messages"][1] == {"role": "user", "content": "hi"}
    assert first["tools"] == [READ.to_openai()]
    assert first["stream"] is True and first["stream_options"] == {"include_usage": True}
    assert (first["model"], first["max_tokens"], first["temperature"], first["top_k"]) == ("fake-model", 256, 0.2, 20)
    assert "tools" not in second
    assert second["messages"][0] == {"role": "system", "content": "You are kairos."}


def _history() -> tuple[Message, ...]:
    call = ToolCall("c1", "read_file", '{"path": "a.py"}')
    return (
        Message.user("first task"),
        Message.assistant("done 1", reasoning="old thought"),
        Message.user("second task"),
        Message.assistant("", (call,), reasoning="new thought"),
        Message.tool("c1", "file text"),
        Message("user", "[status] step 2", origin=HARNESS),
    )


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (ReasoningPolicy.STRIP, [None, None]),
        (ReasoningPolicy.SINCE_LAST_USER, [None, "new thought"]),
        (ReasoningPolicy.KEEP_ALL, ["old thought", "new thought"]),
    ],
)
async def test_reasoning_policy_is_applied(server: FakeServer, policy: ReasoningPolicy, expected: list[str]) -> None:
    server.script(chat_stream({"content": "ok"}))
    async with make_model(server, reasoning_policy=policy) as model:
        await complete(model, make_request(*_history()))
    sent = server.bodies()[0]["messages"]
    assistants = [m for m in sent if m["role"] == "assistant"]
    assert [m.get("reasoning_content") for m in assistants] == expected
    assert sent[4] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
        ],
        **({"reasoning_content": "new thought"} if expected[1] else {}),
    }
    assert sent[5] == {"role": "tool", "content": "file text", "tool_call_id": "c1"}


async def test_cancellation_closes_the_http_stream(server: FakeServer) -> None:
    server.script(chat_stream({"content": "first"}, hold_open=True))
    first = asyncio.Event()

    async def consume(model: OpenAICompatModel) -> None:
        async for event in model.stream(make_request()):
            if isinstance(event, TextDelta):
                first.set()

    async with make_model(server) as model:
        task = asyncio.create_task(consume(model))
        await asyncio.wait_for(first.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(server.client_hung_up.wait, 10)


async def test_configuration_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("KAIROS_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KAIROS_BASE_URL", "http://127.0.0.1:9/v1")
    async with OpenAICompatModel("qwen3") as model:
        assert model.base_url == "http://127.0.0.1:9/v1"
        assert model._client.api_key == NO_KEY_PLACEHOLDER  # keyless local servers work
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    async with OpenAICompatModel("qwen3", base_url="http://x/v1") as model:
        assert model._client.api_key == "sk-env"


async def test_stream_error_chunk_before_output_is_retried(server: FakeServer) -> None:
    busy = {"error": {"message": "busy", "code": 429}}
    error = Reply(events=[(None, chat_chunk({"role": "assistant"})), (None, busy)])
    server.script(error, chat_stream({"content": "ok"}))
    async with make_model(server) as model:
        response = await complete(model, make_request())
    assert response.message.content == "ok"
    assert len(server.requests) == 2


# ---- the shared retry helper ----------------------------------------------------------------


def test_retry_after_parsing() -> None:
    assert retry_after_seconds({"Retry-After": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert retry_after_seconds({"Retry-After": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(max_retries=10, backoff_s=1.0, max_backoff_s=8.0, max_retry_after_s=5.0)
    assert policy.attempts == 11
    assert 0.5 <= policy.delay(1) <= 1.0
    assert 2.0 <= policy.delay(3) <= 4.0
    assert 4.0 <= policy.delay(10) <= 8.0
    assert policy.delay(1, retry_after_s=3600) == 5.0
    assert policy.delay(1, retry_after_s=0.5) == 0.5


async def test_retry_helper_never_replays_after_a_yield() -> None:
    calls = 0

    async def attempt() -> AsyncGenerator[int, None]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("boom")
        yield 1
        raise ConnectionError("late boom")

    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    out: list[int] = []
    with pytest.raises(ModelUnavailableError, match="late boom"):
        async for item in stream_with_retries(
            attempt,
            policy=RetryPolicy(max_retries=5, backoff_s=0.01),
            classify=lambda exc: Retry(str(exc)) if isinstance(exc, ConnectionError) else None,
            give_up=lambda n, reason: ModelUnavailableError(reason, attempts=n),
            sleep=fake_sleep,
        ):
            out.append(item)
    assert out == [1] and calls == 2 and len(sleeps) == 1
