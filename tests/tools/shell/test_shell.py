"""The ``bash`` tool: one persistent shell per session."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from kairos.tools.base import ToolContext
from kairos.tools.builtins.files import read_file
from kairos.tools.builtins.shell import MAX_TIMEOUT_S, RESOURCE_KEY, BashSession, bash
from kairos.tools.sandbox import SANDBOX_RESOURCE, Sandbox, SandboxConfig
from tests.support.shell import sh


def session_of(ctx: ToolContext) -> BashSession:
    session = ctx.get(RESOURCE_KEY)
    assert isinstance(session, BashSession)
    return session


async def wait_dead(pid: int) -> None:
    """Wait until process ``pid`` has exited (a zombie counts), on a pidfd rather than by polling."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    exited = loop.create_future()
    loop.add_reader(fd, exited.set_result, None)
    try:
        async with asyncio.timeout(30):  # a safety net against hanging, not a timing assertion
            await exited
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def test_tool_declaration() -> None:
    assert bash.name == "bash"
    assert bash.side_effects
    assert bash.timeout_s > MAX_TIMEOUT_S  # the command's own timeout fires first
    assert list(bash.spec.parameters["properties"]) == ["command", "timeout_s", "network"]
    assert bash.spec.parameters["required"] == ["command"]


async def test_output_and_exit_code(ctx: ToolContext) -> None:
    r = await sh(ctx, "echo out; echo err >&2")
    assert (r.content, r.is_error, r.metadata["exit_code"]) == ("out\nerr", False, 0)
    r = await sh(ctx, "echo partial; (exit 3)")
    assert r.content == "partial\n[exit code 3]"
    assert r.metadata["exit_code"] == 3
    assert (await sh(ctx, "false")).content == "[exit code 1]"
    assert (await sh(ctx, "true")).content == "(no output)"


async def test_output_without_trailing_newline_is_kept_intact(ctx: ToolContext) -> None:
    assert (await sh(ctx, "printf abc")).content == "abc"
    assert (await sh(ctx, "printf 'a\\n\\nb\\n\\n'")).content == "a\n\nb"


async def test_the_shell_keeps_state_between_calls(ctx: ToolContext) -> None:
    await sh(ctx, "export A=1; B=two; greet() { echo hello $1; }")
    assert (await sh(ctx, 'echo "$A $B"; greet you')).content == "1 two\nhello you"


async def test_cd_updates_the_context_cwd(ctx: ToolContext) -> None:
    ws = ctx.workspace
    (ws / "sub" / "note.txt").write_text("in sub\n")
    await sh(ctx, "cd sub")
    assert ctx.cwd == ws / "sub"
    assert (await sh(ctx, "pwd")).content == str(ws / "sub")
    assert (await read_file.call({"path": "note.txt"}, ctx)).content.endswith("in sub")
    await sh(ctx, "cd ..")
    assert ctx.cwd == ws


async def test_the_shell_starts_in_the_context_cwd(tmp_path: Path) -> None:
    (tmp_path / "deep").mkdir()
    ctx = ToolContext(workspace=tmp_path, cwd=tmp_path / "deep")
    try:
        assert (await sh(ctx, "pwd")).content == str(ctx.workspace / "deep")
    finally:
        await ctx.aclose()


async def test_leaving_the_workspace_is_refused_and_the_cwd_kept(ctx: ToolContext) -> None:
    ws = ctx.workspace
    await sh(ctx, "cd sub")
    r = await sh(ctx, "cd / && echo moved")
    assert r.is_error
    assert r.content.startswith("moved\n[error: the shell's current directory must stay inside the workspace")
    assert f"moved back to {ws / 'sub'}" in r.content
    assert ctx.cwd == ws / "sub"
    assert (await sh(ctx, "pwd")).content == str(ws / "sub")


async def test_leaving_through_a_symlink_is_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "out").symlink_to(ctx.workspace.parent)
    r = await sh(ctx, "cd out")
    assert r.is_error and "must stay inside the workspace" in r.content
    assert ctx.cwd == ctx.workspace
    assert (await sh(ctx, "pwd -P")).content == str(ctx.workspace)


async def test_a_deleted_cwd_moves_the_shell_back(ctx: ToolContext) -> None:
    r = await sh(ctx, "mkdir gone && cd gone && rmdir ../gone")
    assert "no longer exists; moved to" in r.content
    assert ctx.cwd == ctx.workspace
    assert (await sh(ctx, "pwd")).content == str(ctx.workspace)


def unconfined(ctx: ToolContext) -> ToolContext:
    """Tests that follow a process by its pid outside the sandbox's PID namespace run without it."""
    ctx.put(SANDBOX_RESOURCE, Sandbox(SandboxConfig(mode="off")))
    return ctx


async def test_timeout_kills_the_process_group_and_the_next_call_works(ctx: ToolContext) -> None:
    unconfined(ctx)
    await sh(ctx, "cd sub; export KEEP=1")
    r = await sh(ctx, "sleep 30 & echo $!; echo started; wait", timeout_s=1)
    assert r.is_error and r.metadata["timed_out"]
    pid_line, started, note = r.content.split("\n", 2)
    assert started == "started"
    assert note.startswith("[timed out after 1 s")
    await wait_dead(int(pid_line))
    r = await sh(ctx, 'echo "after:${KEEP:-reset}"; pwd')
    assert not r.is_error
    assert r.content == f"after:reset\n{ctx.workspace / 'sub'}"  # fresh shell, last good cwd


async def test_timeout_is_capped(ctx: ToolContext) -> None:
    assert (await sh(ctx, "echo ok", timeout_s=10_000)).content == "ok"
    assert (await sh(ctx, "echo ok", timeout_s=0)).content == "ok"  # raised to the minimum


async def test_exit_restarts_a_fresh_shell(ctx: ToolContext) -> None:
    await sh(ctx, "cd sub; export KEEP=1")
    r = await sh(ctx, "echo bye; exit 7")
    assert r.content.startswith("bye\n[the shell exited (code 7); the next bash call starts a fresh shell in")
    assert r.metadata["shell_exit_code"] == 7
    r = await sh(ctx, 'echo "${KEEP:-reset}"; pwd')
    assert r.content == f"reset\n{ctx.workspace / 'sub'}"


async def test_exit_with_a_background_job_holding_the_output(ctx: ToolContext) -> None:
    r = await sh(ctx, "sleep 30 & exit 4", timeout_s=120)
    assert "timed_out" not in r.metadata
    assert r.metadata["shell_exit_code"] == 4
    assert (await sh(ctx, "echo ok")).content == "ok"


async def test_a_shell_killed_from_outside_is_restarted_and_reported(ctx: ToolContext) -> None:
    await sh(ctx, "true")
    proc = session_of(ctx).process
    assert proc is not None
    os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()
    r = await sh(ctx, "echo ok")
    assert r.content.startswith("[the previous shell had exited; started a fresh one in")
    assert r.content.endswith("\nok")


async def test_stdin_is_empty(ctx: ToolContext) -> None:
    assert (await sh(ctx, "cat")).content == "(no output)"
    assert (await sh(ctx, 'read -r x; echo "[$x]"')).content == "[]"


async def test_syntax_errors_do_not_break_the_shell(ctx: ToolContext) -> None:
    r = await sh(ctx, "echo 'unterminated")
    assert "unexpected EOF" in r.content and r.content.endswith("[exit code 2]")
    assert (await sh(ctx, "echo ok")).content == "ok"


async def test_multiline_commands_and_heredocs(ctx: ToolContext) -> None:
    r = await sh(ctx, "cat > f.txt <<'EOF'\nit's $HOME\nEOF\ncat f.txt\nfor i in 1 2; do\n  echo $i\ndone")
    assert r.content == "it's $HOME\n1\n2"


async def test_large_output_is_read_with_bounded_memory(ctx: ToolContext) -> None:
    r = await sh(ctx, "seq 1 400000; echo end")
    assert r.content.startswith("1\n2\n3\n")
    assert "bytes not shown: the output was 2,688,899 bytes (2.7 MB), 400,001 lines; all of it is in" in r.content
    assert r.content.endswith("\n400000\nend")
    assert len(r.content) < 10_000


async def test_nul_in_the_command_is_an_error(ctx: ToolContext) -> None:
    r = await sh(ctx, "echo a\0b")
    assert r.is_error and "NUL" in r.content


async def test_calls_on_one_session_are_serialised(ctx: ToolContext) -> None:
    results = await asyncio.gather(*(sh(ctx, f"x={i}; echo $x") for i in range(5)))
    assert [r.content for r in results] == [str(i) for i in range(5)]


async def test_concurrent_sessions_have_separate_shells(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    c1, c2 = ToolContext(workspace=tmp_path / "a"), ToolContext(workspace=tmp_path / "b")
    try:
        await asyncio.gather(sh(c1, "export WHO=one"), sh(c2, "export WHO=two; mkdir d; cd d"))
        r1, r2 = await asyncio.gather(sh(c1, "echo $WHO; pwd"), sh(c2, "echo $WHO; pwd"))
        assert r1.content == f"one\n{c1.workspace}"
        assert r2.content == f"two\n{c2.workspace / 'd'}"
        p1, p2 = session_of(c1).process, session_of(c2).process
        assert p1 is not None and p2 is not None and p1.pid != p2.pid
    finally:
        await c1.aclose()
        await c2.aclose()


async def test_aclose_kills_the_shell_and_its_background_jobs(tmp_path: Path) -> None:
    ctx = unconfined(ToolContext(workspace=tmp_path))
    r = await sh(ctx, "sleep 60 >/dev/null 2>&1 & echo $!")
    bg = int(r.content)
    proc = session_of(ctx).process
    assert proc is not None
    await ctx.aclose()
    assert RESOURCE_KEY not in ctx.resources
    assert proc.returncode is not None
    await wait_dead(bg)


@pytest.mark.parametrize("yields", [0, 1, 2, 3, 5, 8, 20, 100])
async def test_a_cancelled_call_leaves_a_working_session(ctx: ToolContext, yields: int) -> None:
    await sh(ctx, "cd sub")
    task = asyncio.ensure_future(sh(ctx, "sleep 30"))
    for _ in range(yields):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    r = await sh(ctx, "echo ok; pwd")
    assert r.content.endswith(f"ok\n{ctx.workspace / 'sub'}")
