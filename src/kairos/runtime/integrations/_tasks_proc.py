"""Processes of async tasks: launched detached, watched through ``/proc``, killed by process group.

A task's command runs in a wrapper shell that is *not* the runtime's child (the launcher shell
backgrounds it and exits), so the task outlives a crash of the runtime and is watched the same way
whether this process started it or re-attached to it after a restart. The wrapper writes the
command's exit code to a file when it ends, so even a re-attached task reports its exit code; a
task killed outright has none (then it is unknown, and said so).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

# the wrapper: $1 = the command, $2 = the exit-code file
_WRAP = '{shell} -c "$1"; c=$?; echo "$c" > "$2.tmp" && mv "$2.tmp" "$2"; exit "$c"'
# the launcher: $0 = the command, $1 = the exit-code file, $2 = the log file
_LAUNCH = '{shell} -c {wrap} kairos-task "$0" "$1" </dev/null >"$2" 2>&1 & echo $!'


@dataclass(frozen=True, slots=True)
class Launched:
    """A started task process: its pid, process group and start time (to know it again later)."""

    pid: int
    pgid: int
    start: str


def _shell() -> str:
    return shutil.which("bash") or "/bin/sh"


async def launch(command: str, cwd: Path, env: dict[str, str], exit_file: Path, log_file: Path) -> Launched:
    """Start ``command`` detached in its own session; output to ``log_file``.

    Raises:
        OSError: the launcher could not start or did not report a pid.
    """
    shell = shlex.quote(_shell())
    script = _LAUNCH.format(shell=shell, wrap=shlex.quote(_WRAP.format(shell=shell)))
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        script,
        command,
        str(exit_file),
        str(log_file),
        cwd=str(cwd),
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    out, err = await proc.communicate()
    try:
        pid = int(out.decode().strip())
    except ValueError as e:
        raise OSError(f"the task did not start: {err.decode(errors='replace').strip() or 'no pid'}") from e
    # the launcher was the session and group leader; its background job keeps that group
    return Launched(pid, proc.pid, start_time(pid) or "")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()  # fields from the state on (the name may hold spaces)


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (None: no such process)."""
    fields = _stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def alive(pid: int, start: str) -> bool:
    """Whether ``pid`` runs and is the process that started at ``start`` (a zombie counts as ended)."""
    fields = _stat(pid)
    if fields is None:
        if not Path("/proc/self/stat").exists():  # no /proc: signal 0 is the best we can do
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        return False
    if fields[0] in ("Z", "X"):
        return False
    return not start or (len(fields) > 19 and fields[19] == start)


def owner_id() -> str:
    """This process as a task's owner: ``host/pid/start`` (the start time tells a reused pid apart)."""
    pid = os.getpid()
    return f"{socket.gethostname()}/{pid}/{start_time(pid) or ''}"


def owner_gone(owner: str) -> bool:
    """Whether ``owner`` (:func:`owner_id`) is a process of this host that no longer runs.

    An empty owner (a row from before owners were kept, always this host's) counts as gone; a process
    of another host is never judged here (False), since its pid means nothing on this one.
    """
    if not owner:
        return True
    host, _, rest = owner.partition("/")
    pid, _, start = rest.partition("/")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return not alive(int(pid), start)


def read_exit_code(exit_file: Path) -> int | None:
    """The exit code the wrapper wrote (None: it never wrote one, e.g. it was killed)."""
    try:
        return int(exit_file.read_text().strip())
    except (OSError, ValueError):
        return None


async def kill_group(pgid: int, pid: int, start: str, grace_s: float) -> None:
    """SIGTERM the task's process group, then SIGKILL what is left after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while alive(pid, start) and loop.time() < deadline:  # noqa: ASYNC110 (a process, not an event)
        await asyncio.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def read_from(path: Path, offset: int) -> bytes:
    """Up to 1 MiB of ``path`` from ``offset`` (empty when it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(1 << 20)
    except OSError:
        return b""


def read_tail(path: Path, n: int) -> bytes:
    """The last ``n`` bytes of ``path`` (empty when it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read()
    except OSError:
        return b""


__all__ = [
    "Launched",
    "alive",
    "kill_group",
    "launch",
    "owner_gone",
    "owner_id",
    "read_exit_code",
    "read_from",
    "read_tail",
    "start_time",
]
