from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kairos.knowledge import HashEmbedder
from kairos.memory import UserMemory
from kairos.models.types import Message, ModelResponse
from kairos.testing import ScriptedModel, call, reply

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LATER = datetime(2026, 4, 1, 12, 0, tzinfo=UTC)


def ops(*operations: dict[str, Any]) -> ModelResponse:
    """The extractor's answer: one save_memories call."""
    return reply("", call("save_memories", {"operations": list(operations)}))


def op(content: str, evidence: list[int], **kw: Any) -> dict[str, Any]:
    return {"op": "add", "content": content, "evidence": evidence, "kind": "semantic", "category": "fact", **kw}


def flight_session() -> list[Message]:
    return [
        Message.user("Book me a flight to Tokyo next Friday. I prefer a window seat and I'm vegetarian."),
        Message.assistant("Searching flights."),
        Message.tool("c1", json.dumps({"results": 3, "flights": ["ANA 1", "JAL 2", "UA 3"]}), name="flight_search"),
        Message.assistant("Here are 3 options; shall I book ANA?"),
        Message.user("Yes, and use my MileagePlus number 12345678."),
        Message.assistant("Booked."),
    ]


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
def memory(tmp_path: Path, model: ScriptedModel) -> Iterator[UserMemory]:
    mem = UserMemory.open(tmp_path / ".kairos", HashEmbedder(), model, user="alice")
    yield mem
    mem.close()
