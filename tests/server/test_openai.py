"""The OpenAI-compatible endpoint, driven by the official ``openai`` client over loopback."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.models.types import ModelRequest, ModelResponse
from kairos.runtime import Runtime
from kairos.server import create_app
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.function import tool
from tests.server.conftest import TOKEN, live
from tests.support.models import Gated


@tool
def lookup(key: str) -> str:
    """Look a value up."""
    return f"{key}=42"


def _texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if not m.content.startswith("<agent_status>")]


async def test_non_streaming_completion_with_history_and_usage(tmp_path: Path) -> None:
    model = ScriptedModel([reply("", call("lookup", {"key": "x"})), reply("x is 42")])
    async with (
        Runtime(Agent(model, tools=[lookup]), SessionStore(tmp_path)) as rt,
        live(create_app(rt, token=TOKEN, model_name="kairos-agent")) as (_, url),
    ):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=TOKEN, max_retries=0)
        raw = await client.chat.completions.with_raw_response.create(
            model="kairos-agent",
            messages=[
                {"role": "system", "content": "ignored: kairos has its own prompt"},
                {"role": "user", "content": "remember x"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [{"type": "text", "text": "what is x?"}]},
            ],
        )
        done = raw.parse()
        sid = raw.headers["x-kairos-session"]
        models = await client.models.list()
        await client.close()
    assert done.object == "chat.completion" and done.choices[0].message.content == "x is 42"
    assert done.choices[0].finish_reason == "stop" and done.model == "kairos-agent"
    assert done.usage is not None and done.usage.prompt_tokens > 0
    assert _texts(model.requests[0])[-3:] == ["remember x", "ok", "what is x?"]  # the history was seeded
    assert rt.store.trajectories.has_session(sid)
    assert [m.id for m in models.data] == ["kairos-agent"]


async def test_streaming_completion_ends_with_done(tmp_path: Path) -> None:
    model = ScriptedModel([reply("streamed answer text")], chunk=4)
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt, live(create_app(rt)) as (_, url):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        stream = await client.chat.completions.create(
            model="kairos",
            messages=[{"role": "user", "content": "say something"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
        await client.close()
        async with httpx.AsyncClient(base_url=url) as http:  # the raw wire: the stream ends with [DONE]
            model.extend([reply("again")])
            body = {"model": "kairos", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
                lines = [line async for line in resp.aiter_lines() if line.startswith("data: ")]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed answer text"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # really streamed
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 0
    assert lines[-1] == "data: [DONE]" and json.loads(lines[0][6:])["object"] == "chat.completion.chunk"


async def test_a_user_keeps_one_session_and_the_header_picks_one(tmp_path: Path) -> None:
    def echo_last(request: ModelRequest) -> ModelResponse:
        return reply(f"{len(_texts(request))} messages")

    model = ScriptedModel([echo_last] * 4)
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt, live(create_app(rt)) as (_, url):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        answers = []
        for text in ("one", "two"):
            r = await client.chat.completions.create(
                model="kairos", user="alice", messages=[{"role": "user", "content": text}]
            )
            answers.append(r.choices[0].message.content)
        sid = rt.create_session("chosen")
        r = await client.chat.completions.create(
            model="kairos", messages=[{"role": "user", "content": "three"}], extra_headers={"X-Kairos-Session": sid}
        )
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(
                model="kairos",
                messages=[{"role": "user", "content": "x"}],
                extra_headers={"X-Kairos-Session": "nope"},
            )
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="kairos", messages=[{"role": "assistant", "content": "x"}])
        with pytest.raises(openai.UnprocessableEntityError):
            await client.chat.completions.create(model="kairos", messages=[])
        await client.close()
    assert answers == ["1 messages", "3 messages"]  # alice's second turn saw her first one
    assert r.choices[0].message.content == "1 messages"
    assert [m.content for m in rt.store.trajectories.load_messages(sid)] == ["three", "1 messages"]


async def test_bearer_token_guards_the_openai_endpoint(tmp_path: Path) -> None:
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt:
        async with live(create_app(rt, token=TOKEN)) as (_, url):
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                await client.chat.completions.create(model="kairos", messages=[{"role": "user", "content": "x"}])
            await client.close()
        assert rt.store.list() == []


async def test_a_slow_model_gets_the_role_chunk_at_once_then_comments_until_its_text(tmp_path: Path) -> None:
    """Issue 24 §2: a streamed completion sent no byte for 140 s while the model read its prompt."""
    model = Gated([reply("finally, the answer")])
    async with (
        Runtime(Agent(model), SessionStore(tmp_path)) as rt,
        live(create_app(rt, heartbeat_s=0.2)) as (_, url),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        body = {"model": "kairos", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        seen: list[str] = []
        async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                seen.append(line)
                if line == ": keep-alive" and not model.gate.is_set():
                    assert model.started.is_set()  # the model is still silent: only now may it answer
                    model.gate.set()
        role = json.loads(seen[0].removeprefix("data: "))
        assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        waiting = seen.index(": waiting for the first token")
        assert waiting < seen.index(": keep-alive") < next(i for i, s in enumerate(seen) if "finally" in s)
        assert seen[-2] == "data: [DONE]" or seen[-1] == "data: [DONE]"
        # an OpenAI client reads such a stream as usual (comments are not chunks)
        model.gate.clear()
        model.extend([reply("again")])
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        stream = await client.chat.completions.create(
            model="kairos", messages=[{"role": "user", "content": "once more"}], stream=True
        )
        model.gate.set()
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await client.close()
    assert text == "again"


async def test_activity_comments_cannot_forge_sse_fields(tmp_path: Path) -> None:
    """A tool name is the model's text: a newline in it must not start an SSE ``data:`` field."""
    from kairos.server.openai_compat import _comment

    assert _comment("generating a call to x\ndata: [DONE]\r\n") == ": generating a call to x data: [DONE]\n\n"


async def test_the_joined_stream_is_the_non_streamed_content_with_a_tool_call_in_the_turn(tmp_path: Path) -> None:
    def turn() -> list[ModelResponse]:
        return [reply("Let me look that up. ", call("lookup", {"key": "x"})), reply("x is 42.")]

    model = ScriptedModel([*turn(), *turn()], chunk=5)
    async with Runtime(Agent(model, tools=[lookup]), SessionStore(tmp_path)) as rt, live(create_app(rt)) as (_, url):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        question = [{"role": "user", "content": "what is x?"}]
        whole = await client.chat.completions.create(model="kairos", messages=question)  # type: ignore[arg-type]
        stream = await client.chat.completions.create(model="kairos", messages=question, stream=True)  # type: ignore[arg-type]
        joined = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await client.close()
    assert joined == whole.choices[0].message.content == "Let me look that up. x is 42."


async def test_a_tool_choice_that_cannot_be_honoured_is_400(tmp_path: Path) -> None:
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt, live(create_app(rt)) as (_, url):
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
        async with httpx.AsyncClient(base_url=url) as http:
            for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
                body = {"model": "kairos", "messages": [{"role": "user", "content": "hi"}], "tools": tools,
                        "tool_choice": choice}  # fmt: skip
                resp = await http.post("/v1/chat/completions", json=body)
                assert resp.status_code == 400 and "tool_choice" in resp.json()["error"]["message"]
        assert rt.store.list(10) == []  # refused before any session was made


async def test_errors_name_neither_the_model_endpoint_nor_the_cli(tmp_path: Path) -> None:
    model = ScriptedModel([ConnectionError("cannot reach http://10.1.2.3:8000/v1/chat/completions")])
    hi = {"model": "kairos", "messages": [{"role": "user", "content": "hi"}]}
    async with (
        Runtime(Agent(model), SessionStore(tmp_path)) as rt,
        live(create_app(rt)) as (_, url),
        httpx.AsyncClient(base_url=url) as http,
    ):
        failed = await http.post("/v1/chat/completions", json=hi)
        missing = await http.post("/v1/chat/completions", headers={"X-Kairos-Session": "nope" * 45}, json=hi)
        unknown = await http.get("/v1/sessions/nope")
    assert failed.status_code == 502 and "10.1.2.3" not in failed.text, failed.text
    assert missing.status_code == 404 and len(missing.json()["error"]["message"]) < 200  # the id shortened
    message = unknown.json()["error"]["message"]
    assert message == "no session 'nope'; POST /v1/sessions creates one"  # not wrapped twice, no CLI advice
