"""The tools the agent uses to reach the :class:`~kairos.runtime.integrations.tasks.TaskManager` (see that module)."""

from __future__ import annotations

from kairos.errors import KairosError
from kairos.runtime.integrations.tasks import TaskInfo, TaskManager
from kairos.runtime.runtime import runtime_service
from kairos.tools.base import Tool, ToolContext, ToolResult
from kairos.tools.executor import idempotency_key
from kairos.tools.function import tool

_NO_MANAGER = "async tasks are not enabled in this runtime (its components have no TaskManager)"


def _manager(ctx: ToolContext) -> tuple[TaskManager, str] | ToolResult:
    return runtime_service(ctx, TaskManager, _NO_MANAGER)


def _own_task(ctx: ToolContext, task_id: str) -> tuple[TaskManager, TaskInfo] | ToolResult:
    """The manager and one task of the caller's session, or the error result a tool returns."""
    found = _manager(ctx)
    if isinstance(found, ToolResult):
        return found
    manager, session = found
    info = manager.get(task_id.strip())
    if info is None or info.session != session:
        return ToolResult(f"No task {task_id!r} in this session; call task_status() to list them.", is_error=True)
    return manager, info


async def _start(ctx: ToolContext, command: str, title: str, pattern: str) -> ToolResult:
    found = _manager(ctx)
    if isinstance(found, ToolResult):
        return found
    manager, session = found
    if not command.strip():
        return ToolResult("the command is empty; give the shell command to run", is_error=True)
    try:
        await manager.ready()
        info = await manager.start_command(
            session,
            command,
            title=title,
            cwd=ctx.workspace,
            env=ctx.environment(),
            pattern=pattern,
            effect_key=idempotency_key(),
        )
    except (KairosError, TimeoutError) as e:
        return ToolResult(f"could not start the task: {e}", is_error=True)
    watch = f" Lines matching /{pattern}/ arrive as shell.match events." if pattern else ""
    return ToolResult(
        f"Started task {info.id} ({info.title}); it runs in the background.{watch} You will get its result "
        f"as an event when it ends; use task_status('{info.id}') for its progress and cancel_task('{info.id}') "
        "to stop it. Meanwhile carry on with anything else."
    )


@tool(side_effects=True, timeout_s=30)
async def start_command(command: str, title: str = "", *, ctx: ToolContext) -> ToolResult:
    """Start a long shell command (a build, tests, an analysis script) in the background.

    Returns a task id at once; the command's result (exit code, last output) arrives later as a
    task result event. Use this for anything that takes more than a few seconds.

    Args:
        command: the shell command, run in the workspace.
        title: a short name for it (shown in task_status).
    """
    return await _start(ctx, command, title, "")


@tool(side_effects=True, timeout_s=30)
async def monitor_shell(command: str, pattern: str, title: str = "", *, ctx: ToolContext) -> ToolResult:
    """Start a command in the background and get an event whenever a line of its output matches a pattern.

    Instead of polling a log or a server: e.g. ``tail -f app.log`` with ``ERROR|Traceback``. The
    end of the command is reported as a task result event too.

    Args:
        command: the shell command, run in the workspace.
        pattern: a Python regular expression matched against each output line.
        title: a short name for it.
    """
    if not pattern:
        return ToolResult("give a pattern (a regular expression); for no pattern use start_command", is_error=True)
    return await _start(ctx, command, title, pattern)


@tool(read_only=True, volatile=True, timeout_s=15)
def task_status(task_id: str = "", *, ctx: ToolContext) -> ToolResult:
    """Show a background task's state and progress with its last output, or list all tasks of this session.

    Args:
        task_id: the task (``t-…``); empty lists every task of the session.
    """
    found = _manager(ctx)
    if isinstance(found, ToolResult):
        return found
    manager, session = found
    if not task_id.strip():
        tasks = manager.tasks_of(session)
        if not tasks:
            return ToolResult("No tasks in this session.")
        return ToolResult("\n".join(t.line() for t in tasks))
    info = manager.get(task_id.strip())
    if info is None or info.session != session:
        return ToolResult(f"No task {task_id!r} in this session; call task_status() to list them.", is_error=True)
    lines = [info.line()]
    if info.command:
        lines.append(f"command: {info.command}")
    tail = manager.tail(info.id, 600)
    if tail:
        lines.append("last output:\n" + tail)
    return ToolResult("\n".join(lines))


@tool(side_effects=True, timeout_s=30)
async def cancel_task(task_id: str, *, ctx: ToolContext) -> ToolResult:
    """Stop a background task (its whole process group); its result event is then not sent.

    Args:
        task_id: the task (``t-…``).
    """
    found = _own_task(ctx, task_id)
    if isinstance(found, ToolResult):
        return found
    manager, info = found
    if info.status != "running":
        return ToolResult(f"Task {info.line()}; nothing to cancel.")
    try:
        info = await manager.cancel(info.id)
    except KairosError as e:
        return ToolResult(str(e), is_error=True)
    tail = manager.tail(info.id, 300)
    return ToolResult(f"Cancelled task {info.line()}." + (f"\nlast output:\n{tail}" if tail else ""))


@tool(timeout_s=3600)
async def wait_task(task_id: str, timeout_s: float = 300, *, ctx: ToolContext) -> ToolResult:
    """Wait until a background task ends, when there is nothing else to do meanwhile; returns its result.

    Messages that arrive while waiting are handed over together when it ends; an urgent one stops
    the wait at once (the task keeps running).

    Args:
        task_id: the task (``t-…``).
        timeout_s: give up waiting after this many seconds (the task keeps running).
    """
    found = _own_task(ctx, task_id)
    if isinstance(found, ToolResult):
        return found
    manager, info = found
    info, summary, ended = await manager.wait(info.id, max(0.0, min(timeout_s, 3000.0)))
    if not ended:
        return ToolResult(f"Still running after {timeout_s:g} s: {info.line()}. Its result will come as an event.")
    return ToolResult(summary)


def task_tools() -> list[Tool]:
    """start_command, monitor_shell, task_status, cancel_task, wait_task."""
    return [start_command, monitor_shell, task_status, cancel_task, wait_task]
