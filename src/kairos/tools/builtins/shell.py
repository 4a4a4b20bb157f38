"""The ``bash`` tool: one persistent shell per session.

Each session gets one ``bash --noprofile --norc`` process (kept under :data:`RESOURCE_KEY`),
started in its own process group. Commands are sent on stdin wrapped in ``eval`` (so a syntax
error cannot swallow what follows) with stdin from ``/dev/null``; a sentinel line carrying a fresh
UUID, the exit status and the physical cwd marks the end of each command's output.

The shell runs inside the session's sandbox (:mod:`kairos.tools.sandbox`: bubblewrap, started with
the shell, so one PID namespace lasts the session). After every command everything in that
namespace but the shell is killed, and the result says how many were: no background process
outlives its call (``setsid``, ``nohup`` and double forks included). A call that asks for the
network runs in a one-off sandbox that has it. Where the sandbox cannot run, the call is refused
with how to fix it, unless ``[sandbox] mode`` says otherwise (see there).

The shell's cwd is kept inside the workspace: after a command that leaves it outside, the shell
``cd``s back to the last good directory and the result says so (a guard against mistakes; the
sandbox is what stops writes elsewhere).

The shell gets kairos's environment without secrets (:meth:`ToolContext.environment`). Long
outputs are kept whole in a spill file and shown cut (:mod:`._bash_output`). The shell never
outlives kairos: on Linux bash gets ``PR_SET_PDEATHSIG=SIGKILL`` (it dies with kairos, even on
``kill -9``), a watchdog kills the shell's whole process group (what bash started too) when
kairos dies by any means, and a finalizer kills the group when the session is garbage-collected
or the interpreter exits without closing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shlex
import signal
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kairos.tools.base import STATE_DIR_NAME, Resource, ToolContext, ToolResult, is_secret_name
from kairos.tools.builtins._bash_output import Capture, Spill, render
from kairos.tools.builtins._proc import Watchdog, die_with_kairos, kill_group
from kairos.tools.function import tool
from kairos.tools.sandbox import Sandbox, granted, sandbox_of

RESOURCE_KEY: Resource[BashSession] = Resource("bash")
MAX_TIMEOUT_S = 600.0
MIN_TIMEOUT_S = 1.0
_CHUNK = 64 * 1024
_GRACE_S = 2.0
"""How long to wait for the pipe to drain once the shell's process group has been killed."""
_REAPER = (
    "__kn=0; for __k in 1 2 3 4 5 6 7 8; do __kp=; for __p in /proc/[0-9]*; do __p=${__p#/proc/}; "
    '[[ $__p == 1 || $__p == "$$" ]] || { builtin kill -9 "$__p" 2>/dev/null && __kp=1 && ((__k > 1 || ++__kn)); }; '
    "done; [[ -z $__kp ]] && break; done; { builtin wait; } 2>/dev/null; ((__kn)) && builtin printf "
    "'[stopped %s process(es) left running in the background: in the sandbox nothing outlives its call]\\n' $__kn; "
    "builtin unset __k __kp __p __kn\n"
)
"""Inside the sandbox's PID namespace, after each command: kill everything but its init and the shell
(builtins only, so it forks nothing), so no background process outlives the call."""
_DROP_ENV = ("BASH_ENV", "ENV", "PROMPT_COMMAND")
_EXTRA_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb", "GIT_TERMINAL_PROMPT": "0"}


def default_environment() -> dict[str, str]:
    """``os.environ`` without secret-looking variables: the shell's environment without a context."""
    return {k: v for k, v in os.environ.items() if not is_secret_name(k)}


@dataclass(slots=True)
class BashOutcome:
    """How one command ended and what it printed."""

    output: str = ""
    """What the model sees: the whole output, or its head and tail around a note (see ``_bash_output``)."""
    total_bytes: int = 0
    """The true size of the output."""
    full_output: Path | None = None
    """The spill file with the complete output, when ``output`` shows only part of it."""
    full_output_capped: bool = False
    """The spill file stopped growing at ``SPILL_MAX_BYTES``."""
    exit_code: int | None = None
    """``None`` when the command did not finish (timeout, shell exited)."""
    timed_out: bool = False
    shell_exit_code: int | None = None
    """Set when the shell itself exited during the command (``exit``, ``exec``, ``set -e``)."""
    restarted: bool = False
    """The previous shell had died unnoticed; this command ran in a fresh one."""
    notes: tuple[str, ...] = ()
    """Guard messages to show after the output (cwd moved back into the workspace)."""
    left_workspace: bool = False


class BashSession:
    """A persistent ``bash`` process; ``run`` one command at a time, ``aclose`` to end it."""

    def __init__(
        self,
        workspace: Path,
        cwd: Path | None = None,
        *,
        env: Mapping[str, str] | None = None,
        spill_dir: Path | None = None,
        sandbox: Sandbox | None = None,
        state_dirs: Sequence[Path] = (),
        network: bool = False,
    ) -> None:
        """Set up a session; bash itself starts on the first :meth:`run`.

        Args:
            workspace: the shell's cwd must stay inside it.
            cwd: where the shell starts (default: the workspace).
            env: the shell's environment (default: :func:`default_environment`, without secrets).
            spill_dir: where long outputs are saved whole (default: ``<workspace>/.kairos/spill``).
            sandbox: run bash inside it (bubblewrap); None runs it unconfined. The caller checks first
                that it can run (:meth:`Sandbox.check`).
            state_dirs: kairos's state, shown read-only inside the sandbox.
            network: give the sandbox the network.
        """
        self.workspace = workspace.resolve()
        self.cwd = (cwd or workspace).resolve()
        """The last directory the shell was in that lies inside the workspace."""
        self.env = dict(env) if env is not None else default_environment()
        self.spill_dir = spill_dir or self.workspace / STATE_DIR_NAME / "spill"
        self._finalizer: weakref.finalize[[int], BashSession] | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._exited: asyncio.Task[int] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._watchdog: Watchdog | None = None
        self._lock = asyncio.Lock()
        self._closing: asyncio.Future[int | None] | None = None
        self._closed = False
        self._death_reported = True
        self.sandbox = sandbox
        self.state_dirs = tuple(state_dirs)
        self.network = network
        self._confined = False
        self._cleanup: Callable[[], None] | None = None
        self.shown: tuple[str, ...] = ()
        """The sandbox's shown folders when this shell started (its mounts are fixed from then on)."""

    @property
    def process(self) -> asyncio.subprocess.Process | None:
        """The running ``bash`` process, if any (a fresh one starts on the next ``run``)."""
        return self._proc

    @property
    def confined(self) -> bool:
        """Whether the running shell was started inside bubblewrap."""
        return self._confined

    def _inside(self, p: Path) -> bool:
        return p == self.workspace or self.workspace in p.parents

    async def _start(self) -> None:
        if not self.cwd.is_dir():
            self.cwd = self.workspace
        env = {k: v for k, v in self.env.items() if k not in _DROP_ENV} | _EXTRA_ENV
        argv = ["bash", "--noprofile", "--norc"]
        preexec = die_with_kairos()
        self._confined = self.sandbox is not None and await self.sandbox.confined()
        if self.sandbox is not None and self._confined:
            self.shown = self.sandbox.shown
            argv = self.sandbox.command(
                argv, workspace=self.workspace, cwd=self.cwd, state_dirs=self.state_dirs, network=self.network
            )
            preexec, self._cleanup = self.sandbox.preexec(preexec)
        read_fd, write_fd = os.pipe()
        try:
            # stdout/stderr go to a pipe we own (not asyncio's): wait() then returns as soon as
            # bash exits, even while a background job still holds the pipe open.
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=self.cwd,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=write_fd,
                stderr=write_fd,
                start_new_session=True,
                preexec_fn=preexec,
            )
        except BaseException:
            os.close(read_fd)
            self._release_cgroup()
            raise
        finally:
            os.close(write_fd)
        pipe = os.fdopen(read_fd, "rb", buffering=0)
        reader = asyncio.StreamReader(limit=_CHUNK)
        try:
            transport, _ = await asyncio.get_running_loop().connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), pipe
            )
        except BaseException:
            pipe.close()
            await asyncio.shield(_reap(proc, asyncio.ensure_future(proc.wait())))
            raise
        self._proc, self._reader, self._transport = proc, reader, transport
        self._exited = asyncio.ensure_future(proc.wait())
        # Kills the group (background jobs included) if the session is dropped unclosed or
        # the interpreter exits first; bash is its group's leader, so pgid == pid.
        self._finalizer = weakref.finalize(self, kill_group, proc.pid)
        self._watchdog = await Watchdog.start(proc.pid)

    async def _shutdown(self, pump: asyncio.Future[Any] | None = None) -> int | None:
        """Kill the shell's whole process group and release everything; returns bash's exit code.

        Idempotent, and it finishes even if the caller is cancelled meanwhile.
        """
        proc, exited, transport = self._proc, self._exited, self._transport
        if proc is None or exited is None or transport is None:
            return None
        self._proc = self._exited = self._transport = self._reader = None
        if self._finalizer is not None:
            self._finalizer()  # kill the group now; _reap then drains the pipe and reaps bash
            self._finalizer = None
        watchdog, self._watchdog = self._watchdog, None
        self._closing = asyncio.ensure_future(_reap(proc, exited, transport, pump, watchdog))
        try:
            return await asyncio.shield(self._closing)
        finally:
            if self._closing.done():
                self._release_cgroup()

    def _release_cgroup(self) -> None:
        cleanup, self._cleanup = self._cleanup, None
        if cleanup is not None:
            cleanup()

    async def aclose(self) -> None:
        """End the shell and its whole process group; the session cannot run commands after this."""
        self._closed = True
        await self._shutdown()
        if self._closing is not None:
            await self._closing

    async def _pump(self, reader: asyncio.StreamReader, cap: Capture) -> None:
        while True:
            chunk = await reader.read(_CHUNK)
            if not chunk:
                cap.eof = True
                return
            if cap.feed(chunk):
                return

    async def _exchange(self, command: str, timeout_s: float) -> tuple[Capture, str, int | None]:
        """Run ``command``.

        Returns:
            Its capture, how it ended (done, timeout, exited) and, when the shell is gone, bash's
            own exit code.
        """
        proc, exited, reader = self._proc, self._exited, self._reader
        assert proc is not None and proc.stdin is not None and exited is not None and reader is not None
        marker = f"__KAIROS_{uuid.uuid4().hex}__"
        script = (
            f"builtin eval {shlex.quote(command)} < /dev/null\n__kairos_rc=$?\n"
            + (_REAPER if self._confined else "")
            + f'builtin printf \'\\n%s %s %s\\n\' {marker} "$__kairos_rc" "$(builtin pwd -P 2>/dev/null)"\n'
            + "builtin unset __kairos_rc\n"
        )
        cap = Capture(b"\n" + marker.encode() + b" ", Spill(self.spill_dir, self.workspace))
        pump: asyncio.Future[None] | None = None
        try:
            proc.stdin.write(script.encode())
            await proc.stdin.drain()
            pump = asyncio.ensure_future(self._pump(reader, cap))
            await asyncio.wait({pump, exited}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # broken pipe, or cancelled by the executor: the shell's state is unknown
            await self._shutdown(pump)
            if cap.spill is not None:
                cap.spill.close()
            raise
        if pump.done() and not cap.eof:
            return cap, "done", None
        ending = "exited" if (pump.done() or exited.done()) else "timeout"
        code = await self._shutdown(pump)
        return cap, ending, code

    async def run(self, command: str, timeout_s: float = 60.0) -> BashOutcome:
        """Run one command in the shell, (re)starting the shell first if it is not running."""
        if self._closed:
            raise RuntimeError("this bash session is closed")
        async with self._lock:
            restarted = False
            proc, exited = self._proc, self._exited
            if proc is not None and (proc.returncode is not None or (exited is not None and exited.done())):
                # died since the last call (killed from outside)
                await self._shutdown()
                self._death_reported = False
            if self._proc is None:
                if not self._death_reported:
                    restarted = self._death_reported = True
                await self._start()
            try:
                cap, ending, shell_code = await self._exchange(command, timeout_s)
            except (BrokenPipeError, ConnectionResetError):  # died an instant ago
                await self._start()
                restarted = True
                cap, ending, shell_code = await self._exchange(command, timeout_s)
            cap.finish()
            if ending == "timeout":
                outcome = BashOutcome(timed_out=True, restarted=restarted)
            elif ending == "exited":
                outcome = BashOutcome(shell_exit_code=-1 if shell_code is None else shell_code, restarted=restarted)
            else:
                outcome = BashOutcome(exit_code=cap.status, restarted=restarted)
                await self._check_cwd(cap.pwd, outcome)
            shown = render(cap, self.cwd)  # after _check_cwd: paths relative to where the next call runs
            outcome.output, outcome.total_bytes = shown.text, shown.total_bytes
            outcome.full_output, outcome.full_output_capped = shown.full_output, shown.capped
            return outcome

    async def _check_cwd(self, pwd: str, outcome: BashOutcome) -> None:
        here = _real(pwd)
        if here is not None and self._inside(here):
            self.cwd = here
            return
        back = self.cwd if self.cwd.is_dir() else self.workspace
        if here is None:
            note = f"[the shell's current directory no longer exists; moved to {back}]"
        else:
            note = (
                f"[error: the shell's current directory must stay inside the workspace {self.workspace}; "
                f"moved back to {back}]"
            )
            outcome.left_workspace = True
        outcome.notes += (note,)
        cap, ending, _ = await self._exchange(f"cd -- {shlex.quote(str(back))}", 10.0)
        if cap.spill is not None:
            cap.spill.close()
        now = _real(cap.pwd) if ending == "done" else None
        if now is not None and self._inside(now):
            self.cwd = now
        elif ending == "done":  # not even the workspace is reachable: start afresh next time
            await self._shutdown()


async def _reap(
    proc: asyncio.subprocess.Process,
    exited: asyncio.Future[int],
    transport: asyncio.ReadTransport | None = None,
    pump: asyncio.Future[None] | None = None,
    watchdog: Watchdog | None = None,
) -> int | None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if watchdog is not None:
        await watchdog.dismiss()
    if pump is not None and not pump.done():
        # Let the pump read what the killed processes wrote, up to EOF; a process that left the
        # group (setsid) may keep the pipe open, hence the bound.
        await asyncio.wait({pump}, timeout=_GRACE_S)
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump
    if proc.stdin is not None:
        proc.stdin.close()
    code = await exited
    if transport is not None:
        transport.close()
        await asyncio.sleep(0)  # let the transport close its file descriptor
    return code


def _real(pwd: str) -> Path | None:
    return Path(pwd).resolve() if pwd else None


def _new_session(ctx: ToolContext, box: Sandbox, *, network: bool) -> BashSession:
    return BashSession(
        ctx.workspace, ctx.cwd, env=ctx.environment(), sandbox=box, state_dirs=ctx.state_dirs, network=network
    )


async def _session(ctx: ToolContext, box: Sandbox) -> tuple[BashSession, str | None]:
    """The session's shell, and a note when it was restarted to show folders shown since it started."""
    session = ctx.get(RESOURCE_KEY)
    note = None
    if (
        isinstance(session, BashSession)
        and session.process is not None
        and session.confined
        and session.shown != box.shown
    ):
        await session.aclose()
        new = ", ".join(sorted(set(box.shown) - set(session.shown)))
        note = f"[started a fresh shell in {session.cwd} so that {new} is visible (variables are reset)]"
        session = None
    if not isinstance(session, BashSession):
        session = _new_session(ctx, box, network=box.config.network == "allow")
        ctx.put(RESOURCE_KEY, session)
    return session, note


def _network_refusal(box: Sandbox) -> str | None:
    """Why a call that asks for the network may not have it (None: it may)."""
    policy = box.config.network
    if policy == "deny":
        return 'Not run: network access is switched off for commands ([sandbox] network = "deny").'
    if policy == "ask" and not granted("network"):
        return "Not run: network access needs the user's approval, and it was not given. Run it without network."
    return None


@tool(side_effects=True, timeout_s=MAX_TIMEOUT_S + 30)
async def bash(command: str, timeout_s: float = 60, network: bool = False, *, ctx: ToolContext) -> ToolResult:
    """Run a command in a persistent bash shell and return its output (stdout and stderr together).
    It starts in the workspace root. State carries over between calls: variables, functions and the directory (cd).
    Use it to run programs, tests and git. Stdin is empty, so interactive programs and prompts won't work.
    It runs in a sandbox: the workspace is writable (except .kairos/), everything else is read-only, the home
    folder is empty, /tmp is private, there is no network, and no process outlives the call.

    Args:
        command: bash command line(s), e.g. "ls -la" or "python -m pytest -q".
        timeout_s: seconds before the command is killed (at most 600); raise it for slow builds.
        network: true only when the command needs the internet (pip install, git clone); the user is asked,
            and it runs in a one-off shell (variables and cd are not kept).
    """
    if "\0" in command:
        return ToolResult("The command contains a NUL character, which bash cannot run; remove it.", is_error=True)
    return await run_command(command, timeout_s, network, ctx)


async def run_command(command: str, timeout_s: float, network: bool, ctx: ToolContext) -> ToolResult:
    """Run ``command`` as the ``bash`` tool does (sandbox checks, limits, the result's notes)."""
    limit = min(max(timeout_s, MIN_TIMEOUT_S), MAX_TIMEOUT_S) if not math.isnan(timeout_s) else 60.0
    box = sandbox_of(ctx)
    refusal = await box.check()
    confined = await box.confined()
    if refusal is None and network and confined and box.config.network != "allow":
        refusal = _network_refusal(box)
    if refusal is not None:
        return ToolResult(refusal, is_error=True, metadata={"sandbox": "refused"})
    one_off = network and confined and box.config.network != "allow"
    session, fresh = (_new_session(ctx, box, network=True), None) if one_off else await _session(ctx, box)
    try:
        outcome = await session.run(command, limit)
    except OSError as exc:
        return ToolResult(f"Could not start bash: {exc}.", is_error=True)
    finally:
        ctx.cwd = session.cwd
        if one_off:
            await session.aclose()
    parts = [outcome.output.rstrip("\n")] if outcome.output.strip() else []
    metadata: dict[str, Any] = {"cwd": str(session.cwd), "total_bytes": outcome.total_bytes}
    metadata["sandbox"] = "bwrap" if confined else "none"
    if one_off:
        parts.append("[ran with network access in a one-off shell: its variables and cd are not kept]")
    if outcome.full_output is not None:
        metadata["full_output"] = outcome.full_output.relative_to(ctx.workspace).as_posix()  # checked inside
        if outcome.full_output_capped:
            metadata["full_output_capped"] = True
    is_error = outcome.left_workspace
    if outcome.timed_out:
        is_error = True
        metadata["timed_out"] = True
        parts.append(
            f"[timed out after {limit:g} s: the command was killed, with everything it started. The next bash call "
            f"starts a fresh shell in {session.cwd} (variables are reset). For slow work raise timeout_s (max 600).]"
        )
    elif outcome.shell_exit_code is not None:
        metadata["shell_exit_code"] = outcome.shell_exit_code
        parts.append(
            f"[the shell exited (code {outcome.shell_exit_code}); the next bash call starts a fresh shell in "
            f"{session.cwd} (variables are reset)]"
        )
    elif outcome.exit_code:
        parts.append(f"[exit code {outcome.exit_code}]")
    if outcome.exit_code is not None:
        metadata["exit_code"] = outcome.exit_code
    if outcome.restarted:
        parts.insert(0, f"[the previous shell had exited; started a fresh one in {session.cwd}]")
    elif fresh is not None:
        parts.insert(0, fresh)
    parts += outcome.notes
    return ToolResult("\n".join(parts) if parts else "(no output)", is_error=is_error, metadata=metadata)
