"""Process helpers of the shell: die with kairos (parent-death signal, a watchdog), kill a group."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_PR_SET_PDEATHSIG = 1
_WATCHDOG = 'read -r _ || kill -s KILL -- "-$1" 2>/dev/null'
"""The watchdog's script: its stdin reaches end of file when kairos is gone, then it kills the group ``$1``."""


@functools.cache
def _prctl() -> Any:
    """The C library's ``prctl`` on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


def die_with_kairos() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when kairos dies (Linux); None elsewhere.

    The kernel sends it when the *thread* that started the child exits: the event loop's thread,
    which lives as long as the session's shell is of any use. Kept minimal, as code between fork
    and exec must be.
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # kairos died before the request took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass(slots=True)
class Watchdog:
    """A ``sh`` that kills the shell's process group once kairos is gone, however it went.

    ``PR_SET_PDEATHSIG`` takes bash down with kairos, but not what bash started: after a
    ``kill -9`` a ``sleep 60`` or a dev server would run on, orphaned. The watchdog blocks on a
    pipe whose only writer is kairos (the write end is close-on-exec, so no child inherits it);
    the kernel closes it however kairos ends, the read sees end of file and the group is killed.
    """

    proc: asyncio.subprocess.Process
    write_fd: int

    @classmethod
    async def start(cls, pgid: int) -> Watchdog | None:
        """Watch ``pgid``; None if no watchdog could be started (the shell still works without)."""
        read_fd, write_fd = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                "sh", "-c", _WATCHDOG, "kairos-shell-watchdog", str(pgid),
                stdin=read_fd, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C or hangup of the terminal must not take it down first
            )  # fmt: skip
        except BaseException as e:
            os.close(write_fd)
            if isinstance(e, OSError):  # no sh: the shell still works, unwatched
                return None
            raise
        finally:
            os.close(read_fd)
        return cls(proc, write_fd)

    async def dismiss(self) -> None:
        """The group is dead already: stop watching without killing anything (its pid may be reused)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        os.close(self.write_fd)
        await self.proc.wait()
