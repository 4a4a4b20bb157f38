"""OpenAICompatModel against a loopback chat-completions server (real SDK, real sockets)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from kairos.errors import ModelError, ModelUnavailableError
from kairos.models.base import Model, complete
from kairos.models.openai_compat import NO_KEY_PLACEHOLDER, OpenAICompatModel
from kairos.models.types import (
    HARNESS,
    SYSTEM_CACHE_BOUNDARY,
    Message,
    ModelNotice,
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
WEATHER = ToolSpec("get_weather", "Weather of a city.", {"type": "object", "properties": {"city": {"type": "string"}}})


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


# ---- a cut stream is an error, never a reply ------------------------------------------------


async def drain(model: OpenAICompatModel, request: ModelRequest, seen: list[StreamEvent]) -> None:
    async for event in model.stream(request):
        seen.append(event)


async def test_stream_cut_after_text_raises_and_never_finishes(server: FakeServer) -> None:
    server.script(chat_stream({"content": "The answer is 4"}, complete=False), chat_stream({"content": "never"}))
    seen: list[StreamEvent] = []
    async with make_model(server) as model:
        with pytest.raises(ModelUnavailableError, match="after output had started.*finish_reason"):
            await drain(model, make_request(), seen)
    assert seen == [TextDelta("The answer is 4")]
    assert len(server.requests) == 1


async def test_stream_cut_right_after_a_complete_tool_call_is_not_acted_on(server: FakeServer) -> None:
    # The tool call looks whole, but without finish_reason nothing says the reply was: no ResponseDone.
    fragment = tool_fragment(0, id="call_rm", name="read_file", arguments='{"path": "a.py"}')
    server.script(chat_stream(fragment, complete=False))
    seen: list[StreamEvent] = []
    async with make_model(server) as model:
        with pytest.raises(ModelUnavailableError, match="stream broke after output had started"):
            await drain(model, make_request(tools=(READ,)), seen)
    assert seen == [ToolCallDelta(0, "call_rm", "read_file", '{"path": "a.py"}')]
    assert not any(isinstance(e, ResponseDone) for e in seen)


async def test_stream_cut_before_any_output_is_retried(server: FakeServer) -> None:
    server.script(chat_stream(complete=False), chat_stream({"content": "ok"}))
    async with make_model(server) as model:
        events, response = await collect(model, make_request())
    assert response.message.content == "ok"
    assert [type(e) for e in events] == [ModelNotice, TextDelta]
    assert "finish_reason" in events[0].text  # type: ignore[union-attr]
    assert len(server.requests) == 2


async def test_held_back_text_call_cut_off_is_retried_not_executed(server: FakeServer) -> None:
    # The fenced call's JSON is whole but its fence is not closed: held back (not shown as text)
    # when the stream breaks. Nothing has reached the consumer, so the reply is asked for again.
    fenced = [{"content": "```json\n"}, {"content": '{"name": "get_weather", "arguments": {"city": "Paris"}}\n'}]
    server.script(chat_stream(*fenced, complete=False), chat_stream({"content": "Sunny."}))
    async with make_model(server) as model:
        events, response = await collect(model, make_request(tools=(WEATHER,)))
    assert [type(e) for e in events] == [ModelNotice, TextDelta]
    assert response.message == Message.assistant("Sunny.")


async def test_broken_chunked_body_is_retried_then_reported(server: FakeServer) -> None:
    server.script(chat_stream(chunked_cut=True), chat_stream({"content": "ok"}))
    async with make_model(server) as model:
        assert (await complete(model, make_request())).message.content == "ok"
    server.script(chat_stream({"content": "partial"}, chunked_cut=True))
    seen: list[StreamEvent] = []
    async with make_model(server) as model:
        with pytest.raises(ModelUnavailableError, match="after output had started"):
            await drain(model, make_request(), seen)
    assert seen == [TextDelta("partial")]


async def test_streams_cut_every_time_give_up(server: FakeServer) -> None:
    server.script(*[chat_stream(complete=False) for _ in range(3)])
    async with make_model(server, max_retries=2) as model:
        with pytest.raises(ModelUnavailableError) as info:
            await complete(model, make_request())
    assert info.value.attempts == 3 and "finish_reason" in str(info.value)


# ---- retry waits are announced ---------------------------------------------------------------


async def test_rate_limit_wait_is_announced_before_the_reply(server: FakeServer) -> None:
    server.script(openai_error(429, "slow down", {"Retry-After": "60"}), chat_stream({"content": "ok"}))
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with make_model(server, sleep=fake_sleep) as model:
        events, response = await collect(model, make_request())
    assert sleeps == [60.0]
    notice, text = events
    assert isinstance(notice, ModelNotice) and notice.wait_s == 60.0
    assert notice.text == (
        f"HTTP 429: slow down from fake-model at {server.openai_base_url}: retrying in 60 s (attempt 2 of 5)"
    )
    assert text == TextDelta("ok") and response.message.content == "ok"


async def test_max_retry_wait_caps_what_the_server_asks(server: FakeServer) -> None:
    server.script(openai_error(503, "busy", {"Retry-After": "3600"}), chat_stream({"content": "ok"}))
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with make_model(server, sleep=fake_sleep, max_retry_wait_s=5, max_retries=1) as model:
        events, _ = await collect(model, make_request())
    assert sleeps == [5.0]
    assert isinstance(events[0], ModelNotice) and events[0].wait_s == 5.0
    assert "retrying in 5 s (attempt 2 of 2)" in events[0].text
    assert model.retry_policy.max_backoff_s == 5.0  # the exponential backoff obeys it too


# ---- tool calls written as text --------------------------------------------------------------

FENCED = [
    {"content": "I'll check the weather.\n\n``"},
    {"content": '`json\n{"name": "get_weather", '},
    {"content": '"arguments": {"city": "Paris"}}\n```'},
]


async def test_fenced_json_call_becomes_a_tool_call(server: FakeServer) -> None:
    server.script(chat_stream(*FENCED))
    async with make_model(server) as model:
        deltas, response = await collect(model, make_request(tools=(WEATHER, READ)))
    assert deltas[0] == TextDelta("I'll check the weather.")
    call_delta = deltas[1]
    assert isinstance(call_delta, ToolCallDelta) and len(deltas) == 2
    assert (call_delta.index, call_delta.name, call_delta.arguments) == (0, "get_weather", '{"city": "Paris"}')
    assert call_delta.id is not None and call_delta.id.startswith("call_")
    assert response.message == Message.assistant(
        "I'll check the weather.", (ToolCall(call_delta.id, "get_weather", '{"city": "Paris"}'),)
    )
    assert response.finish_reason == "tool_calls"


async def test_tool_call_tags_become_tool_calls_with_unique_ids(server: FakeServer) -> None:
    tags = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    tags += '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    server.script(chat_stream(*({"content": c} for c in tags.split(" "))))
    async with make_model(server) as model:
        deltas, response = await collect(model, make_request(tools=(WEATHER, READ)))
    assert all(isinstance(d, ToolCallDelta) for d in deltas)
    calls = response.message.tool_calls
    expected = [("get_weather", '{"city": "Paris"}'), ("read_file", '{"path": "a.py"}')]
    assert [(c.name, c.arguments) for c in calls] == expected
    assert len({c.id for c in calls}) == 2 and response.message.content == ""


@pytest.mark.parametrize(
    ("setting", "tools"),
    [("off", (WEATHER,)), ("auto", ()), ("auto", (READ,))],  # off; no tools offered; unknown tool name
)
async def test_text_stays_text(server: FakeServer, setting: str, tools: tuple[ToolSpec, ...]) -> None:
    server.script(chat_stream(*FENCED))
    async with make_model(server, text_tool_calls=setting) as model:
        _, response = await collect(model, make_request(tools=tools))
    assert response.message.content == "".join(d["content"] for d in FENCED)
    assert response.message.tool_calls == () and response.finish_reason == "stop"


async def test_server_tool_call_releases_held_text_first(server: FakeServer) -> None:
    server.script(
        chat_stream(
            {"content": "Reading ``"},
            tool_fragment(0, id="call_n", name="read_file", arguments='{"path": "a.py"}'),
            finish_reason="tool_calls",
        )
    )
    async with make_model(server) as model:
        deltas, response = await collect(model, make_request(tools=(READ,)))
    assert deltas == [
        TextDelta("Reading"),
        TextDelta(" ``"),
        ToolCallDelta(0, "call_n", "read_file", '{"path": "a.py"}'),
    ]
    assert response.message.content == "Reading ``"
    assert response.message.tool_calls == (ToolCall("call_n", "read_file", '{"path": "a.py"}'),)
