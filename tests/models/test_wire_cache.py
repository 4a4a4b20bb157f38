"""Request bodies built from per-message cached JSON are the bytes one ``json.dumps`` gives.

A server shares one model among many sessions whose requests interleave; each message keeps its
own encodings, so a request costs O(new messages) and nothing is kept once the messages are gone.
"""

from __future__ import annotations

import gc
import json
import random
import tracemalloc
from dataclasses import replace

import pytest

from kairos.models.base import TokenEstimator, estimate_message_tokens, estimate_request_tokens
from kairos.models.openai_compat import OpenAICompatModel
from kairos.models.types import (
    HARNESS,
    STATUS,
    AllBut,
    Message,
    ModelRequest,
    Origin,
    ReasoningPolicy,
    ToolCall,
    ToolSpec,
    estimate_messages_tokens,
)

READ = ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
TOOLS = (READ, ToolSpec("bash", "Run a command — carefully.", {"type": "object", "properties": {}}))


def _model(policy: ReasoningPolicy = ReasoningPolicy.SINCE_LAST_USER, **kw: object) -> OpenAICompatModel:
    return OpenAICompatModel("m-1", base_url="http://127.0.0.1:9/v1", reasoning_policy=policy, **kw)  # type: ignore[arg-type]


def _turn(rng: random.Random, i: int) -> list[Message]:
    """One varied turn: user or event input, maybe a tool round with reasoning, an answer."""
    out: list[Message] = []
    kind = rng.choice(["user", "external", "event", "harness"])
    if kind == "user":
        out.append(Message.user(f'task {i}: résumé ✓ "quoted" \\ back\nslash 日本語 {"x" * rng.randint(0, 300)}'))
    elif kind == "external":
        out.append(Message.user(f"<external>mail {i}</external>", Origin("external", "mail: a@b.c")))
    elif kind == "event":
        out.append(Message.user(f"timer {i}", Origin("event", "timer: daily")))
    else:
        out.append(Message("user", f"[catalog] {i}", origin=HARNESS))
    if rng.random() < 0.6:
        n = rng.randint(1, 3)
        calls = tuple(ToolCall(f"c{i}-{k}", "read_file", json.dumps({"path": f"f{k}.py"})) for k in range(n))
        out.append(Message.assistant("" if rng.random() < 0.5 else "let me look", calls, reasoning=f"think {i}"))
        out += [Message.tool(c.id, f"contents of {c.id}\n\t\u0000 end", name="read_file") for c in calls]
    out.append(Message.assistant(f"answer {i}", reasoning=rng.choice([None, "", f"why {i}"])))
    return out


def _request(messages: list[Message], status: str | None, tools: tuple[ToolSpec, ...] = TOOLS) -> ModelRequest:
    trailing = (Message.user(f"<agent_status>{status}</agent_status>", STATUS),) if status else ()
    return ModelRequest(
        "You are kairos.", "cwd: /repo", tools, (*messages, *trailing), max_tokens=300, stable_prefix_len=len(messages)
    )


@pytest.mark.parametrize("policy", list(ReasoningPolicy))
def test_bodies_are_byte_identical_across_a_growing_conversation(policy: ReasoningPolicy) -> None:
    rng = random.Random(policy.value)
    model = _model(policy, extra_body={"top_k": 20, "temperature": 0.7})
    sessions: list[list[Message]] = [[], [], []]
    for i in range(60):
        trajectory = sessions[i % 3]  # three sessions' requests interleave, as on a server
        trajectory += _turn(rng, i)
        request = _request(trajectory, f"step {i}" if i % 4 else None, TOOLS if i % 5 else ())
        body = model._prepare(request)
        assert body == model._prepare_plain(request)
        assert body == _model(policy, extra_body={"top_k": 20, "temperature": 0.7})._prepare(request)  # cold caches
        sent = json.loads(body)
        assert sent["messages"] == model.wire_messages(request)
        assert (sent["temperature"], sent["top_k"], sent["max_tokens"]) == (0.7, 20, 300)


def test_reasoning_before_the_last_user_message_is_dropped_from_the_cached_body() -> None:
    model = _model()
    thought = Message.assistant("a", reasoning="old thought")
    first = _request([Message.user("one"), thought], None)
    assert b"old thought" in model._prepare(first)
    later = _request([Message.user("one"), thought, Message.user("two")], "s")
    assert b"old thought" not in model._prepare(later) and model._prepare(later) == model._prepare_plain(later)


def test_an_extra_body_that_overrides_the_head_falls_back_to_one_dumps() -> None:
    model = _model(extra_body={"model": "other", "messages": [], "tools": []})
    request = _request([Message.user("hi")], "s")
    assert model._prepare(request) == model._prepare_plain(request)
    assert json.loads(model._prepare(request))["model"] == "other"


def test_cached_encodings_are_not_part_of_the_value() -> None:
    m = Message.assistant("hi", (ToolCall("c", "t", "{}"),), reasoning="r")
    twin = Message.assistant("hi", (ToolCall("c", "t", "{}"),), reasoning="r")
    m.openai_json(include_reasoning=True), m.serialized(), m.estimated_tokens()
    assert m == twin and hash(m) == hash(twin) and repr(m) == repr(twin)
    bare = replace(m, reasoning=None)
    assert "reasoning" not in bare.openai_json(include_reasoning=True)
    assert json.loads(m.openai_json(include_reasoning=True))["reasoning_content"] == "r"
    assert m.serialized() == json.dumps(m.to_record(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def test_token_estimates_stay_exact_when_sessions_interleave() -> None:
    rng = random.Random(3)
    estimator = TokenEstimator()
    sessions: list[list[Message]] = [[], []]
    for i in range(40):
        trajectory = sessions[i % 2]
        trajectory += _turn(rng, i)
        request = _request(trajectory, f"step {i}")
        assert estimator(request) == estimate_request_tokens(request)


def test_nothing_is_kept_once_the_sessions_are_gone() -> None:
    model, estimator = _model(), TokenEstimator()

    def serve(n: int) -> None:
        rng = random.Random(n)
        for s in range(200):  # many short-lived sessions through one shared model
            trajectory: list[Message] = []
            for i in range(5):
                trajectory += _turn(rng, i + s)
                request = _request(trajectory, f"s{s}")
                model._prepare(request)
                estimator(request)

    serve(0)  # warm up: the tool JSON, the system JSON, interned strings
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        serve(1)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - before < 64 * 1024  # 1,000 requests' messages and their JSON: megabytes if they were kept


def test_token_sums_count_new_messages_and_reuse_the_others() -> None:
    counted = [Message.user("x" * 40), Message.assistant("y" * 8, (ToolCall("c", "t", '{"a": 1}'),))]
    assert (
        estimate_messages_tokens(counted) == sum(estimate_message_tokens(m) for m in counted) == 14 + 16
    )  # 4 + 40/4; 4 + 8/4 + (8/4 + 8)
    fresh = [*counted, Message.tool("c", "z" * 12)]  # one not counted yet: counted now, the rest reused
    assert estimate_messages_tokens(fresh) == 30 + 7 and estimate_messages_tokens([]) == 0


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", None),
        ("required", "required"),
        ("none", "none"),
        (("bash",), {"type": "function", "function": {"name": "bash"}}),
        (("bash", "read_file"), "required"),
        (AllBut(("bash",)), None),  # no exclusion in the API: left to the model (auto)
    ],
)
def test_tool_choice_is_sent_in_openai_shape_and_bodies_stay_identical(choice: object, wire: object) -> None:
    request = replace(_request([Message.user("hi")], "s"), tool_choice=choice)  # type: ignore[arg-type]
    body = _model()._prepare(request)
    assert body == _model()._prepare_plain(request)
    assert json.loads(body).get("tool_choice") == wire
    no_tools = replace(request, tools=())
    assert "tool_choice" not in json.loads(_model()._prepare(no_tools))  # nothing to choose from


def test_messages_of_one_sender_share_one_origin() -> None:
    """A long-running server keeps one Origin per sender, not one per message (fewer objects for the GC)."""
    a = Origin.of("external", "webhook: ci")
    assert a is Origin.of("external", "webhook: ci") and a == Origin("external", "webhook: ci")
    assert Origin.of("external", "webhook: other") is not a
    stored = Message.user("build failed", a).to_record()
    back = [Message.from_record(dict(stored)) for _ in range(3)]
    assert all(m.origin is a for m in back)
