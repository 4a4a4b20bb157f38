"""TODO tools: semantics, errors, and a state that survives a session resume."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from kairos.agent import Agent
from kairos.agent.events import ToolCallFinished
from kairos.context.session import SessionStore
from kairos.models.types import Message, ToolCall
from kairos.plugins.todo import TodoTools
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.base import ToolContext, ToolSet
from kairos.tools.builtins.clock import CLOCK_RESOURCE
from kairos.tools.builtins.todo import (
    TODO_RESOURCE,
    TodoInput,
    TodoList,
    replay_todos,
    rewrite_todo_list,
    update_todo_status,
)
from kairos.tools.executor import execute as run_call


class Tick:
    def __init__(self) -> None:
        self.now = datetime(2025, 9, 14, 10, 30, 0)

    def __call__(self) -> datetime:
        self.now += timedelta(minutes=1)
        return self.now


def ctx_with_clock(workspace: Path) -> ToolContext:
    ctx = ToolContext(workspace=workspace)
    ctx.put(CLOCK_RESOURCE, Tick())
    return ctx


async def execute(ctx: ToolContext, name: str, args: dict[str, Any]) -> tuple[str, bool]:
    done = await run_call(call(name, args), ToolSet([rewrite_todo_list, update_todo_status]), ctx)
    return done.result.content, done.result.is_error


async def test_rewrite_assigns_ids_and_update_changes_status(workspace: Path) -> None:
    ctx = ctx_with_clock(workspace)
    items = [{"content": "find the config", "status": "in_progress"}, {"content": "fix  the\nport"}]
    text, err = await execute(ctx, "rewrite_todo_list", {"items": items})
    assert not err
    assert text.splitlines() == [
        "TODO list updated 2025-09-14 10:31:00 by rewrite_todo_list (2 items: 1 pending, 1 in_progress):",
        "[1] in_progress: find the config (since 2025-09-14 10:31:00)",
        "[2] pending: fix the port (since 2025-09-14 10:31:00)",
    ]
    text, err = await execute(ctx, "update_todo_status", {"id": 1, "status": "completed"})
    assert not err and "[1] completed: find the config (since 2025-09-14 10:32:00)" in text
    todos = ctx.get(TODO_RESOURCE)
    assert [(i.id, i.status) for i in todos.items] == [(1, "completed"), (2, "pending")]


async def test_rewrite_keeps_ids_and_unchanged_timestamps(workspace: Path) -> None:
    ctx = ctx_with_clock(workspace)
    await execute(ctx, "rewrite_todo_list", {"items": [{"content": "a"}, {"content": "b"}]})
    text, _ = await execute(
        ctx, "rewrite_todo_list", {"items": [{"id": 2, "content": "b"}, {"content": "c", "status": "in_progress"}]}
    )
    assert "[2] pending: b (since 2025-09-14 10:31:00)" in text
    assert "[3] in_progress: c (since 2025-09-14 10:32:00)" in text
    assert "[1]" not in text.split("\n", 1)[1]


async def test_errors_leave_the_list_unchanged(workspace: Path) -> None:
    ctx = ctx_with_clock(workspace)
    text, err = await execute(ctx, "update_todo_status", {"id": 4, "status": "completed"})
    assert err and "no TODO item with id 4" in text and "list is empty" in text
    await execute(ctx, "rewrite_todo_list", {"items": [{"content": "a"}]})
    text, err = await execute(
        ctx, "rewrite_todo_list", {"items": [{"id": 1, "content": "a"}, {"id": 1, "content": "b"}]}
    )
    assert err and "duplicate ids [1]" in text
    text, err = await execute(ctx, "rewrite_todo_list", {"items": [{"content": "  "}]})
    assert err and "non-empty" in text
    text, err = await execute(ctx, "update_todo_status", {"id": 1, "status": "done"})
    assert err and "Invalid arguments" in text  # the status enum is enforced by the schema
    assert [i.content for i in ctx.get(TODO_RESOURCE).items] == ["a"]


def test_list_methods_are_pure() -> None:
    empty = TodoList()
    one = empty.rewrite([TodoInput(content="x")], "t0")
    assert empty.items == [] and one.update(1, "cancelled", "t1").items[0].status == "cancelled"
    assert one.items[0].status == "pending" and one.summary() == "1 items: 1 pending"


def test_replay_applies_only_calls_that_succeeded() -> None:
    ok1 = ToolCall("c1", "rewrite_todo_list", '{"items": [{"content": "a"}, {"content": "b"}]}')
    bad = ToolCall("c2", "update_todo_status", '{"id": 9, "status": "completed"}')
    ok2 = ToolCall("c3", "update_todo_status", '{"id": 2, "status": "in_progress"}')
    lost = ToolCall("c4", "update_todo_status", '{"id": 1, "status": "cancelled"}')
    messages = [
        Message.user("plan"),
        Message.assistant("", (ok1,)),
        Message.tool("c1", "[2025-01-01 09:00:00] TODO list updated 2025-01-01 09:00:00 by rewrite_todo_list (...)"),
        Message.assistant("", (bad, ok2)),
        Message.tool("c2", "TODO list unchanged: no TODO item with id 9."),
        Message.tool("c3", "TODO list updated 2025-01-01 09:05:00 by update_todo_status (...)"),
        Message.assistant("", (lost,)),
        Message.tool("c4", "[interrupted: this tool call was stopped before it finished; its result is unknown]"),
    ]
    todos = replay_todos(messages)
    assert [(i.id, i.content, i.status, i.timestamp) for i in todos.items] == [
        (1, "a", "pending", "2025-01-01 09:00:00"),
        (2, "b", "in_progress", "2025-01-01 09:05:00"),
    ]


async def test_state_survives_a_resume(store: SessionStore) -> None:
    session = store.new()
    session.tool_context.put(CLOCK_RESOURCE, Tick())
    model = ScriptedModel(
        [
            reply("", call("rewrite_todo_list", {"items": [{"content": "read"}, {"content": "write"}]})),
            reply("", call("update_todo_status", {"id": 1, "status": "completed"})),
            reply("planned"),
        ]
    )
    agent = Agent(model, plugins=[TodoTools()])
    async for _ in agent.run(session, "plan it"):
        pass
    live = session.tool_context.get(TODO_RESOURCE)
    await session.aclose()

    resumed = store.resume(session.id)
    assert TODO_RESOURCE not in resumed.tool_context.resources
    model2 = ScriptedModel([reply("", call("update_todo_status", {"id": 2, "status": "in_progress"})), reply("ok")])
    events = [e async for e in Agent(model2, plugins=[TodoTools()]).run(resumed, "continue")]
    finished = [e.result for e in events if isinstance(e, ToolCallFinished)][0]
    assert not finished.is_error and "[1] completed: read" in finished.content
    assert replay_todos(resumed.messages).items[0] == live.items[0]
    assert [i.status for i in resumed.tool_context.get(TODO_RESOURCE).items] == ["completed", "in_progress"]
    await resumed.aclose()


def test_schemas_are_flat_for_grammar_decoding() -> None:
    for t in (rewrite_todo_list, update_todo_status):
        text = json.dumps(t.spec.parameters)
        assert "$ref" not in text and "$defs" not in text
    item = rewrite_todo_list.spec.parameters["properties"]["items"]["items"]
    assert item["properties"]["status"]["enum"] == ["pending", "in_progress", "completed", "cancelled"]
