"""Kill a child process with SIGKILL at a point it announces (crash-safety tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def kill_9_at(code: str, marker: str, *args: str) -> None:
    """Run ``code`` in a child Python with ``args``; SIGKILL it once it prints ``marker`` (it must block there)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == marker, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()
