"""AnthropicModel against a loopback Messages API server (real SDK, real sockets)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from kairos.errors import ConfigError, ModelError, ModelUnavailableError
from kairos.models.anthropic import AnthropicModel
from kairos.models.base import Model, complete
from kairos.models.types import (
    HARNESS,
    AllBut,
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
from tests.models.fake_servers import FakeServer, anthropic_error, anthropic_stream

READ = ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
GREP = ToolSpec("grep", "Search files.", {"type": "object", "properties": {"pattern": {"type": "string"}}})
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as s:
        yield s


def make_model(server: FakeServer, **kw: Any) -> AnthropicModel:
    kw.setdefault("backoff_s", 0.001)
    return AnthropicModel("claude-fake", base_url=server.root, api_key="sk-ant-test", **kw)


def make_request(
    *messages: Message, tools: tuple[ToolSpec, ...] = (), stable: int | None = None, deployment: str = "cwd: /repo"
) -> ModelRequest:
    return ModelRequest(
        system_static="You are kairos.",
        system_deployment=deployment,
        tools=tools,
        messages=messages or (Message.user("hi"),),
        max_tokens=512,
        stable_prefix_len=stable,
    )


async def collect(model: AnthropicModel, request: ModelRequest) -> tuple[list[StreamEvent], ModelResponse]:
    events = [e async for e in model.stream(request)]
    done = [e for e in events if isinstance(e, ResponseDone)]
    assert len(done) == 1 and events[-1] is done[0]
    return events[:-1], done[0].response


def cache_markers(body: dict[str, Any]) -> list[Any]:
    """Every block carrying cache_control, anywhere in the request."""
    found: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "cache_control" in node:
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(body)
    return found


async def test_text_stream_and_cache_usage(server: FakeServer) -> None:
    server.script(anthropic_stream(("text", ["Hel", "lo"]), input_tokens=10, cache_read=100, cache_creation=20))
    async with make_model(server) as model:
        assert isinstance(model, Model)
        deltas, response = await collect(model, make_request())
    assert deltas == [TextDelta("Hel"), TextDelta("lo")]
    assert response.message == Message.assistant("Hello")
    assert response.finish_reason == "stop"
    usage = response.usage
    assert (usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens) == (130, 100, 5)
    assert usage.ttft_s is not None and usage.total_s >= usage.ttft_s >= 0
    assert server.requests[0].path == "/v1/messages"


async def test_parallel_tool_calls_are_assembled(server: FakeServer) -> None:
    server.script(
        anthropic_stream(
            ("text", ["Reading both."]),
            ("tool_use", "toolu_a", "read_file", ['{"path"', ': "a.py"}']),
            ("tool_use", "toolu_b", "grep", ['{"pattern": ', '"TODO"}']),
            ("tool_use", "toolu_c", "list", []),
            stop_reason="tool_use",
        )
    )
    async with make_model(server) as model:
        deltas, response = await collect(model, make_request(tools=(READ, GREP)))
    assert ToolCallDelta(0, "toolu_a", "read_file", "") in deltas
    assert ToolCallDelta(1, None, None, '"TODO"}') in deltas
    assert response.message.content == "Reading both."
    assert response.message.tool_calls == (
        ToolCall("toolu_a", "read_file", '{"path": "a.py"}'),
        ToolCall("toolu_b", "grep", '{"pattern": "TODO"}'),
        ToolCall("toolu_c", "list", "{}"),
    )
    assert response.finish_reason == "tool_calls"


async def test_thinking_streams_as_reasoning_and_is_resent_with_its_signature(server: FakeServer) -> None:
    server.script(
        anthropic_stream(("thinking", ["Let me ", "look."], "sig-123"), ("text", ["Done."])),
        anthropic_stream(("text", ["ok"])),
    )
    async with make_model(server) as model:
        deltas, response = await collect(model, make_request(Message.user("task")))
        assert deltas == [ReasoningDelta("Let me "), ReasoningDelta("look."), TextDelta("Done.")]
        assert response.message.reasoning == "Let me look."
        stranger = Message.assistant("old", reasoning="no signature known for this")
        history = (Message.user("task"), response.message, Message.user("more"), stranger, Message.user("again"))
        await complete(model, make_request(*history))
    sent = server.bodies()[1]["messages"]
    assert sent[1]["content"][0] == {"type": "thinking", "thinking": "Let me look.", "signature": "sig-123"}
    assert sent[1]["content"][1]["text"] == "Done."
    assert sent[3]["content"] == [{"type": "text", "text": "old"}]


async def test_system_tools_and_cache_breakpoints(server: FakeServer) -> None:
    server.script(anthropic_stream(("text", ["ok"])))
    calls = (ToolCall("toolu_1", "read_file", '{"path": "a.py"}'), ToolCall("toolu_2", "grep", "{not json"))
    messages = (
        Message.user("fix the bug"),
        Message.assistant("Looking.", calls),
        Message.tool("toolu_1", "contents of a.py", name="read_file"),
        Message.tool("toolu_2", "error: arguments are not valid JSON", name="grep"),
        Message("user", "[status] step 2 of 50", origin=HARNESS),
    )
    async with make_model(server) as model:
        await complete(model, make_request(*messages, tools=(READ, GREP), stable=4))
    body = server.bodies()[0]
    assert body["system"] == [
        {"type": "text", "text": "You are kairos.", "cache_control": EPHEMERAL},
        {"type": "text", "text": "cwd: /repo"},
    ]
    assert body["tools"] == [
        {"name": "read_file", "description": "Read a file.", "input_schema": READ.parameters},
        {"name": "grep", "description": "Search files.", "input_schema": GREP.parameters},
    ]
    assert "temperature" not in body and body["max_tokens"] == 512 and body["stream"] is True
    sent = body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}},
        {"type": "tool_use", "id": "toolu_2", "name": "grep", "input": {}},  # invalid JSON -> {}
    ]
    assert sent[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "contents of a.py"},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_2",
            "content": "error: arguments are not valid JSON",
            "cache_control": EPHEMERAL,
        },
        {"type": "text", "text": "[status] step 2 of 50"},  # volatile: after the breakpoint
    ]
    assert len(cache_markers(body)) == 2 <= 4
    assert "boundary" not in json.dumps(body)


@pytest.mark.parametrize(("stable", "marked"), [(None, (2, -1)), (1, (0, -1)), (0, None)])
async def test_breakpoint_follows_stable_prefix_len(
    server: FakeServer, stable: int | None, marked: tuple[int, int] | None
) -> None:
    server.script(anthropic_stream(("text", ["ok"])))
    messages = (Message.user("a"), Message.assistant("b"), Message.user("c"))
    async with make_model(server) as model:
        await complete(model, make_request(*messages, stable=stable))
    sent = server.bodies()[0]["messages"]
    flagged = [(i, j) for i, m in enumerate(sent) for j, b in enumerate(m["content"]) if "cache_control" in b]
    assert flagged == ([] if marked is None else [(marked[0], len(sent[marked[0]]["content"]) - 1)])


async def test_consecutive_roles_are_merged_and_alternate(server: FakeServer) -> None:
    server.script(anthropic_stream(("text", ["ok"])))
    messages = (
        Message.system("summary of earlier work"),
        Message.user("task"),
        Message.assistant("", (ToolCall("t1", "read_file", "{}"),)),
        Message.tool("t1", ""),
        Message.assistant("thinking aloud"),
        Message.assistant("still here"),
        Message("user", "[status]", origin=HARNESS),
    )
    async with make_model(server) as model:
        await complete(model, make_request(*messages, deployment=""))
    body = server.bodies()[0]
    assert body["system"] == [{"type": "text", "text": "You are kairos.", "cache_control": EPHEMERAL}]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert body["messages"][0]["content"][:2] == [
        {"type": "text", "text": "summary of earlier work"},
        {"type": "text", "text": "task"},
    ]
    assert body["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "t1"}]
    assert [b["text"] for b in body["messages"][3]["content"]] == ["thinking aloud", "still here"]


async def test_reasoning_policy_strip_drops_thinking(server: FakeServer) -> None:
    server.script(anthropic_stream(("thinking", ["hmm"], "sig"), ("text", ["a"])), anthropic_stream(("text", ["b"])))
    async with make_model(server, reasoning_policy=ReasoningPolicy.STRIP) as model:
        first = await complete(model, make_request(Message.user("q")))
        await complete(model, make_request(Message.user("q"), first.message, Message.user("q2")))
    assert server.bodies()[1]["messages"][1]["content"] == [{"type": "text", "text": "a"}]


async def test_rate_limit_is_retried(server: FakeServer) -> None:
    server.script(anthropic_error(429, "rate_limit_error", "slow down", {"retry-after": "0"}))
    server.script(anthropic_stream(("text", ["ok"])))
    async with make_model(server) as model:
        response = await complete(model, make_request())
    assert response.message.content == "ok"
    bodies = server.bodies()
    assert len(bodies) == 2 and bodies[0] == bodies[1]


async def test_overloaded_error_event_before_output_is_retried(server: FakeServer) -> None:
    overloaded = anthropic_stream(("text", []), hold_open=True)
    assert overloaded.events is not None
    overloaded.events = overloaded.events[:1]  # message_start only, then the error event
    overloaded.events.append(("error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}))
    overloaded.hold_open = False
    server.script(overloaded, anthropic_stream(("text", ["ok"])))
    async with make_model(server) as model:
        response = await complete(model, make_request())
    assert response.message.content == "ok"
    assert len(server.requests) == 2


async def test_overloaded_until_the_last_retry_raises_unavailable(server: FakeServer) -> None:
    server.script(*[anthropic_error(529, "overloaded_error", "Overloaded") for _ in range(3)])
    async with make_model(server, max_retries=2) as model:
        with pytest.raises(ModelUnavailableError) as info:
            await complete(model, make_request())
    assert info.value.attempts == 3 and info.value.model == "claude-fake"
    assert "3 attempt" in str(info.value) and "Overloaded" in str(info.value)
    assert len(server.requests) == 3


async def test_bad_request_is_not_retried(server: FakeServer) -> None:
    server.script(anthropic_error(400, "invalid_request_error", "messages: roles must alternate"))
    async with make_model(server) as model:
        with pytest.raises(ModelError) as info:
            await complete(model, make_request())
    assert not isinstance(info.value, ModelUnavailableError)
    assert "roles must alternate" in str(info.value)
    assert len(server.requests) == 1


async def test_cancellation_closes_the_http_stream(server: FakeServer) -> None:
    server.script(anthropic_stream(("text", ["first"]), hold_open=True))
    first = asyncio.Event()

    async def consume(model: AnthropicModel) -> None:
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


async def test_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-x")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # a keyless proxy is fine
    async with AnthropicModel("claude-x") as model:
        assert model.base_url == "http://127.0.0.1:9"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    async with AnthropicModel("claude-x", thinking={"type": "adaptive"}) as model:
        assert model._client.api_key == "sk-ant-env"


async def test_thinking_config_is_sent(server: FakeServer) -> None:
    server.script(anthropic_stream(("text", ["ok"])))
    async with make_model(server, thinking={"type": "adaptive"}, extra_body={"metadata": {"user_id": "u"}}) as model:
        await complete(model, make_request())
    body = server.bodies()[0]
    assert body["thinking"] == {"type": "adaptive"} and body["metadata"] == {"user_id": "u"}


# ---- a cut stream is an error, never a reply ------------------------------------------------


async def drain(model: AnthropicModel, request: ModelRequest, seen: list[StreamEvent]) -> None:
    async for event in model.stream(request):
        seen.append(event)


async def test_stream_cut_after_text_raises_and_never_finishes(server: FakeServer) -> None:
    server.script(anthropic_stream(("text", ["The answer", " is 4"]), complete=False))
    seen: list[StreamEvent] = []
    async with make_model(server) as model:
        with pytest.raises(ModelUnavailableError, match="after output had started.*message_stop"):
            await drain(model, make_request(), seen)
    assert seen == [TextDelta("The answer"), TextDelta(" is 4")]
    assert len(server.requests) == 1


async def test_stream_cut_right_after_a_complete_tool_input_is_not_acted_on(server: FakeServer) -> None:
    server.script(anthropic_stream(("tool_use", "toolu_rm", "read_file", ['{"path": "a.py"}']), complete=False))
    seen: list[StreamEvent] = []
    async with make_model(server) as model:
        with pytest.raises(ModelUnavailableError, match="stream broke after output had started"):
            await drain(model, make_request(tools=(READ,)), seen)
    assert seen == [
        ToolCallDelta(0, "toolu_rm", "read_file", ""),
        ToolCallDelta(0, None, None, '{"path": "a.py"}'),
    ]


async def test_stream_cut_before_any_output_is_retried(server: FakeServer) -> None:
    server.script(anthropic_stream(complete=False), anthropic_stream(("text", ["ok"])))
    async with make_model(server) as model:
        events, response = await collect(model, make_request())
    assert response.message.content == "ok"
    assert [type(e) for e in events] == [ModelNotice, TextDelta]
    assert len(server.requests) == 2


async def test_broken_chunked_body_is_retried(server: FakeServer) -> None:
    # Anthropic's SDK let the HTTP library's error through unwrapped before 2.17 and wraps it in
    # APIConnectionError since: either way a dropped connection, retried with a notice that says so.
    server.script(anthropic_stream(chunked_cut=True), anthropic_stream(("text", ["ok"])))
    async with make_model(server) as model:
        events, response = await collect(model, make_request())
    assert response.message.content == "ok"
    assert isinstance(events[0], ModelNotice)
    assert "incomplete chunked read" in events[0].text and "retrying" in events[0].text, events[0].text


# ---- retry waits are announced ---------------------------------------------------------------


async def test_rate_limit_wait_is_announced_before_the_reply(server: FakeServer) -> None:
    server.script(anthropic_error(429, "rate_limit_error", "slow down", {"retry-after": "60"}))
    server.script(anthropic_stream(("text", ["ok"])))
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with make_model(server, sleep=fake_sleep, max_retries=2) as model:
        events, response = await collect(model, make_request())
    assert sleeps == [60.0]
    notice = events[0]
    assert isinstance(notice, ModelNotice) and notice.wait_s == 60.0
    assert notice.text.startswith("HTTP 429 rate_limit_error: slow down from claude-fake at http://127.0.0.1:")
    assert notice.text.endswith(": retrying in 60 s (attempt 2 of 3)")
    assert events[1:] == [TextDelta("ok")] and response.message.content == "ok"


# ---- tool calls written as text (a local server speaking the Messages API) -------------------


async def test_tool_call_tags_in_text_become_tool_calls(server: FakeServer) -> None:
    tag = '<tool_call>\n{"name": "grep", "arguments": {"pattern": "TODO"}}\n</tool_call>'
    server.script(anthropic_stream(("text", ["Searching.\n", tag[:20], tag[20:]])))
    async with make_model(server) as model:
        deltas, response = await collect(model, make_request(tools=(GREP,)))
    assert deltas[0] == TextDelta("Searching.")
    assert isinstance(deltas[1], ToolCallDelta) and deltas[1].name == "grep"
    (call,) = response.message.tool_calls
    assert (call.name, call.arguments, call.id) == ("grep", '{"pattern": "TODO"}', deltas[1].id)
    assert response.message.content == "Searching." and response.finish_reason == "tool_calls"
    server.script(anthropic_stream(("text", ["Searching.\n", tag])))
    async with make_model(server, text_tool_calls="off") as model:
        _, response = await collect(model, make_request(tools=(GREP,)))
    assert response.message.content == "Searching.\n" + tag and not response.message.tool_calls


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", None),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        (("grep",), {"type": "tool", "name": "grep"}),
        (("grep", "read_file"), {"type": "any"}),
        (("not_offered",), {"type": "any"}),  # unknown names fall back to every tool
        (AllBut(("grep",)), None),  # no exclusion in the API: left to the model
    ],
)
async def test_tool_choice_is_sent_in_anthropic_shape(server: FakeServer, choice: Any, wire: Any) -> None:
    server.script(anthropic_stream(("text", ["ok"])))
    async with make_model(server) as model:
        request = dataclasses.replace(make_request(tools=(READ, GREP)), tool_choice=choice)
        await complete(model, request)
    assert server.bodies()[0].get("tool_choice") == wire
