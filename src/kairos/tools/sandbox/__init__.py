"""The sandbox ``bash`` and ``python`` run in: bubblewrap around every command (book ch4 §3.x).

What a sandboxed process sees (:class:`SandboxConfig` sets the knobs):

- the workspace read-write, except ``<workspace>/.kairos/`` (kairos's state: read-only);
- the rest of the filesystem read-only; the home directory (``$HOME``, ``/root``) an empty tmpfs,
  so ``~/.ssh``, ``~/.aws`` and shell start-up files are neither readable nor writable; files that
  hold passwords (``/etc/shadow``, …) replaced by empty ones;
- a private ``/tmp``, ``/dev`` and ``/proc`` (a new PID namespace: kairos and every other process
  of the machine are invisible, so no ``/proc/<pid>/environ``, ``ptrace`` or ``/proc/1/root`` trick);
- no network (a new network namespace) unless the call was granted it;
- no capabilities, a new session (no terminal to push keystrokes into), limits on CPU seconds,
  memory (address space), file size and processes, and the environment without secrets.

Where bubblewrap is missing or cannot create namespaces, ``mode`` decides: ``"bwrap"`` (default)
refuses the call and says how to install it or opt out; ``"ask"`` runs unconfined only after the
approver agreed, once per session; ``"off"`` runs unconfined (only the user's own config may say
so: an untrusted workspace cannot). Nothing runs unconfined silently.
"""

from __future__ import annotations

from kairos.tools.sandbox._bwrap import (
    SANDBOX_RESOURCE,
    Grant,
    Sandbox,
    SandboxConfig,
    SandboxMode,
    SandboxUnavailable,
    call_scope,
    grant,
    granted,
    granting,
    sandbox_of,
)

__all__ = [
    "SANDBOX_RESOURCE",
    "Grant",
    "Sandbox",
    "SandboxConfig",
    "SandboxMode",
    "SandboxUnavailable",
    "call_scope",
    "grant",
    "granted",
    "granting",
    "sandbox_of",
]
