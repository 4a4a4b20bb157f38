"""The context builder: stable prefix, views in order, one trailing status, and what the status says."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

from kairos.context.builder import (
    _TASK_CURSOR,
    BasicStatus,
    ContextBuilder,
    NoStatus,
    current_task,
    display_path,
    session_task,
    status_message,
)
from kairos.context.session import Session, SessionStore, SessionView
from kairos.models.types import HARNESS, STATUS, Message, Origin, SystemPrompt, ToolSpec


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=7)
        return self.now


def ctx(session: Session) -> SimpleNamespace:
    return SimpleNamespace(session=session)


SPEC_A = ToolSpec("a_tool", "A.", {"type": "object", "properties": {}})
SPEC_B = ToolSpec("b_tool", "B.", {"type": "object", "properties": {}})


def test_builder_places_status_last_and_marks_it(store: SessionStore) -> None:
    s = store.new()
    s.append(Message.user("q"))
    b = ContextBuilder(SystemPrompt("static", "deploy"))
    req = b.build(s, (), BasicStatus(FakeClock()).render(SimpleNamespace(session=s)))
    assert req.messages[-1].content.startswith("<agent_status>") and (req.messages[-1].origin is not None)
    assert "kairos:cache-boundary" in req.system and "kairos:cache-boundary" not in req.system_text()
    assert json.loads(json.dumps(req.messages[-1].to_openai()))["role"] == "user"


def test_the_stable_prefix_is_everything_but_the_status(store: SessionStore) -> None:
    s = store.new()
    s.append(Message.user("q"), Message.assistant("a"))
    b = ContextBuilder(SystemPrompt("static", "deploy"), max_tokens=77, temperature=0.5)
    req = b.build(s, (SPEC_B, SPEC_A), "Time: now")
    assert req.stable_prefix_len == 2 and len(req.messages) == 3
    assert req.messages[:2] == tuple(s.messages) and req.messages[2] == status_message("Time: now")
    assert req.messages[2].origin == STATUS
    assert req.tools == (SPEC_B, SPEC_A)  # as given: ordering the tools is the tool set's job
    assert (req.system_static, req.system_deployment, req.max_tokens, req.temperature) == ("static", "deploy", 77, 0.5)


def test_without_a_status_nothing_trails(store: SessionStore) -> None:
    s = store.new()
    s.append(Message.user("q"))
    for status in (None, ""):
        req = ContextBuilder(SystemPrompt("static")).build(s, (), status)
        assert req.messages == tuple(s.messages) and req.stable_prefix_len == 1


def test_the_same_trajectory_builds_the_same_prefix_objects(store: SessionStore) -> None:
    """The prefix audit and the token memo rely on unchanged messages being the same objects."""
    s = store.new()
    s.append(Message.user("q"))
    b = ContextBuilder(SystemPrompt("static"))
    first = b.build(s, (SPEC_A,), "one")
    s.append(Message.assistant("a"))
    second = b.build(s, (SPEC_A,), "two")
    assert second.messages[0] is first.messages[0]


def test_views_apply_in_order_and_only_to_the_trajectory(store: SessionStore) -> None:
    seen: list[str] = []

    class Tag:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def apply(self, session: SessionView, messages: Sequence[Message]) -> Sequence[Message]:
            seen.append(self.tag)
            return [Message(m.role, m.content + self.tag, origin=m.origin) for m in messages]

    s = store.new()
    s.append(Message.user("q"))
    req = ContextBuilder(SystemPrompt("static"), views=(Tag("1"), Tag("2"))).build(s, (), "status")
    assert seen == ["1", "2"]
    assert req.messages[0].content == "q12"
    assert req.messages[-1].content == "<agent_status>\nstatus\n</agent_status>"  # views never see the status
    assert s.messages[0].content == "q"  # the stored trajectory is untouched


def test_basic_status_says_time_cwd_and_the_users_current_request(store: SessionStore) -> None:
    s = store.new()
    s.append(Message.user("first task"), Message.assistant("done"), Message.user("second task"))
    s.append(Message.user("a note from the harness", HARNESS), Message.user("mail", Origin("external", "mail")))
    text = BasicStatus(FakeClock()).render(ctx(s), ["Extra: line"])
    assert text == "Time: 2026-01-02 03:04:12 UTC\ncwd: .\nCurrent request: second task\nExtra: line"


def test_basic_status_follows_the_shells_cwd(store: SessionStore) -> None:
    s = store.new()
    sub = s.workspace / "src" / "pkg"
    sub.mkdir(parents=True)
    s.tool_context.cwd = sub
    text = BasicStatus(FakeClock()).render(ctx(s))
    assert text is not None and "cwd: ./src/pkg" in text


def test_basic_status_shortens_the_task_or_leaves_it_out(store: SessionStore) -> None:
    s = store.new()
    s.append(Message.user("word " * 100))
    short = BasicStatus(FakeClock(), task_chars=20).render(ctx(s))
    assert short is not None
    task_line = short.splitlines()[-1]
    assert task_line.startswith("Current request: word word") and task_line.endswith("…")
    assert len(task_line) == len("Current request: ") + 20
    hidden = BasicStatus(FakeClock(), task_chars=0).render(ctx(s))
    assert hidden is not None and "Current request" not in hidden


def test_basic_status_has_no_task_line_before_the_user_speaks(store: SessionStore) -> None:
    s = store.new()
    text = BasicStatus(FakeClock()).render(ctx(s))
    assert text is not None and text.splitlines() == ["Time: 2026-01-02 03:04:12 UTC", "cwd: ."]


def test_no_status_renders_nothing(store: SessionStore) -> None:
    s = store.new()
    s.append(Message.user("q"))
    assert NoStatus().render(ctx(s), ["ignored"]) is None


def test_current_task_is_the_last_real_user_message() -> None:
    msgs = [
        Message.user("asked"),
        Message.assistant("answer"),
        Message.user("event", Origin("event", "timer")),
        Message.user("status", STATUS),
    ]
    assert current_task(msgs) == "asked"
    assert current_task([Message.assistant("hi")]) is None


async def test_session_task_follows_appends_without_rescanning(store: SessionStore) -> None:
    session = store.new()
    assert session_task(session) is None
    session.append(Message.user("mail arrived", Origin("event", "mail")), Message.assistant("noted"))
    assert session_task(session) is None  # events only: no request
    session.append(Message.user("summarise it"), Message.assistant("done"))
    assert session_task(session) == "summarise it"
    for i in range(50):
        session.append(Message.user(f"hook {i}", Origin("event", "webhook")), Message.assistant("ok"))
    assert session_task(session) == "summarise it"
    assert session.state.get(_TASK_CURSOR) == (len(session.messages), 2)  # cursor at the end
    session.append(Message.user("and now?"))
    assert session_task(session) == "and now?" == current_task(session.message_list())
    await session.aclose()


def test_display_path_is_relative_inside_the_workspace_and_absolute_outside() -> None:
    ws = Path("/work/space")
    assert display_path(ws, ws) == "."
    assert display_path(ws / "a" / "b", ws) == "./a/b"
    assert display_path(Path("/elsewhere/x"), ws) == "/elsewhere/x"
