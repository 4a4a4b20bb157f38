"""The ``kairos`` command as a real subprocess, running this checkout's code.

Process-level behaviour (signals, exit codes, two processes on one session, what reaches the
terminal) can only be seen from outside the process. Each process gets an environment built
from scratch: ``PYTHONPATH`` pointing at the ``kairos`` package the tests import (so a worktree
tests its own code), an isolated user config dir, no endpoint or key variables from the
developer's shell, unbuffered output and a wide terminal (so messages are not wrapped).
Output goes to files, not pipes: a child never blocks on a full pipe, and a test can poll what
was printed so far.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import kairos

SRC = Path(kairos.__file__).resolve().parents[1]
"""The folder holding the ``kairos`` package under test."""
WAIT_S = 60.0
"""Upper bound of every wait on a subprocess: generous for a slow CI machine, never reached when it works."""
_DROPPED = ("KAIROS_", "OPENAI_", "ANTHROPIC_", "PYTHON")


def kairos_env(config_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a kairos subprocess (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED)}
    env.update(
        PYTHONPATH=str(SRC),
        PYTHONUNBUFFERED="1",
        KAIROS_CONFIG_DIR=str(config_dir),
        COLUMNS="400",
        NO_COLOR="1",
        TERM="dumb",
    )
    env.update(extra)
    return env


def kairos_argv(*args: str) -> list[str]:
    """The command line of ``kairos ARGS`` on the interpreter running the tests."""
    return [sys.executable, "-c", "from kairos.__main__ import main; main()", *args]


class KairosProcess:
    """One ``kairos`` subprocess; use as a context manager, which kills it if it is still running.

    Args:
        args: the kairos arguments, e.g. ``("run", "-w", ws, "task")``.
        config_dir: the user config dir it gets (``KAIROS_CONFIG_DIR``).
        logs: a folder for its stdout and stderr files.
        cwd: its working directory.
        stdin: what it reads (default: nothing, ``/dev/null``).
        env: extra environment variables.
    """

    _count = 0

    def __init__(
        self,
        *args: str | Path,
        config_dir: Path,
        logs: Path,
        cwd: Path | None = None,
        stdin: int | None = subprocess.DEVNULL,
        env: dict[str, str] | None = None,
    ) -> None:
        KairosProcess._count += 1
        logs.mkdir(parents=True, exist_ok=True)
        self.stdout_path = logs / f"kairos-{KairosProcess._count}.out"
        self.stderr_path = logs / f"kairos-{KairosProcess._count}.err"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                kairos_argv(*map(str, args)),
                stdin=stdin,
                stdout=out,
                stderr=err,
                cwd=cwd,
                env=kairos_env(config_dir, **(env or {})),
            )

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    @property
    def stdout(self) -> str:
        """What it printed on stdout so far."""
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        """What it printed on stderr so far."""
        return self.stderr_path.read_text(errors="replace")

    def send(self, sig: int) -> None:
        """Send a signal."""
        self.proc.send_signal(sig)

    def wait(self, timeout_s: float = WAIT_S) -> int:
        """Its exit code (negative: the signal that killed it).

        Raises:
            AssertionError: it did not exit within ``timeout_s`` (it is killed then).
        """
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"kairos did not exit within {timeout_s:g} s\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
            ) from None

    def wait_until(self, what: str, ready: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        """Poll ``ready`` until it is true.

        Raises:
            AssertionError: it never was, or the process exited first.
        """
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"kairos exited ({self.proc.returncode}) before {what}\n--- stdout\n{self.stdout}\n"
                    f"--- stderr\n{self.stderr}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out waiting for {what}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
                )
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL it (if it still runs) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT_S)

    def __enter__(self) -> KairosProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.kill()


def run_kairos(
    *args: str | Path, config_dir: Path, logs: Path, timeout_s: float = WAIT_S, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run ``kairos ARGS`` to its end; its exit code, stdout and stderr."""
    with KairosProcess(*args, config_dir=config_dir, logs=logs, env=env) as p:
        code = p.wait(timeout_s)
        return code, p.stdout, p.stderr


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) no longer runs anything
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether the process ``pid`` is gone within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def kill_quietly(pid: int) -> None:
    """SIGKILL ``pid`` if it still exists (cleanup of what a test may have left)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
