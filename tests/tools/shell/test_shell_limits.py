"""The bash tool's limits: no secrets in its environment, long outputs spilled whole, no orphans."""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from kairos.tools.base import ToolContext
from kairos.tools.builtins import _bash_output
from kairos.tools.builtins.files import read_file
from kairos.tools.builtins.shell import BashSession
from tests.support.shell import sh

# --- environment ----------------------------------------------------------------------------


async def test_the_shell_gets_no_secrets(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-1234")
    monkeypatch.setenv("FOO_TOKEN", "tok-5678")
    monkeypatch.setenv("KAIROS_TEST_PLAIN", "visible")
    monkeypatch.setenv("HOME", str(ctx.workspace))
    r = await sh(ctx, "env")
    names = {line.partition("=")[0] for line in r.content.splitlines()}
    assert "OPENAI_API_KEY" not in names and "FOO_TOKEN" not in names
    assert "sk-test-1234" not in r.content and "tok-5678" not in r.content
    assert {"PATH", "HOME", "KAIROS_TEST_PLAIN"} <= names


async def test_a_session_without_a_context_drops_secrets_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-9")
    session = BashSession(tmp_path)
    try:
        out = (await session.run('echo "[${ANTHROPIC_API_KEY:-unset}] ${PATH:+path}"')).output
    finally:
        await session.aclose()
    assert out == "[unset] path\n"


# --- long outputs ---------------------------------------------------------------------------


def sha256_of(p: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with p.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


async def test_a_50_mb_output_is_reported_whole_and_saved(ctx: ToolContext) -> None:
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        r = await sh(ctx, "yes x | head -c 50000000", timeout_s=300)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not r.is_error
    assert r.metadata["total_bytes"] == 50_000_000
    assert "the output was 50,000,000 bytes (50.0 MB), 25,000,000 lines; all of it is in .kairos/spill/bash-" in (
        r.content
    )
    assert r.content.startswith("x\nx\n") and r.content.endswith("x\nx")
    assert len(r.content) < 10_000  # fits the harness's cap, so the note is never cut off
    full = ctx.workspace / r.metadata["full_output"]
    assert r.metadata["full_output"].startswith(".kairos/spill/bash-") and full.is_file()
    expected = hashlib.sha256(b"x\n" * 25_000_000).hexdigest()
    assert sha256_of(full) == (50_000_000, expected)
    assert peak - before < 16_000_000  # a few copies of the 1 MB buffer, never the 50 MB
    assert (ctx.workspace / ".kairos" / "spill" / ".gitignore").read_text() == "*\n"


async def test_the_note_says_how_to_read_on_from_the_current_directory(ctx: ToolContext) -> None:
    r = await sh(ctx, "cd sub && seq 1 300000")
    rel = r.metadata["full_output"]
    assert rel.startswith(".kairos/spill/")  # metadata: relative to the workspace
    assert f"read_file(path='../{rel}', offset=" in r.content  # text: what read_file takes from sub/
    offset = int(r.content.split(", offset=")[1].split(")")[0])
    shown_head = r.content.split("\n[...")[0].splitlines()
    assert offset == len(shown_head) + 1
    read = await read_file.call({"path": f"../{rel}", "offset": offset, "limit": 2}, ctx)
    assert read.content.splitlines()[1:] == [f"{offset}\t{offset}", f"{offset + 1}\t{offset + 1}"]


async def test_a_medium_output_is_saved_when_it_does_not_fit(ctx: ToolContext) -> None:
    r = await sh(ctx, "seq 1 20000; echo oops >&2; (exit 3)")
    assert r.metadata["total_bytes"] == len(b"".join(b"%d\n" % i for i in range(1, 20001))) + 5
    full = (ctx.workspace / r.metadata["full_output"]).read_bytes()
    assert full == b"".join(b"%d\n" % i for i in range(1, 20001)) + b"oops\n"
    assert r.content.endswith("20000\noops\n[exit code 3]")


async def test_a_short_output_is_not_saved(ctx: ToolContext) -> None:
    r = await sh(ctx, "seq 1 1000")
    assert r.metadata["total_bytes"] == len(r.content) + 1
    assert "full_output" not in r.metadata
    assert not (ctx.workspace / ".kairos" / "spill").exists()


async def test_the_spill_file_stops_at_its_cap_and_says_so(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bash_output, "SPILL_MAX_BYTES", 1_000_000)
    r = await sh(ctx, "yes abc | head -c 3000000")
    assert r.metadata["total_bytes"] == 3_000_000
    assert r.metadata["full_output_capped"] is True
    assert "the output was 3,000,000 bytes (3.0 MB)" in r.content
    assert "the first 1,000,000 bytes of it (1.0 MB, where saving stopped) are in .kairos/spill/" in r.content
    assert (ctx.workspace / r.metadata["full_output"]).read_bytes() == (b"abc\n" * 250_000)


async def test_a_spill_folder_leading_out_of_the_workspace_is_not_used(ctx: ToolContext, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ctx.workspace / ".kairos").mkdir()
    (ctx.workspace / ".kairos" / "spill").symlink_to(outside)
    r = await sh(ctx, "seq 1 20000")
    assert "it could not be saved to a file" in r.content and "leads outside the workspace" in r.content
    assert "full_output" not in r.metadata and r.metadata["total_bytes"] > 100_000
    assert list(outside.iterdir()) == []


# --- the shell never outlives kairos --------------------------------------------------------

SCRIPT = """
import asyncio, sys
from pathlib import Path
from kairos.tools.builtins.shell import BashSession

KEEP = []

async def main() -> None:
    session = BashSession(Path(sys.argv[1]))
    KEEP.append(session)  # alive until the interpreter exits: only the exit-time cleanup can act
    out = await session.run("echo $$; sleep 300 >/dev/null 2>&1 & echo $!")
    print(out.output.replace("\\n", " ").strip(), flush=True)
    if sys.argv[2] == "hang":  # bash busy in a foreground command: it does not see its stdin close
        await session.run(f"touch {sys.argv[1]}/busy; sleep 300", timeout_s=600)

asyncio.run(main())
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` is still running (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_dead(pid: int) -> bool:
    """Wait (bounded) until ``pid`` has exited; True if it did."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], 30)  # a safety net against hanging, not a timing assertion
        return bool(ready) or not alive(pid)
    finally:
        os.close(fd)


@contextlib.contextmanager
def kairos_process(tmp_path: Path, mode: str) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """A python process running a BashSession; yields it with bash's pid and a background job's pid."""
    script = tmp_path / "kairos_child.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), mode], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    bash_pid = job_pid = 0
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the child printed nothing"
        bash_pid, job_pid = (int(x) for x in proc.stdout.readline().split())
        yield proc, bash_pid, job_pid
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if bash_pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(bash_pid, signal.SIGKILL)  # never leave the test's own processes behind


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_bash_dies_when_kairos_is_killed(tmp_path: Path) -> None:
    with kairos_process(tmp_path, "hang") as (proc, bash_pid, _):
        for _ in range(600):  # bounded wait for the foreground command to start
            if (tmp_path / "busy").exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert (tmp_path / "busy").exists() and alive(bash_pid)
        proc.send_signal(signal.SIGKILL)  # no atexit, no finalizers: only the kernel can act
        proc.wait()
        assert wait_dead(bash_pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and pidfd")
def test_interpreter_exit_kills_the_shell_and_its_background_jobs(tmp_path: Path) -> None:
    with kairos_process(tmp_path, "exit") as (proc, bash_pid, job_pid):
        assert proc.wait(timeout=60) == 0
        assert wait_dead(job_pid)
        assert wait_dead(bash_pid)
