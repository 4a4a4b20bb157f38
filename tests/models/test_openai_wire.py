"""The OpenAI-compatible backend on the wire: SSE framing, errors, headers, proxies and the key.

Raw event-stream bodies (CRLF, keep-alive comments, frames split mid-line and mid-character, an
event cut before its blank line, error events) through ``OpenAICompatModel`` against the
loopback fake server.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from kairos.errors import ModelError, ModelUnavailableError
from kairos.models.base import complete
from kairos.models.openai_compat import OpenAICompatModel
from kairos.models.types import Message, ModelNotice, ModelRequest, ResponseDone, StreamEvent, TextDelta
from tests.models.fake_servers import FakeServer, Reply, chat_chunk, chat_stream, openai_error

KEY = "sk-secret-0123456789abcdef"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as s:
        yield s


def make_model(server: FakeServer, **kw: Any) -> OpenAICompatModel:
    kw.setdefault("backoff_s", 0.001)
    return OpenAICompatModel("fake-model", base_url=server.openai_base_url, api_key=KEY, **kw)


def request() -> ModelRequest:
    return ModelRequest(
        system_static="You are kairos.", system_deployment="", tools=(), messages=(Message.user("hi"),), max_tokens=64
    )


def frame(chunk: dict[str, Any], newline: str = "\n") -> bytes:
    return f"data: {json.dumps(chunk)}{newline}{newline}".encode()


def sse_body(*texts: str, newline: str = "\n") -> list[bytes]:
    """A complete reply of ``texts`` as raw event-stream frames."""
    chunks = [chat_chunk({"role": "assistant"}), *(chat_chunk({"content": t}) for t in texts)]
    chunks.append(chat_chunk({}, finish_reason="stop"))
    return [frame(c, newline) for c in chunks] + [f"data: [DONE]{newline}{newline}".encode()]


# ---- framing through the backend ------------------------------------------------------------


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
async def test_crlf_and_keep_alive_comments_stream_a_reply(server: FakeServer, newline: str) -> None:
    body = sse_body("Hel", "lo", newline=newline)
    body.insert(1, f": keep-alive{newline}{newline}".encode())
    body.insert(3, b": OPENROUTER PROCESSING\n\n")
    server.script(Reply(raw=body))
    async with make_model(server) as model:
        events = [e async for e in model.stream(request())]
    assert events[:2] == [TextDelta("Hel"), TextDelta("lo")]
    assert isinstance(events[2], ResponseDone) and events[2].response.message.content == "Hello"


async def test_frames_split_mid_line_and_mid_character_stream_a_reply(server: FakeServer) -> None:
    joined = b"".join(sse_body("naïve ", "café"))
    pieces = [joined[i : i + 7] for i in range(0, len(joined), 7)]
    server.script(Reply(raw=pieces))
    async with make_model(server) as model:
        response = await complete(model, request())
    assert response.message.content == "naïve café" and response.finish_reason == "stop"


async def test_finish_chunk_cut_before_its_blank_line_is_retried(server: FakeServer) -> None:
    # The finish_reason arrives, but the body ends before the event is complete: a cut stream.
    cut = [
        frame(chat_chunk({"role": "assistant"})),
        b"data: " + json.dumps(chat_chunk({}, finish_reason="stop")).encode(),
    ]
    server.script(Reply(raw=cut), Reply(raw=sse_body("ok")))
    async with make_model(server) as model:
        events = [e async for e in model.stream(request())]
    assert isinstance(events[0], ModelNotice) and "finish_reason" in events[0].text
    assert events[1] == TextDelta("ok") and len(server.requests) == 2


async def test_error_event_mid_stream_is_not_retried_after_output(server: FakeServer) -> None:
    error = {"error": {"message": "engine crashed", "code": 500}}
    server.script(Reply(raw=[*sse_body("partial")[:2], b"event: error\n", frame(error)]), Reply(raw=sse_body("x")))
    seen: list[StreamEvent] = []
    async with make_model(server) as model:
        with pytest.raises(ModelUnavailableError, match=r"after output had started \(stream error 500: engine crashed"):
            async for event in model.stream(request()):
                seen.append(event)
    assert seen == [TextDelta("partial")] and len(server.requests) == 1


async def test_permanent_error_event_is_a_model_error(server: FakeServer) -> None:
    error = {"error": {"message": "context length exceeded", "code": "context_length_exceeded"}}
    server.script(Reply(raw=[frame(error)]))
    async with make_model(server) as model:
        with pytest.raises(ModelError, match="failed mid-stream: context length exceeded") as info:
            await complete(model, request())
    assert not isinstance(info.value, ModelUnavailableError) and len(server.requests) == 1


async def test_data_that_is_not_json_is_a_clear_error(server: FakeServer) -> None:
    server.script(Reply(raw=[frame(chat_chunk({"role": "assistant"})), b"data: <html>oops\n\n"]))
    async with make_model(server) as model:
        with pytest.raises(ModelError, match="not JSON") as info:
            await complete(model, request())
    assert not isinstance(info.value, ModelUnavailableError) and len(server.requests) == 1


# ---- status errors, headers, proxies, the key ------------------------------------------------


async def test_status_error_with_a_text_body_keeps_the_text(server: FakeServer) -> None:
    server.script(Reply(status=400, raw=[b"<html>bad request</html>"]))
    async with make_model(server) as model:
        with pytest.raises(ModelError, match=r"rejected the request: HTTP 400: <html>bad request</html>"):
            await complete(model, request())


async def test_retry_after_ms_is_honoured(server: FakeServer) -> None:
    server.script(openai_error(503, "busy", {"retry-after-ms": "1500"}), chat_stream({"content": "ok"}))
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with make_model(server, sleep=fake_sleep) as model:
        assert (await complete(model, request())).message.content == "ok"
    assert sleeps == [1.5]


async def test_headers_sent(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1")
    monkeypatch.delenv("OPENAI_PROJECT_ID", raising=False)
    server.script(chat_stream({"content": "ok"}))
    async with make_model(server) as model:
        await complete(model, request())
    headers = server.requests[0].headers
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["content-type"] == "application/json" and headers["openai-organization"] == "org-1"
    assert "openai-project" not in headers


async def test_proxy_from_the_environment_is_used(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.root)
    server.script(chat_stream({"content": "via proxy"}))
    model = OpenAICompatModel("m", base_url="http://models.example.invalid/v1", api_key=KEY, max_retries=0)
    async with model:
        assert (await complete(model, request())).message.content == "via proxy"
    assert server.requests[0].path == "http://models.example.invalid/v1/chat/completions"  # a proxy's request line


async def test_the_key_is_in_no_error_repr_or_log(server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    server.script(openai_error(401, "invalid api key"), openai_error(503, "down"), openai_error(503, "down"))
    caplog.set_level(logging.DEBUG)
    errors: list[BaseException] = []
    async with make_model(server, max_retries=1) as model:
        for _ in range(2):
            with pytest.raises(ModelError) as info:
                await complete(model, request())
            errors.append(info.value)
        texts = [repr(model), repr(model._client), caplog.text]
    assert "check the API key" in str(errors[0]) and "invalid api key" in str(errors[0])
    for error in errors:
        chain: BaseException | None = error
        while chain is not None:
            texts += [str(chain), repr(chain), repr(getattr(chain, "body", None))]
            chain = chain.__cause__ or chain.__context__
    assert all(KEY not in text for text in texts)


async def test_a_stream_held_open_after_done_still_completes(server: FakeServer) -> None:
    events = chat_stream({"content": "ok"}).events
    assert events is not None and events[-1] == (None, "[DONE]")
    server.script(Reply(events=events, hold_open=True))  # the server never ends the body
    async with make_model(server) as model:
        assert (await complete(model, request())).message.content == "ok"
        assert await asyncio.to_thread(server.client_hung_up.wait, 10)  # the connection was given up
