"""Request layouts: each request recorded as a delta of the one before, and laid out again exactly."""

from __future__ import annotations

import json

import pytest

from kairos.context.builder import status_message
from kairos.context.layout import LAYOUT_KEY, LayoutMissingError, PromptLayout, divergence_point, expand
from kairos.models.types import Message, ModelRequest, ToolSpec


def spec(name: str) -> ToolSpec:
    return ToolSpec(name, f"The {name} tool.", {"type": "object", "properties": {}})


def request(messages: tuple[Message, ...], tools: tuple[ToolSpec, ...], status: str) -> ModelRequest:
    return ModelRequest(
        "static part", "deployment part", tools, (*messages, status_message(status)), stable_prefix_len=len(messages)
    )


Q, A, Q2 = Message.user("list the files"), Message.assistant("here"), Message.user("thanks")
REQUESTS = [
    request((Q,), (spec("ls"),), "step 1"),
    request((Q, A, Q2), (spec("ls"),), "step 2"),
    request((Q, A, Q2), (spec("ls"), spec("fetch")), "step 3"),
]


def records(layout: PromptLayout | None = None) -> list[dict[str, object]]:
    layout = layout or PromptLayout()
    return [{"index": i, LAYOUT_KEY: layout.record(r)} for i, r in enumerate(REQUESTS)]


def test_every_request_is_laid_out_again_exactly() -> None:
    stored = json.loads(json.dumps(records()))  # as the database gives them back
    for i, original in enumerate(REQUESTS):
        prompt, previous = expand(stored, i)
        assert (prompt.system_static, prompt.system_deployment) == ("static part", "deployment part")
        assert prompt.tools == tuple(t.serialized() for t in original.tools)
        assert prompt.messages == tuple(m.serialized() for m in original.messages)
        assert prompt.stable == original.stable_prefix_len
        assert (previous is None) == (i == 0)


def test_a_request_stores_only_what_the_session_has_not_stored_yet() -> None:
    second = records()[1][LAYOUT_KEY]
    assert isinstance(second, dict)
    assert second["tools"] is None  # the same tools: a reference to the last list
    assert second["keep"] == 1  # the question is shared; the status after it is not
    stored = set(second["texts"].values())
    assert stored == {A.serialized(), Q2.serialized(), REQUESTS[1].messages[-1].serialized()}


def test_a_request_recorded_by_an_older_release_says_so_and_later_ones_still_open() -> None:
    stored = records()
    del stored[0][LAYOUT_KEY]
    with pytest.raises(LayoutMissingError, match="older release"):
        expand(stored, 0)
    fresh = [stored[0], {"index": 1, LAYOUT_KEY: PromptLayout().record(REQUESTS[1])}]  # a new process
    prompt, previous = expand(fresh, 1)
    assert prompt.messages[0] == Q.serialized() and previous is None
    with pytest.raises(IndexError):
        expand(stored, 3)


def test_the_audit_position_is_parsed_for_the_inspector() -> None:
    assert divergence_point("tools[2] byte 14") == ("tool", 2, 14)
    assert divergence_point("messages[5] byte 0") == ("message", 5, 0)
    assert divergence_point("system byte 120") == ("system", 0, 120)
    assert divergence_point("tools[1]") == ("tool", 1, 0)
    assert divergence_point("messages[3] (history shrank)") == ("message", 3, 0)
    assert divergence_point(None) is None and divergence_point("garbage") is None
