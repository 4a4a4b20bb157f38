"""Real PostgreSQL and NATS JetStream servers on loopback, for tests and benches.

:class:`PostgresServer` runs Debian's ``initdb`` + ``postgres`` in a new temporary directory on a
free 127.0.0.1 port (trust authentication, superuser ``postgres``, no password; fsync, full-page
writes and synchronous commit off: a test cluster is thrown away, so durability buys nothing).
``initdb`` and ``postgres`` refuse to run as root, so as root both run as the ``postgres`` user
(``nobody`` where there is none), and the directory, made under ``/tmp`` rather than pytest's
``tmp_path`` (private to root), is given to that user. :class:`NatsServer` runs
``nats-server -js`` with its JetStream store in its own temporary directory (as any user).

``make test-deps`` installs both (Debian's ``postgresql`` and ``nats-server``); without them
``start()`` raises :class:`ServerUnavailable`, whose message says what to install (the tests skip,
benches report it). Each server runs in a process group of its own and is killed with it on
:meth:`stop`, on a failed start, at interpreter exit if a caller forgot, and by the kernel when the
process that started it dies without cleaning up (``setpriv --pdeathsig``: a ``timeout pytest`` or a
kill -9 leaves no server behind; the next start removes the directory it left). The pytest
fixtures live in ``tests/support/servers.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from kairos.errors import KairosError

POSTGRES_HINT = "install PostgreSQL: `make test-deps` (apt-get install postgresql)"
NATS_HINT = "install the NATS server: `make test-deps` (apt-get install nats-server)"
START_TIMEOUT_S = 60.0


class ServerUnavailable(KairosError):
    """A server binary is missing or would not start; the message says what to install or read."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_postgres_bin() -> Path | None:
    """The folder holding ``initdb`` and ``postgres``: PATH first, else the newest Debian version."""
    on_path = shutil.which("initdb")
    if on_path:
        folder = Path(on_path).resolve().parent
        if os.access(folder / "postgres", os.X_OK):
            return folder
    versions = glob.glob("/usr/lib/postgresql/*/bin/initdb")

    def version(path: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", Path(path).parent.parent.name))

    for initdb in sorted(versions, key=version, reverse=True):
        folder = Path(initdb).parent
        if os.access(folder / "postgres", os.X_OK):
            return folder
    return None


def find_nats_server() -> str | None:
    """The ``nats-server`` binary (Debian puts it in ``/usr/sbin``, not on every PATH)."""
    return shutil.which("nats-server") or next(
        (p for p in ("/usr/sbin/nats-server", "/usr/local/sbin/nats-server") if os.access(p, os.X_OK)), None
    )


_live: set[_Process] = set()
_live_lock = threading.Lock()


@atexit.register
def _kill_leftovers() -> None:
    """A server nobody stopped (a crashed fixture, a forgotten bench) dies with this interpreter."""
    with _live_lock:
        leftovers = list(_live)
    for proc in leftovers:
        proc.kill()


@dataclass(eq=False)
class _Process:
    """A server process in its own process group, killed with the group."""

    popen: subprocess.Popen[bytes]

    def __post_init__(self) -> None:
        with _live_lock:
            _live.add(self)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int, grace_s: float = 10.0) -> None:
        """Send ``sig`` to the leader, then kill the whole group after ``grace_s`` (or at once if it exited)."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(sig)
            try:
                self.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # also any child the leader left behind
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)
        with _live_lock:
            _live.discard(self)


def _guarded(args: list[str]) -> list[str]:
    """``args`` run under util-linux's ``setpriv --pdeathsig KILL`` (where it is installed).

    The kernel then kills the server when the process that started it dies, even by SIGKILL or an
    unhandled SIGTERM (``timeout pytest``), where atexit never runs. The signal follows the starting
    *thread*: start servers from one that outlives them (the main thread).
    """
    setpriv = shutil.which("setpriv") or ("/usr/bin/setpriv" if os.access("/usr/bin/setpriv", os.X_OK) else None)
    return [setpriv, "--pdeathsig", "KILL", "--", *args] if setpriv else args


def _new_root(kind: str) -> Path:
    """A new temporary directory for a server, after removing those whose owning process died uncleanly."""
    for old in Path(tempfile.gettempdir()).glob(f"kairos-{kind}-*"):
        try:
            owner = int((old / "owner.pid").read_text())
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except (OSError, ValueError):
            pass  # another user's, or not ours
    root = Path(tempfile.mkdtemp(prefix=f"kairos-{kind}-"))
    (root / "owner.pid").write_text(str(os.getpid()))
    return root


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return "(no log)"


class _LoopbackServer:
    """What both servers share: their process, waiting until they are ready, their log, stopping them."""

    NAME: ClassVar[str]
    LOG: ClassVar[str]
    """The log file's name in :attr:`root`."""
    HALT_SIGNAL: ClassVar[int]
    """The signal of a fast shutdown that keeps the server's data."""
    root: Path
    port: int
    _proc: _Process | None

    @property
    def pid(self) -> int | None:
        """The server's process id (also its process group's), None when it is not running."""
        return self._proc.popen.pid if self._proc is not None and self._proc.alive() else None

    def _wait_ready(self, ready: Callable[[], bool], poll_s: float) -> None:
        """Return once ``ready()``; stop the server and raise when it exits or :data:`START_TIMEOUT_S` passes."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            if self._proc is None or not self._proc.alive() or time.monotonic() > deadline:
                self.halt()
                raise ServerUnavailable(f"{self.NAME} did not start on port {self.port}:\n{self.log()}")
            time.sleep(poll_s)

    def log(self) -> str:
        """The end of the server's log (for error messages)."""
        return _tail(self.root / self.LOG)

    def halt(self) -> None:
        """Stop the server, keeping its data (a server going down)."""
        if self._proc is not None:
            self._proc.stop(self.HALT_SIGNAL)
            self._proc = None

    def stop(self) -> None:
        """Stop the server and delete its directory."""
        self.halt()
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class PostgresServer(_LoopbackServer):
    """One private PostgreSQL cluster; :attr:`url` connects as the superuser to the ``postgres`` database."""

    NAME: ClassVar[str] = "postgres"
    LOG: ClassVar[str] = "postgres.log"
    HALT_SIGNAL: ClassVar[int] = signal.SIGINT  # PostgreSQL's fast shutdown
    root: Path
    port: int
    bin_dir: Path
    user: str | None
    """The account the server runs as (None: this process's own)."""
    startup_s: float = 0.0
    """Seconds from ``initdb`` to ready (measured by :meth:`start`)."""
    settings: dict[str, str] = field(default_factory=dict)
    """Server settings that override the defaults of :meth:`run` (``shared_buffers`` for a bench)."""
    _proc: _Process | None = field(default=None, repr=False)

    @property
    def data(self) -> Path:
        """The cluster's data directory."""
        return self.root / "data"

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:<port>/postgres`` (trust authentication: no password)."""
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        """The URL of another database on this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    @classmethod
    def start(cls, *, bin_dir: Path | None = None, settings: dict[str, str] | None = None) -> PostgresServer:
        """``initdb`` a new cluster in a temporary directory and start ``postgres`` on a free port.

        Args:
            bin_dir: the folder with ``initdb`` and ``postgres`` (default: :func:`find_postgres_bin`; a
                bench passes another build's, such as the one bundled in ``pgserver``).
            settings: server settings overriding the defaults (see :meth:`run`).

        Raises:
            ServerUnavailable: PostgreSQL is not installed, or it did not start (the message has its log).
        """
        bin_dir = bin_dir or find_postgres_bin()
        if bin_dir is None:
            raise ServerUnavailable(f"PostgreSQL's initdb/postgres were not found; {POSTGRES_HINT}")
        began = time.monotonic()
        root = _new_root("postgres")
        user = None
        if os.geteuid() == 0:  # initdb and postgres refuse uid 0
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                account = pwd.getpwnam("nobody")
            user = account.pw_name
            os.chown(root, account.pw_uid, account.pw_gid)
        self = cls(root, free_port(), bin_dir, user, settings=dict(settings or {}))
        try:
            self._initdb()
            self.run()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - began
        return self

    def _initdb(self) -> None:
        log = self.root / "initdb.log"
        with open(log, "wb") as out:
            done = subprocess.run(
                [
                    str(self.bin_dir / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                user=self.user,
                group=None if self.user is None else pwd.getpwnam(self.user).pw_gid,
                extra_groups=None if self.user is None else [],
                cwd=self.root,
                timeout=START_TIMEOUT_S,
                check=False,
            )
        if done.returncode != 0:
            raise ServerUnavailable(f"initdb failed (exit {done.returncode}):\n{_tail(log)}")

    def run(self) -> None:
        """Start ``postgres`` (again, after :meth:`halt`) and wait until it accepts connections.

        Raises:
            ServerUnavailable: it exited or was not ready within :data:`START_TIMEOUT_S` (with its log).
        """
        log = self.root / "postgres.log"
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.root),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
            "shared_buffers": "64MB",
            "dynamic_shared_memory_type": "posix",
            "log_min_messages": "warning",
            **self.settings,
        }
        args = [str(self.bin_dir / "postgres"), "-D", str(self.data)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                _guarded(args),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                user=self.user,
                group=None if self.user is None else pwd.getpwnam(self.user).pw_gid,
                extra_groups=None if self.user is None else [],
                cwd=self.root,
                start_new_session=True,
            )
        self._proc = _Process(popen)
        pid_file = self.data / "postmaster.pid"

        def ready() -> bool:  # PostgreSQL writes "ready" as postmaster.pid's status line once it accepts connections
            with contextlib.suppress(OSError):
                lines = pid_file.read_text().splitlines()
                return len(lines) >= 8 and lines[7].strip() == "ready"
            return False

        self._wait_ready(ready, 0.02)


@dataclass
class NatsServer(_LoopbackServer):
    """One private ``nats-server -js``; :attr:`url` is ``nats://127.0.0.1:<port>``."""

    NAME: ClassVar[str] = "nats-server"
    LOG: ClassVar[str] = "nats.log"
    HALT_SIGNAL: ClassVar[int] = signal.SIGTERM
    root: Path
    port: int
    binary: str
    jetstream: bool = True
    """Run with ``-js`` (False: a core NATS server, to test what a client says about one)."""
    startup_s: float = 0.0
    """Seconds from launch to ready (measured by :meth:`start`)."""
    _proc: _Process | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:<port>``."""
        return f"nats://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, *, jetstream: bool = True) -> NatsServer:
        """Start a JetStream-enabled server on a free port with its store in a temporary directory.

        Raises:
            ServerUnavailable: nats-server is not installed, or it did not start (the message has its log).
        """
        binary = find_nats_server()
        if binary is None:
            raise ServerUnavailable(f"nats-server was not found; {NATS_HINT}")
        began = time.monotonic()
        self = cls(_new_root("nats"), free_port(), binary, jetstream)
        try:
            self.run()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - began
        return self

    def run(self) -> None:
        """Start the server (again, after :meth:`halt`, on the same port and store) and wait until it is ready.

        Raises:
            ServerUnavailable: it exited or was not ready within :data:`START_TIMEOUT_S` (with its log).
        """
        log = self.root / "nats.log"
        log.write_bytes(b"")
        args = [self.binary, "-a", "127.0.0.1", "-p", str(self.port), "-l", str(log)]
        if self.jetstream:
            args += ["-js", "-sd", str(self.root / "store")]
        popen = subprocess.Popen(
            _guarded(args),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._proc = _Process(popen)
        self._wait_ready(lambda: "Server is ready" in _tail(log, 100_000), 0.01)


__all__ = [
    "NATS_HINT",
    "POSTGRES_HINT",
    "NatsServer",
    "PostgresServer",
    "ServerUnavailable",
    "find_nats_server",
    "find_postgres_bin",
    "free_port",
]
