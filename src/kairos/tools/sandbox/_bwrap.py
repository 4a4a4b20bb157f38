"""Building the bubblewrap command line, the limits, the probe, and the per-call grants."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import os
import resource
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from kairos.paths import user_config_dir
from kairos.tools.base import Resource, ToolContext

SandboxMode: TypeAlias = Literal["bwrap", "ask", "off"]
NetworkPolicy: TypeAlias = Literal["ask", "allow", "deny"]
SANDBOX_RESOURCE: Resource[Sandbox] = Resource("kairos.sandbox")
"""The session's :class:`Sandbox`."""
Grant: TypeAlias = Literal["network", "unconfined"]

HIDDEN_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers", "/etc/security/opasswd")
"""Files replaced by an empty one inside the sandbox (they hold password hashes)."""
HOME_SECRETS = (".ssh", ".aws", ".gnupg", ".netrc", ".docker", ".kube", ".config/gcloud", ".git-credentials")
"""Folders and files of the home directory hidden even when the workspace itself lies in it."""
PRIVATE_TMP = ("/tmp", "/var/tmp")
"""Replaced by an empty tmpfs inside the sandbox (other programs' files and sockets live there)."""
_PROBE_TIMEOUT_S = 15.0
_INSTALL = (
    "Install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install bubblewrap; "
    '`make test-deps` does it as root), or opt out in YOUR user config ({config}): [sandbox] mode = "ask" '
    '(asks once per session before running commands unconfined) or mode = "off" (runs them unconfined).'
)


class SandboxConfig(BaseModel):
    """``[sandbox]`` in kairos.toml: how ``bash`` and ``python`` are confined.

    An untrusted workspace's kairos.toml can only make this stricter (see :mod:`kairos.security.trust`).
    """

    model_config = ConfigDict(extra="forbid")

    mode: SandboxMode = Field(
        "bwrap", description="bwrap: confine, refuse when impossible | ask: unconfined after approval | off"
    )
    bwrap: str = Field("bwrap", description="the bubblewrap program (a name on PATH or a path)")
    network: NetworkPolicy = Field(
        "ask", description="a call that asks for network: ask the approver | allow | deny (default: no network)"
    )
    cpu_s: int = Field(600, ge=1, description="CPU seconds per process")
    memory_mb: int = Field(4096, ge=64, description="address space per process, MiB")
    max_processes: int = Field(256, ge=8, description="processes at once in one sandbox")
    max_file_mb: int = Field(2048, ge=1, description="largest file a process may write, MiB")
    read_only_paths: list[str] = Field(
        default_factory=list, description="more host paths to show read-only (inside a hidden home, say)"
    )
    writable_paths: list[str] = Field(default_factory=list, description="more host paths to show read-write")


class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot run here; the message says why and what to do."""


_GRANTS: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("kairos_sandbox_grants", default=frozenset())


def granted(what: Grant) -> bool:
    """Whether the running tool call was granted ``what`` (by the permission check before it)."""
    return what in _GRANTS.get()


def grant(*what: Grant) -> contextvars.Token[frozenset[str]]:
    """Grant the current call (this task's context) ``what``; the decision point calls it after approval."""
    return _GRANTS.set(_GRANTS.get() | frozenset(what))


@contextlib.contextmanager
def call_scope() -> Iterator[None]:
    """No grants inside (the executor runs each call in one, so a grant never outlives its call)."""
    token = _GRANTS.set(frozenset())
    try:
        yield
    finally:
        _GRANTS.reset(token)


@contextlib.contextmanager
def granting(*what: Grant) -> Iterator[None]:
    """``grant`` for a block (tests, benches, direct callers)."""
    token = grant(*what)
    try:
        yield
    finally:
        _GRANTS.reset(token)


_counter = itertools.count()


class _PidsCgroup:
    """A pids cgroup (v1 or v2) capping the sandbox's process count, where kairos may create one.

    ``RLIMIT_NPROC`` does not bind root (the kernel exempts uid 0), so as root this is what stops a
    fork bomb. Best effort: ``path`` is None when no writable pids hierarchy exists.
    """

    def __init__(self, limit: int) -> None:
        self.path: Path | None = None
        name = f"kairos-{os.getpid()}-{next(_counter)}"
        v1, v2 = Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")
        for root in [r for r in (v1, v2) if (r / "cgroup.procs").exists() and (r == v1 or _v2_pids(r))]:
            try:
                (root / name).mkdir()
                (root / name / "pids.max").write_text(str(limit))
            except OSError:
                with contextlib.suppress(OSError):
                    (root / name).rmdir()
                continue
            self.path = root / name
            return

    def remove(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.rmdir()
            self.path = None


def _v2_pids(root: Path) -> bool:
    try:
        return "pids" in (root / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


class Sandbox:
    """One session's sandbox settings and state; :meth:`command` wraps an argv in bubblewrap.

    Args:
        config: ``[sandbox]``; default :class:`SandboxConfig`'s defaults.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._problem: str | None = None
        self._probed = False
        self._probe_lock = asyncio.Lock()
        self.unconfined_approved = False
        """``mode = "ask"`` and no bubblewrap: the approver allowed unconfined commands for this session."""
        self.shown: tuple[str, ...] = ()
        """Folders inside a hidden place (home, /tmp) shown read-only to this session's commands (see :meth:`show`)."""

    def show(self, folder: Path) -> bool:
        """Show ``folder`` read-only to commands started from now on (a loaded skill's scripts, say).

        Only needed, and only done, for a folder strictly inside a hidden place (a home, /tmp) that holds
        none of the home's secrets and none of kairos's user configuration. Returns whether the set
        of shown folders changed (a persistent shell started before then is restarted by the ``bash``
        tool at its next command, since mounts are fixed when bubblewrap starts).
        """
        real = os.path.realpath(folder)
        if real in self.shown or not os.path.isdir(real):
            return False
        if not any(_inside(real, root) and real != root for root in _hidden_roots()):
            return False
        private = [os.path.join(h, s) for h in _homes() for s in HOME_SECRETS] + [os.path.realpath(user_config_dir())]
        if any(_inside(p, real) for p in private):
            return False
        self.shown = tuple(sorted({*self.shown, real}))
        return True

    @property
    def program(self) -> str | None:
        """The bubblewrap executable, or None when it cannot be found."""
        prog = self.config.bwrap
        return shutil.which(prog) if os.sep not in prog else (prog if os.access(prog, os.X_OK) else None)

    async def problem(self) -> str | None:
        """Why bubblewrap cannot confine commands here (None: it can). Probed once, with the real flags."""
        if self.config.mode == "off":
            return None
        async with self._probe_lock:
            if not self._probed:
                self._problem = await self._probe()
                self._probed = True
        return self._problem

    async def _probe(self) -> str | None:
        prog = self.program
        if prog is None:
            return f"bubblewrap ({self.config.bwrap!r}) is not installed or not executable"
        argv = [*self._flags(prog, Path("/"), network=False), "--", "true"]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            async with asyncio.timeout(_PROBE_TIMEOUT_S):
                _, err = await proc.communicate()
        except (OSError, TimeoutError) as e:
            return f"bubblewrap could not start ({type(e).__name__}: {e})"
        if proc.returncode != 0:
            text = err.decode(errors="replace").strip().splitlines()
            return f"bubblewrap cannot create its namespaces here ({text[-1] if text else f'exit {proc.returncode}'})"
        return None

    async def check(self) -> str | None:
        """The message to refuse a call with, or None when the call may run (confined, or unconfined by choice)."""
        mode = self.config.mode
        if mode == "off":
            return None
        why = await self.problem()
        if why is None:
            return None
        if mode == "ask" and (self.unconfined_approved or granted("unconfined")):
            self.unconfined_approved = True
            return None
        where = user_config_dir() / "config.toml"
        if mode == "ask":
            return (
                f"Not run: the sandbox is unavailable ({why}) and running commands unconfined needs the user's "
                "approval, which was not given. " + _INSTALL.format(config=where)
            )
        return f"Not run: the sandbox is unavailable: {why}. kairos runs commands only inside it. " + _INSTALL.format(
            config=where
        )

    async def confined(self) -> bool:
        """Whether commands run inside bubblewrap (False: ``off``, or ``ask`` approved without it)."""
        return self.config.mode != "off" and await self.problem() is None

    def _flags(self, prog: str, cwd: Path, *, network: bool) -> list[str]:
        argv = [prog, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        argv += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        if not network:
            argv.append("--unshare-net")
        argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for tmp in PRIVATE_TMP:
            argv += ["--tmpfs", tmp]
        if Path("/run").is_dir() and not Path("/run").is_symlink():  # sockets (docker, dbus) live there
            argv += ["--tmpfs", "/run"]
            for keep in ("/run/systemd/resolve", "/run/resolvconf"):  # /etc/resolv.conf may point here
                if Path(keep).is_dir():
                    argv += ["--ro-bind", keep, keep]
        for home in _homes():
            argv += ["--tmpfs", home]
        for p in [*_visible_python(), *self.shown, *self.config.read_only_paths]:
            if os.path.exists(p):
                argv += ["--ro-bind", p, p]
        for p in self.config.writable_paths:
            if os.path.exists(p):
                argv += ["--bind", p, p]
        for f in HIDDEN_FILES:
            if os.path.isfile(f):
                argv += ["--ro-bind", "/dev/null", f]
        argv += ["--chdir", str(cwd)]
        return argv

    def command(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        cwd: Path,
        state_dirs: Sequence[Path] = (),
        network: bool = False,
    ) -> list[str]:
        """``argv`` wrapped in bubblewrap: the workspace read-write, its state read-only, secrets hidden.

        State dirs inside the workspace are shown read-only; those elsewhere (``$KAIROS_HOME``) are
        hidden behind an empty read-only tmpfs.

        Raises:
            SandboxUnavailable: bubblewrap is not found.
        """
        prog = self.program
        if prog is None:
            raise SandboxUnavailable(f"bubblewrap ({self.config.bwrap!r}) is not installed")
        ws = os.path.realpath(workspace)
        flags = self._flags(prog, Path(cwd), network=network)
        chdir = flags[-2:]
        out = flags[:-2] + ["--bind", ws, ws]
        for state in sorted({os.path.realpath(d) for d in state_dirs} | {os.path.join(ws, ".kairos")}):
            if _inside(state, ws) and not os.path.lexists(state):
                with contextlib.suppress(OSError):  # created here, so that it can be shown read-only
                    os.makedirs(state)
            if os.path.isdir(state) and not _inside(state, ws):  # another place's state (KAIROS_HOME): hidden
                out += ["--tmpfs", state, "--remount-ro", state]
            elif os.path.exists(state):
                out += ["--ro-bind", state, state]
        for home in _homes():
            for secret in HOME_SECRETS:
                p = os.path.join(home, secret)
                if os.path.isdir(p) and _inside(p, ws):
                    out += ["--tmpfs", p]
                elif os.path.isfile(p) and _inside(p, ws):
                    out += ["--ro-bind", "/dev/null", p]
        config_dir = os.path.realpath(user_config_dir())
        if os.path.isdir(config_dir) and _inside(config_dir, ws):
            out += ["--tmpfs", config_dir]
        return [*out, *chdir, "--", *argv]

    def preexec(self, then: Callable[[], None] | None = None) -> tuple[Callable[[], None], Callable[[], None]]:
        """A ``preexec_fn`` setting the limits (and joining a pids cgroup as root), and its cleanup.

        ``then`` runs after the limits (e.g. the parent-death signal). The cleanup removes the cgroup
        once the sandbox's processes are gone.
        """
        cfg = self.config
        limits = [
            (resource.RLIMIT_CPU, cfg.cpu_s),
            (resource.RLIMIT_AS, cfg.memory_mb * 1024 * 1024),
            (resource.RLIMIT_FSIZE, cfg.max_file_mb * 1024 * 1024),
            (resource.RLIMIT_CORE, 0),
        ]
        cgroup: _PidsCgroup | None = None
        if os.geteuid() == 0:
            cgroup = _PidsCgroup(cfg.max_processes)
        else:  # counted over all of the user's processes: leave room for those already running
            limits.append((resource.RLIMIT_NPROC, _processes_of(os.getuid()) + cfg.max_processes))
        procs = str(cgroup.path / "cgroup.procs") if cgroup is not None and cgroup.path is not None else None
        soft_limits = [(k, _capped(k, v)) for k, v in limits]

        def preexec() -> None:
            if procs is not None:
                fd = os.open(procs, os.O_WRONLY)
                try:
                    os.write(fd, str(os.getpid()).encode())
                finally:
                    os.close(fd)
            for kind, value in soft_limits:
                resource.setrlimit(kind, value)
            if then is not None:
                then()

        return preexec, (cgroup.remove if cgroup is not None else _nothing)


def _nothing() -> None:
    return None


def _capped(kind: int, value: int) -> tuple[int, int]:
    """``(soft, hard)`` no higher than the current hard limit (raising it would fail)."""
    _, hard = resource.getrlimit(kind)
    v = value if hard == resource.RLIM_INFINITY else min(value, hard)
    return v, v


def _processes_of(uid: int) -> int:
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    n += 1
    return n


def _homes() -> list[str]:
    """Home directories to hide: ``$HOME``, the user's entry in the password file and ``/root``."""
    out: list[str] = []
    candidates = [os.environ.get("HOME", ""), os.path.expanduser("~"), "/root"]
    for h in candidates:
        if h and h != "/" and os.path.isdir(h):
            real = os.path.realpath(h)
            if real not in out and real != "/":
                out.append(real)
    return out


def _hidden_roots() -> list[str]:
    """Places the sandbox replaces by an empty tmpfs: the homes and the private temporary folders."""
    return [*_homes(), *(os.path.realpath(t) for t in PRIVATE_TMP if os.path.isdir(t))]


def _visible_python() -> list[str]:
    """The interpreter and virtual environment of kairos, when a hidden place (home, /tmp) holds them.

    Code, not secrets: ``{{python}}`` in a skill and ``python`` in a checkout under /tmp must still run.
    """
    roots = _hidden_roots()
    out: list[str] = []
    for p in {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}:
        if any(_inside(p, r) and p != r for r in roots):
            out.append(p)
    return sorted(out)


def _inside(p: str, root: str) -> bool:
    return p == root or p.startswith(root.rstrip(os.sep) + os.sep)


def sandbox_of(ctx: ToolContext) -> Sandbox:
    """The session's sandbox (under :data:`SANDBOX_RESOURCE`), created with default settings if none."""
    return ctx.get_or_put(SANDBOX_RESOURCE, Sandbox)
