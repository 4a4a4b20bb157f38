"""TODO tools (book ch2 Exp 2-9, technique 3): ``rewrite_todo_list`` and ``update_todo_status``.

The list is external memory the model recites at the end of its context (the status bar renders
it), against drift towards local subtasks. Items are ``{id, content, status, timestamp}``.

The state lives in ``ctx.get(TODO_RESOURCE)`` while a session runs, but it is *derived
from the trajectory*: :func:`replay_todos` re-applies every successful TODO call found in the
messages, taking each call's timestamp from its own result (``updated YYYY-MM-DD HH:MM:SS``), so
a resumed session rebuilds exactly the list it had. The plugin :class:`kairos.plugins.todo.TodoTools`
seeds it and shows the list in the status.
The executor starts the calls of one reply in order and these tools never suspend, so live
execution order equals trajectory order and the replay matches what the tools did.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kairos.models.types import Message, ToolCall
from kairos.tools.base import Resource, Tool, ToolContext, ToolResult
from kairos.tools.builtins.clock import CLOCK_RESOURCE, system_now
from kairos.tools.function import FunctionTool, tool

TodoStatus: TypeAlias = Literal["pending", "in_progress", "completed", "cancelled"]
TODO_STATUSES: tuple[str, ...] = get_args(TodoStatus)
TODO_RESOURCE: Resource[TodoList] = Resource("kairos.todo")
"""The live :class:`TodoList` of a session."""
TODO_TOOL_NAMES = ("rewrite_todo_list", "update_todo_status")
MAX_ITEMS = 30
MAX_CONTENT_CHARS = 200
_STAMP = re.compile(r"updated (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class TodoError(ValueError):
    """A TODO call the list cannot apply (unknown id, duplicate ids, empty content)."""


@dataclass(frozen=True, slots=True)
class TodoItem:
    """One item of the list, with the id the model refers to it by."""

    id: int
    content: str
    status: TodoStatus
    timestamp: str
    """When the item was created or last changed status (``YYYY-MM-DD HH:MM:SS``)."""


class TodoInput(BaseModel):
    """One item as the model writes it in ``rewrite_todo_list``."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(description="what to do, one short line")
    status: TodoStatus = Field("pending", description="pending, in_progress, completed or cancelled")
    id: int | None = Field(None, description="keep an existing item's id; omit for new items")


@dataclass
class TodoList:
    """The current TODO list. Changing methods return the new list; the old one is untouched."""

    items: list[TodoItem] = field(default_factory=list)

    def rewrite(self, new: Sequence[TodoInput], now: str) -> TodoList:
        """The list replaced by ``new``; an unchanged item keeps its timestamp, others get ``now``.

        Raises:
            TodoError: an entry is empty, ids repeat, or there are too many items.
        """
        if len(new) > MAX_ITEMS:
            raise TodoError(f"a TODO list holds at most {MAX_ITEMS} items, got {len(new)}; merge small steps")
        old = {i.id: i for i in self.items}
        given = [n.id for n in new if n.id is not None]
        if len(set(given)) != len(given):
            raise TodoError(f"duplicate ids {sorted({i for i in given if given.count(i) > 1})}; ids must be unique")
        next_id = max([*given, *old, 0]) + 1
        items: list[TodoItem] = []
        for n in new:
            content = " ".join(n.content.split())[:MAX_CONTENT_CHARS]
            if not content:
                raise TodoError("every item needs a non-empty content")
            if n.id is None:
                item_id, next_id = next_id, next_id + 1
            else:
                item_id = n.id
            prev = old.get(item_id)
            same = prev is not None and prev.content == content and prev.status == n.status
            items.append(TodoItem(item_id, content, n.status, prev.timestamp if same and prev else now))
        return TodoList(items)

    def update(self, item_id: int, status: TodoStatus, now: str) -> TodoList:
        """The list with item ``item_id`` set to ``status`` at ``now``.

        Raises:
            TodoError: no item has that id.
        """
        if not any(i.id == item_id for i in self.items):
            known = ", ".join(str(i.id) for i in self.items) or "none (the list is empty; use rewrite_todo_list)"
            raise TodoError(f"no TODO item with id {item_id}; existing ids: {known}")
        return TodoList([replace(i, status=status, timestamp=now) if i.id == item_id else i for i in self.items])

    def counts(self) -> dict[str, int]:
        """Items per status, every status listed (zeros included)."""
        return {s: sum(1 for i in self.items if i.status == s) for s in TODO_STATUSES}

    def render(self) -> str:
        """One line per item: ``[id] status: content (since timestamp)``."""
        return "\n".join(f"[{i.id}] {i.status}: {i.content} (since {i.timestamp})" for i in self.items)

    def summary(self) -> str:
        """``N items: a pending, b completed``, or ``empty``."""
        c = self.counts()
        parts = [f"{n} {s}" for s, n in c.items() if n]
        return f"{len(self.items)} items: " + ", ".join(parts) if parts else "empty"


def _now(ctx: ToolContext) -> str:
    clock = ctx.get(CLOCK_RESOURCE) or system_now
    return clock().strftime(_TIME_FORMAT)


def _result(name: str, todos: TodoList, now: str) -> ToolResult:
    body = todos.render() or "(no items)"
    return ToolResult(f"TODO list updated {now} by {name} ({todos.summary()}):\n{body}")


def _live(ctx: ToolContext) -> TodoList:
    todos = ctx.get(TODO_RESOURCE)
    return todos if isinstance(todos, TodoList) else TodoList()


class RewriteArgs(BaseModel):
    """Arguments of ``rewrite_todo_list``.

    Its JSON schema is inlined (no ``$ref``), which grammar-constrained local decoding needs.
    """

    model_config = ConfigDict(extra="forbid")

    items: list[TodoInput] = Field(
        description='the complete new list, in order, e.g. [{"content": "find the config file", "status": '
        '"in_progress"}, {"content": "fix the port"}]. Status is pending, in_progress, completed or cancelled.'
    )

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Pydantic's schema with every ``$ref`` inlined and the developer docstrings dropped."""
        schema = super().model_json_schema(*args, **kwargs)
        defs = schema.pop("$defs", {})
        schema.pop("description", None)  # this docstring is for developers, not the model

        def inline(node: Any) -> Any:
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str):
                    target = dict(defs[ref.rsplit("/", 1)[-1]])
                    target.pop("description", None)
                    return inline(target)
                return {k: inline(v) for k, v in node.items()}
            if isinstance(node, list):
                return [inline(v) for v in node]
            return node

        result: dict[str, Any] = inline(schema)
        return result


async def _rewrite(items: list[TodoInput], ctx: ToolContext) -> ToolResult:
    """Replace your whole TODO list (your plan for the task). Use it at the start of a multi-step task
    and whenever the plan changes. Keep ids of items you keep; new items get the next free id.
    The list is shown back to you in <agent_status> so you always see what is left.
    """
    now = _now(ctx)
    try:
        todos = _live(ctx).rewrite(items, now)
    except TodoError as e:
        return ToolResult(f"TODO list unchanged: {e}.", is_error=True)
    ctx.put(TODO_RESOURCE, todos)
    return _result("rewrite_todo_list", todos, now)


rewrite_todo_list = FunctionTool(
    name="rewrite_todo_list",
    description=inspect.getdoc(_rewrite) or "",
    args_model=RewriteArgs,
    fn=_rewrite,
    context_param="ctx",
)


@tool
async def update_todo_status(id: int, status: TodoStatus, *, ctx: ToolContext) -> ToolResult:
    """Change the status of one TODO item: mark it in_progress when you start it, completed when done,
    cancelled when it is no longer needed (then add an alternative with rewrite_todo_list).

    Args:
        id: the item's id as shown in the list.
        status: pending, in_progress, completed or cancelled.
    """
    now = _now(ctx)
    try:
        todos = _live(ctx).update(id, status, now)
    except TodoError as e:
        return ToolResult(f"TODO list unchanged: {e}.", is_error=True)
    ctx.put(TODO_RESOURCE, todos)
    return _result("update_todo_status", todos, now)


def todo_tools() -> list[Tool]:
    """``rewrite_todo_list`` and ``update_todo_status`` (the TODO plugin provides them)."""
    return [rewrite_todo_list, update_todo_status]


class _UpdateArgs(BaseModel):
    id: int
    status: TodoStatus


def _apply(todos: TodoList, call: ToolCall, stamp: str) -> TodoList:
    """Re-apply one recorded call; a call that fails now failed then too and changes nothing."""
    try:
        args = call.parsed_arguments()
        if call.name == "rewrite_todo_list":
            return todos.rewrite(RewriteArgs.model_validate(args).items, stamp)
        update = _UpdateArgs.model_validate(args)
        return todos.update(update.id, update.status, stamp)
    except (ValueError, ValidationError, TypeError):  # TodoError and ArgumentsError are ValueErrors
        return todos


def replay_todos(messages: Sequence[Message]) -> TodoList:
    """The TODO list a trajectory ends with: every TODO call whose result reports success, in order."""
    results = {m.tool_call_id: m.content for m in messages if m.role == "tool" and m.tool_call_id}
    todos = TodoList()
    for m in messages:
        for c in m.tool_calls if m.role == "assistant" else ():
            if c.name not in TODO_TOOL_NAMES:
                continue
            stamp = _STAMP.search(results.get(c.id, ""))
            if stamp is not None:
                todos = _apply(todos, c, stamp.group(1))
    return todos
