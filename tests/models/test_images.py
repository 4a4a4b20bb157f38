"""Images in tool results on every backend: where each wire puts them, the note a text model gets instead,
and the records (an image stored once is sent byte-identically after; a record from before images loads)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kairos.models import ModelSettings, RemoteConfig, load_model
from kairos.models._chatml import render_prompt
from kairos.models.anthropic import AnthropicModel
from kairos.models.base import complete
from kairos.models.openai_compat import OpenAICompatModel
from kairos.models.types import IMAGE_NOTE, IMAGE_TOKENS, Image, Message, ModelRequest, ToolCall
from tests.models.fake_servers import FakeServer, anthropic_stream, chat_stream

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
SHOT = Image.from_bytes(PNG)
CLICK = ToolCall("call_1", "computer", '{"action": "left_click", "coordinate": [10, 20]}')
LOOK = ToolCall("call_2", "computer", '{"action": "screenshot"}')


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as s:
        yield s


def request(*messages: Message) -> ModelRequest:
    return ModelRequest("You are kairos.", "cwd: /repo", (), messages, max_tokens=64)


def trajectory() -> tuple[Message, ...]:
    """A click and a look in one reply, each answered with a screenshot, then the user's next words."""
    return (
        Message.user("tick the box"),
        Message.assistant("", (CLICK, LOOK)),
        Message.tool("call_1", "Clicked at (10, 20).", "computer", (SHOT,)),
        Message.tool("call_2", "Screenshot taken.", "computer", (SHOT,)),
        Message.user("thanks"),
    )


# ---- the type and its record ------------------------------------------------------------------


def test_an_image_round_trips_and_its_record_is_byte_stable() -> None:
    assert SHOT.raw() == PNG and SHOT.data_url().startswith("data:image/png;base64,iVBORw0KGgo")
    assert "base64 chars" in repr(SHOT) and SHOT.data not in repr(SHOT)
    m = Message.tool("call_1", "Clicked.", "computer", (SHOT,))
    again = Message.from_record(json.loads(m.serialized()))
    assert again == m and again.serialized() == m.serialized()
    assert m.estimated_tokens() == Message.tool("call_1", "Clicked.", "computer").estimated_tokens() + IMAGE_TOKENS


def test_a_record_from_before_images_loads_and_a_message_without_them_keeps_its_bytes() -> None:
    old = {"role": "tool", "content": "Clicked.", "tool_call_id": "call_1", "name": "click"}
    m = Message.from_record(old)
    assert m.images == () and m.to_record() == old
    assert "images" not in Message.tool("c", "x").serialized()


def test_a_text_model_reads_a_note_in_place_of_the_images() -> None:
    assert Message.tool("c", "Clicked.", images=(SHOT,)).text_content() == f"Clicked.\n{IMAGE_NOTE}"
    assert Message.tool("c", "", images=(SHOT,)).text_content() == IMAGE_NOTE
    assert Message.tool("c", "Clicked.").text_content() == "Clicked."
    prompt = render_prompt(request(*trajectory()))  # the local llama.cpp model's template
    assert prompt.count(IMAGE_NOTE) == 2 and SHOT.data not in prompt


# ---- OpenAI-compatible --------------------------------------------------------------------------


def openai(server: FakeServer, **kw: Any) -> OpenAICompatModel:
    return OpenAICompatModel("fake", base_url=server.openai_base_url, api_key="sk-test", backoff_s=0.001, **kw)


async def test_openai_vision_sends_the_screenshots_of_a_run_of_tool_results_as_one_user_message_after_it(
    server: FakeServer,
) -> None:
    server.script(chat_stream({"content": "ok"}))
    async with openai(server, vision=True) as model:
        await complete(model, request(*trajectory()))
        assert model._prepare(request(*trajectory())) == model._prepare_plain(request(*trajectory()))
    messages = server.bodies()[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "user", "user"]
    assert messages[3] == {"role": "tool", "content": "Clicked at (10, 20).", "tool_call_id": "call_1"}
    shots = messages[5]["content"]
    assert shots == [
        {"type": "text", "text": "Screenshot from tool call call_1 (computer):"},
        {"type": "image_url", "image_url": {"url": SHOT.data_url()}},
        {"type": "text", "text": "Screenshot from tool call call_2 (computer):"},
        {"type": "image_url", "image_url": {"url": SHOT.data_url()}},
    ]
    assert messages[6] == {"role": "user", "content": "thanks"}


async def test_openai_vision_at_the_end_of_the_trajectory_and_on_a_user_message(server: FakeServer) -> None:
    async with openai(server, vision=True) as model:
        body = json.loads(model._prepare(request(*trajectory()[:3])))
        assert body["messages"][-1]["role"] == "user" and body["messages"][-1]["content"][1]["type"] == "image_url"
        seen = json.loads(model._prepare(request(Message("user", "what is this?", images=(SHOT,)))))
    assert seen["messages"][-1]["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": SHOT.data_url()}},
    ]


async def test_openai_text_model_gets_the_note_and_no_image(server: FakeServer) -> None:
    server.script(chat_stream({"content": "ok"}))
    async with openai(server) as model:
        assert model.vision is False
        await complete(model, request(*trajectory()))
        assert model._prepare(request(*trajectory())) == model._prepare_plain(request(*trajectory()))
    messages = server.bodies()[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert messages[3]["content"] == f"Clicked at (10, 20).\n{IMAGE_NOTE}"
    assert SHOT.data not in json.dumps(messages)


async def test_openai_request_bytes_stay_the_same_as_the_trajectory_grows() -> None:
    model = OpenAICompatModel("fake", base_url="http://127.0.0.1:9/v1", vision=True)
    first = model._prepare(request(*trajectory()[:4])).decode()
    later = model._prepare(request(*trajectory(), Message.assistant("done"))).decode()
    head = first[: first.index('],"temperature"')]
    assert later.startswith(head)  # the screenshot sent once is sent identically after: the cached prefix holds
    await model.aclose()


# ---- Anthropic --------------------------------------------------------------------------------


def anthropic(server: FakeServer, **kw: Any) -> AnthropicModel:
    return AnthropicModel("claude-fake", base_url=server.root, api_key="sk-ant-test", backoff_s=0.001, **kw)


async def test_anthropic_vision_puts_image_blocks_inside_the_tool_result(server: FakeServer) -> None:
    server.script(anthropic_stream(("text", ["ok"])))
    async with anthropic(server, vision=True) as model:
        await complete(model, request(*trajectory()))
    messages = server.bodies()[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    first, second, words = messages[2]["content"]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": SHOT.data}}
    assert first == {
        "type": "tool_result",
        "tool_use_id": "call_1",
        "content": [{"type": "text", "text": "Clicked at (10, 20)."}, image],
    }
    assert second["tool_use_id"] == "call_2" and second["content"][1] == image
    assert words["type"] == "text" and words["text"] == "thanks"


async def test_anthropic_text_model_gets_the_note(server: FakeServer) -> None:
    server.script(anthropic_stream(("text", ["ok"])))
    async with anthropic(server) as model:
        await complete(model, request(*trajectory()))
    results = server.bodies()[0]["messages"][2]["content"]
    assert results[0]["content"] == f"Clicked at (10, 20).\n{IMAGE_NOTE}"
    assert SHOT.data not in json.dumps(server.bodies()[0])


# ---- the capability -----------------------------------------------------------------------------


async def test_vision_is_declared_by_remote_vision_and_off_by_default() -> None:
    on = ModelSettings(remote=RemoteConfig(vision=True), base_url="http://127.0.0.1:9/v1")
    for spec in ("openai:m", "anthropic:m"):
        seeing: Any = load_model(spec, on)
        reading: Any = load_model(spec, ModelSettings(base_url="http://127.0.0.1:9/v1"))
        assert (seeing.vision, reading.vision) == (True, False)
        await seeing.aclose()
        await reading.aclose()
