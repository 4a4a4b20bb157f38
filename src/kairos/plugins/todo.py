"""The TODO-tools plugin (book ch2 Exp 2-9, technique 3).

``rewrite_todo_list`` and ``update_todo_status``, with the list rebuilt from the trajectory when
a session opens and shown in the status message (by whichever status provider the agent has).
"""

from __future__ import annotations

from collections.abc import Sequence

from kairos.agent.plugin import Plugin, RunContext
from kairos.plugins.status_bar.tally import clean
from kairos.tools.base import Tool, ToolSource
from kairos.tools.builtins.todo import TODO_RESOURCE, TodoList, replay_todos, todo_tools


def todo_list(ctx: RunContext) -> TodoList:
    """The session's live list, seeded from its trajectory the first time (e.g. after a resume)."""
    return ctx.session.tool_context.get_or_put(TODO_RESOURCE, lambda: replay_todos(ctx.session.message_list()))


class TodoTools(Plugin):
    """The two TODO tools and their status lines."""

    stage = "annotate"

    def tools(self) -> Sequence[Tool | ToolSource]:
        """``rewrite_todo_list`` and ``update_todo_status``."""
        return todo_tools()

    async def open(self, ctx: RunContext) -> None:
        """Rebuild the list from the trajectory (a resumed session continues with the list it had)."""
        todo_list(ctx)

    def status_lines(self, ctx: RunContext) -> Sequence[str]:
        """``TODO (n items: …):`` and one indented line per item; nothing while the list is empty."""
        todos = todo_list(ctx)
        if not todos.items:
            return ()
        return [f"TODO ({todos.summary()}):", *(f"  [{i.id}] {i.status}: {clean(i.content, 160)}" for i in todos.items)]


__all__ = ["TodoTools", "todo_list"]
