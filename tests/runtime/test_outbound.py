"""The closed vocabulary of bus records: every type round-trips through the wire, nothing odd raises."""

from __future__ import annotations

import ast
import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kairos
from kairos.agent import Agent
from kairos.agent.events import (
    Activity,
    FinalAnswer,
    HookFailed,
    ModelDeltaEvent,
    Notice,
    RequestStats,
    RunError,
    ToolCallFinished,
    ToolCallStarted,
)
from kairos.context.audit import PrefixAudit
from kairos.context.session import SessionStore
from kairos.models.types import ReasoningDelta, TextDelta, ToolCall, ToolCallDelta, Usage
from kairos.runtime import Decision, Event, Outbox, RuleRouter, Runtime, RuntimeDB, SqliteBus
from kairos.runtime.bus import BusEvent
from kairos.runtime.outbound import (
    PAYLOADS,
    AgentFinal,
    AgentText,
    EventAccepted,
    Outbound,
    OutboxMessage,
    UnknownPayload,
    parse_payload,
    record_schemas,
    stream_record,
    vocabulary_table,
)
from kairos.runtime.records import agent_record
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.base import ToolResult
from kairos.tools.function import tool

SRC = Path(kairos.__file__).parent
README = SRC.parents[1] / "README.md"
_EVENT = {"type": "user.input", "content": "hi", "source": {"type": "user"}, "channel": "cli", "context": {},
          "session": "s1", "id": "", "strategy": "queue", "reason": "default for user.input"}  # fmt: skip
_NOTE = {"id": "n-1", "user": "local", "session": "s1", "kind": "notify", "text": "done", "priority": "normal",
         "created": "2026-01-01T00:00:00.000Z", "read": False, "read_at": None}  # fmt: skip
_QUESTION = {**_NOTE, "id": "q-1", "kind": "question", "text": "ok?", "priority": "high", "options": ["yes", "no"],
             "default": "no", "timeout_s": 30.0, "status": "pending", "answer": None, "answered_at": None,
             "answered_by": ""}  # fmt: skip
SAMPLES: dict[str, list[dict[str, Any]]] = {
    "agent.text": [{"text": "Hel"}],
    "agent.reasoning": [{"text": "think"}],
    "agent.tool_started": [{"id": "c1", "name": "echo", "arguments": '{"text": "x"}'}],
    "agent.tool_finished": [
        {"id": "c1", "name": "echo", "content": "x", "truncated": False, "is_error": False, "duration_s": 0.01}
    ],
    "agent.final": [{"text": "done", "stop_reason": "answer"}],
    "agent.error": [{"message": "model unreachable"}],
    "agent.notice": [{"text": "retrying in 2 s", "source": "model"}],
    "agent.hook_failed": [{"plugin": "p", "hook": "before_request", "message": "boom"}],
    "agent.request": [
        {
            "index": 0,
            "prompt_tokens": 10,
            "cached_prompt_tokens": 0,
            "completion_tokens": 3,
            "ttft_s": None,
            "total_s": 0.5,
            "prefix_ok": True,
            "first_request": True,
            "diverged_at": None,
            "deliberate": None,
        }
    ],  # fmt: skip
    "agent.activity": [{"kind": "reading", "done": 5, "total": 10, "detail": "", "text": "reading the prompt"}],
    "run.started": [{"pending": 1}],
    "run.ended": [{"pending": 0}],
    "session.created": [{"title": "t"}],
    "session.recovered": [{}],
    "session.error": [{"message": "busy"}],
    "component.error": [{"component": "mail", "message": "login failed"}],
    "event.accepted": [{**_EVENT, "seq": 3}, {**_EVENT, "strategy": "parallel"}],
    "event.dropped": [{**_EVENT, "strategy": "drop", "reason": "a filter rule"}],
    "parallel.started": [{"question": "q", "side_session": "s2"}],
    "parallel.answer": [{"question": "q", "answer": "a", "side_session": "s2"}],
    "watch.failed": [{"watch_id": "w-1", "message": "gone"}],
    "outbox.message": [_NOTE, _QUESTION],
    "outbox.closed": [{**_QUESTION, "status": "answered", "answer": "yes", "answered_by": "user"}],
    "outbox.read": [{"ids": ["n-1"], "user": None}],
}
CASES = [(t, d) for t, samples in SAMPLES.items() for d in samples]


def test_every_type_has_samples_and_one_class() -> None:
    types = [c.TYPE for c in PAYLOADS]
    assert len(types) == len(set(types))
    assert set(SAMPLES) == set(types)
    subclasses = {c for c in _all_subclasses(Outbound) if "TYPE" in c.__dict__}
    assert subclasses == set(PAYLOADS), "a payload class outside the union"


def _all_subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_all_subclasses(sub))]


@pytest.mark.parametrize(("type_", "data"), CASES)
def test_each_payload_round_trips_through_the_wire(type_: str, data: dict[str, Any], tmp_path: Path) -> None:
    payload = parse_payload(type_, data)
    assert not isinstance(payload, UnknownPayload), payload.error
    assert type_ == payload.TYPE
    assert payload.to_data() == data and list(payload.to_data()) == list(data)  # keys too, and their order
    assert payload.to_data() == payload.model_dump(mode="json", include=set(data))
    bus = SqliteBus(RuntimeDB(tmp_path / "bus.db"))
    bus.publish("s1", payload.TYPE, payload.to_data())
    (stored,) = bus.history(None, 0)
    record = json.loads(json.dumps(stored.to_record()))
    assert record["type"] == type_ and record["data"] == data
    assert stored.payload == payload
    assert stream_record().model_validate(record).root.data == payload  # the documented schema takes it


@pytest.mark.parametrize(
    ("type_", "data"),
    [
        ("turn.text", {"text": "an old type"}),
        ("agent.text", {}),
        ("agent.text", {"text": 5}),
        ("agent.text", ["not", "an", "object"]),
        ("agent.text", None),
        ("agent.final", {"text": "x", "stop_reason": "a reason from a later version"}),
        ("event.accepted", {**_EVENT, "strategy": "whenever"}),
        ("outbox.read", "ids"),
    ],
)
def test_unknown_and_malformed_records_parse_to_the_fallback(type_: str, data: Any) -> None:
    payload = parse_payload(type_, data)
    assert isinstance(payload, UnknownPayload)
    assert payload.type == type_ and payload.data == data and payload.error
    assert BusEvent(1, "s", type_, data, 0.0).payload == payload


def test_extra_keys_of_a_newer_version_are_ignored() -> None:
    payload = parse_payload("agent.text", {"text": "x", "added_later": 1})
    assert payload == AgentText(text="x") and payload.to_data() == {"text": "x"}


def test_a_record_is_parsed_once() -> None:
    ev = BusEvent(1, "s", "agent.final", {"text": "x", "stop_reason": "answer"}, 0.0)
    assert ev.payload is ev.payload and isinstance(ev.payload, AgentFinal)
    assert ev == BusEvent(1, "s", "agent.final", {"text": "x", "stop_reason": "answer"}, 0.0)


def test_agent_records_cover_every_agent_event() -> None:
    c = ToolCall("c1", "echo", "{}")
    events = [ModelDeltaEvent(TextDelta("a")), ModelDeltaEvent(ReasoningDelta("b")), ToolCallStarted(c),
              ToolCallFinished(c, ToolResult("x" * 5000), 0.123456), FinalAnswer("done"), RunError("no"),
              Notice("n", "model"), HookFailed("p", "h", "m"), Activity("reading", 5, 10),
              RequestStats(0, Usage(10, 2, 3, 0.1, 0.5), PrefixAudit(True, first_request=True), 11)]  # fmt: skip
    payloads = [agent_record(e) for e in events]
    assert [p.TYPE for p in payloads if p is not None] == [
        "agent.text", "agent.reasoning", "agent.tool_started", "agent.tool_finished", "agent.final", "agent.error",
        "agent.notice", "agent.hook_failed", "agent.activity", "agent.request",
    ]  # fmt: skip
    finished = payloads[3].to_data() if payloads[3] is not None else {}
    assert finished["truncated"] is True and len(finished["content"]) == 4000 and finished["duration_s"] == 0.1235
    assert agent_record(ModelDeltaEvent(ToolCallDelta(0, "c1", "echo"))) is None


def _published_classes() -> tuple[set[str], list[str]]:
    """Classes built as the payload of a ``publish(session, Payload(...))`` call in src, and every
    publish call whose payload is a string (none may be, outside the bus itself)."""
    named, strings = set(), []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "publish" or len(node.args) < 2:
                continue
            arg = node.args[1]
            if isinstance(arg, ast.Call):
                func = arg.func.value if isinstance(arg.func, ast.Attribute) else arg.func  # Cls.of(...)
                if isinstance(func, ast.Name) and func.id[0].isupper():  # a class (a variable is typed by mypy)
                    named.add(func.id)
            elif isinstance(arg, ast.Constant) and isinstance(arg.value, str) and path.name != "bus.py":
                strings.append(f"{path.relative_to(SRC)}:{node.lineno}")
    return named, strings


def test_every_payload_published_in_src_is_in_the_union() -> None:
    named, strings = _published_classes()
    assert not strings, f"publish with a string type: {strings}"
    union = {c.__name__ for c in PAYLOADS}
    assert named <= union
    assert {"RunStarted", "EventDropped", "ParallelAnswer", "WatchFailed", "OutboxMessage", "OutboxRead"} <= named


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


async def _until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110  # polls the bus's history; no event marks the record
            await asyncio.sleep(0.01)


class _Router:
    """``aside`` is answered in parallel even when nothing runs (the rule router would queue it); ``spam`` dropped."""

    async def decide(self, event: Event, *, busy: bool) -> Decision:
        if event.content in ("aside", "spam"):
            return Decision("parallel" if event.content == "aside" else "drop", "a test rule")
        return await RuleRouter().decide(event, busy=busy)


async def test_every_record_of_a_scripted_session_parses_to_a_known_type(tmp_path: Path) -> None:
    script = [reply("", call("echo", {"text": "ping"})), reply("pong"), reply("side answer"), reply("noted")]
    outbox = Outbox()
    agent = Agent(ScriptedModel(script), tools=[echo])
    async with Runtime(agent, SessionStore(tmp_path), router=_Router(), components=[outbox]) as rt:
        await outbox.wait_ready()
        sid = rt.create_session("t")
        await rt.submit(Event("user.input", "hi", {"type": "user"}, "test", session=sid))
        await rt.wait_idle(sid)
        await rt.submit(Event("user.input", "aside", {"type": "user"}, "test", session=sid))
        await rt.submit(Event("user.input", "spam", {"type": "user"}, "test", session=sid))
        outbox.notify(sid, "done")
        outbox.mark_read([m["id"] for m in outbox.list()])
        await _until(lambda: any(e.type == "parallel.answer" for e in rt.bus.history(None, 0)))
        await rt.wait_idle(sid)
        records = rt.bus.history(None, 0, limit=10_000)
    unknown = [(e.type, e.payload) for e in records if isinstance(e.payload, UnknownPayload)]
    assert not unknown
    seen = {e.type for e in records}
    assert {"session.created", "event.accepted", "event.dropped", "run.started", "agent.tool_started",
            "agent.tool_finished", "agent.text", "agent.final", "run.ended", "parallel.started", "parallel.answer",
            "outbox.message", "outbox.read"} <= seen  # fmt: skip
    queued = next(e.payload for e in records if e.type == "event.accepted" and "seq" in e.data)
    assert isinstance(queued, EventAccepted) and queued.seq is not None and queued.type == "user.input"
    note = next(e.payload for e in records if e.type == "outbox.message" and e.data["kind"] == "notify")
    assert isinstance(note, OutboxMessage) and "options" not in note.to_data()


def test_the_readme_lists_exactly_the_vocabulary() -> None:
    text = README.read_text(encoding="utf-8")
    assert vocabulary_table() in text, "the README's events table is stale: paste outbound.vocabulary_table()"
    start = text.index("<!-- events table")
    rows = text[start : text.index("<!-- end of the events table -->")].splitlines()
    listed = {r.split("`")[1] for r in rows if r.startswith("| `")}
    assert listed == {c.TYPE for c in PAYLOADS}


def test_the_json_schema_is_self_contained_and_names_every_type() -> None:
    schemas = record_schemas()
    refs = set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(schemas)))
    assert refs <= set(schemas)
    assert set(schemas["StreamRecord"]["discriminator"]["mapping"]) == {c.TYPE for c in PAYLOADS}
    assert "type" in schemas["EventAccepted"]["properties"]  # the event's own type, inside data
    assert "seq" not in schemas["EventAccepted"]["required"]
