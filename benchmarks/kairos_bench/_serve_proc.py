"""The real ``kairos serve`` as a subprocess: start on a free port, kill -9, stop, read its memory.

The process gets an environment built from scratch: ``PYTHONPATH`` at the ``kairos`` package this
bench imports (a worktree measures its own code), its own user config dir (the bench's
``config.toml``: side-effecting tools run without asking, as on a server with no one to ask), no
endpoint or key variables from the caller's shell, and the webhook secret. Output goes to a log
file, where the URL line is read from (``--port 0``: the server picks the port).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

import kairos
from kairos.server.auth import WEBHOOK_SECRET_ENV, sign

SRC = Path(kairos.__file__).resolve().parents[1]
_URL = re.compile(r"kairos serving .* on (http://127\.0\.0\.1:\d+)")
_DROPPED = ("KAIROS_", "OPENAI_", "ANTHROPIC_", "PYTHON")
LAUNCH = "import sys; from kairos.cli import main; sys.argv[0] = 'kairos'; main()"
"""What the child runs (``python -c LAUNCH serve …``): the ``kairos`` command of the imported package."""
USER_CONFIG = "[defences]\nconfirm_side_effects = false\n"
"""The bench's user config: a server has no terminal to ask for approvals."""


class ServeProcess:
    """One ``kairos serve`` process at a time over ``workspace`` (restartable).

    Args:
        workspace: the directory served (its ``.kairos/`` holds the state that must survive kills).
        base_url: the OpenAI-compatible model endpoint.
        home: a folder for the user config and the logs.
        secret: the webhook HMAC secret.
        extra: further ``kairos serve`` arguments (``--store URL --bus URL``: the scale-out backends).
    """

    def __init__(self, workspace: Path, base_url: str, home: Path, secret: str, extra: Sequence[str] = ()) -> None:
        self.workspace = workspace
        self.base_url = base_url
        self.home = home
        self.secret = secret
        self.extra = list(extra)
        self.config_dir = home / "config"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        (self.config_dir / "config.toml").write_text(USER_CONFIG, encoding="utf-8")
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.starts = 0

    def env(self) -> dict[str, str]:
        """The child's environment (see the module docstring)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED)}
        env.update(
            PYTHONPATH=str(SRC),
            PYTHONUNBUFFERED="1",
            KAIROS_CONFIG_DIR=str(self.config_dir),
            COLUMNS="400",
            NO_COLOR="1",
        )
        env[WEBHOOK_SECRET_ENV] = self.secret
        return env

    def start(self, timeout_s: float = 120.0) -> str:
        """Start it and wait until ``/v1/health`` answers; its URL.

        Raises:
            RuntimeError: it exited or did not come up within ``timeout_s`` (with its log's tail).
        """
        self.starts += 1
        log = self.home / f"serve-{self.starts}.log"
        argv = [
            sys.executable,
            "-c",
            LAUNCH,
            "serve",
            "--port",
            "0",
            "--workspace",
            str(self.workspace),
            "--model",
            "openai:bench",
            "--base-url",
            self.base_url,
            "--grace",
            "5",
            *self.extra,
        ]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env(), cwd=self.home)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kairos serve exited with {self.proc.returncode}: {self.log_tail(log)}")
            found = _URL.search(log.read_text(encoding="utf-8", errors="replace"))
            if found:
                self.url = found.group(1)
                try:
                    if httpx.get(self.url + "/v1/health", timeout=5).status_code == 200:
                        return self.url
                except httpx.HTTPError:
                    pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"kairos serve did not start within {timeout_s:g} s: {self.log_tail(log)}")

    @staticmethod
    def log_tail(log: Path) -> str:
        """The last lines of a log (for errors)."""
        return log.read_text(encoding="utf-8", errors="replace")[-2000:]

    def kill(self) -> None:
        """SIGKILL and reap (no chance to save anything: what is on disk is what survives)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (the drain) and wait; the exit code (SIGKILL after ``timeout_s``)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.proc.returncode)

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the running server has used (0 when it is not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float:
        """Resident memory of the running server, MiB (0 when it is not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0


async def post_webhook(client: httpx.AsyncClient, url: str, secret: str, record: Mapping[str, object]) -> int:
    """POST a signed event to ``url/v1/events``; the HTTP status (0: no answer, e.g. the server died)."""
    body = json.dumps(dict(record)).encode()
    headers = {"Content-Type": "application/json", **sign(secret, body)}
    try:
        response = await client.post(url + "/v1/events", content=body, headers=headers)
    except httpx.HTTPError:
        return 0
    return response.status_code


__all__ = ["SRC", "USER_CONFIG", "ServeProcess", "post_webhook"]
