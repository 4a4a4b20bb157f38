"""One writer per session: an exclusive ``flock`` on a lock file per session.

A second writer, in this process or another, is refused at once with who holds the session.
The kernel drops the lock when its holder dies (``kill -9`` included), so a crash never leaves a
session locked. The holder deletes its lock file when it releases the session (so lock files do
not pile up); a taker checks, once it holds the lock, that the file it locked is still the one at
the path, so a file deleted under it never lets two holders lock two inodes.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import threading
import time
from pathlib import Path

from kairos.errors import SessionBusyError, StoreError

_MEMORY_HOLDERS: set[tuple[int, str]] = set()
_MEMORY_LOCK = threading.Lock()


def _describe(raw: bytes) -> str:
    try:
        info = json.loads(raw.decode("utf-8"))
        since = time.strftime("%H:%M:%S", time.localtime(float(info["since"])))
        return f"pid {info['pid']} ({info['command']}, since {since})"
    except (ValueError, KeyError, TypeError):
        return "another kairos run"


class SessionLease:
    """The write lease of one session; ``acquire`` raises ``SessionBusyError`` when it is taken."""

    def __init__(self, lock_dir: Path | None, session_id: str, *, owner: int = 0) -> None:
        self.session_id = session_id
        self.path = lock_dir / f"{session_id}.lock" if lock_dir is not None else None
        self._owner = owner
        """For in-memory stores (no files): the store's identity, so leases are per store."""
        self._fd: int | None = None
        self._memory = False

    @property
    def held(self) -> bool:
        """Whether this lease holds the session now."""
        return self._fd is not None or self._memory

    def acquire(self) -> None:
        """Take the session (idempotent for the same lease).

        Raises:
            SessionBusyError: another lease holds it.
            StoreError: the lock file cannot be made (something is in the way).
        """
        if self.held:
            return
        if self.path is None:
            key = (self._owner, self.session_id)
            with _MEMORY_LOCK:
                if key in _MEMORY_HOLDERS:
                    raise SessionBusyError(self.session_id, "another run in this process")
                _MEMORY_HOLDERS.add(key)
            self._memory = True
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = self._lock(self.path)
        except OSError as e:  # a file where the locks folder belongs, a folder where the lock file does
            raise StoreError(
                f"cannot take the session's lock {self.path} ({e.strerror or e}): something is in the way; "
                f"move it away (mv {self.path.parent} {self.path.parent}.broken) and try again"
            ) from e
        command = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv[:3])) or "python"
        info = json.dumps({"pid": os.getpid(), "command": command[:120], "since": time.time()}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        self._fd = fd

    def _lock(self, path: Path) -> int:
        """A descriptor of the lock file at ``path``, exclusively locked."""
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                try:
                    current = os.stat(path).st_ino
                except FileNotFoundError:
                    current = None
                if current == os.fstat(fd).st_ino:
                    return fd
            except BlockingIOError:
                holder = _describe(os.pread(fd, 4096, 0))
                os.close(fd)
                raise SessionBusyError(self.session_id, holder) from None
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the previous holder deleted this file while we waited: lock the new one

    def release(self) -> None:
        """Give the session back (idempotent)."""
        if self._memory:
            with _MEMORY_LOCK:
                _MEMORY_HOLDERS.discard((self._owner, self.session_id))
            self._memory = False
        fd, self._fd = self._fd, None
        if fd is not None and self.path is not None:
            try:
                self.path.unlink(missing_ok=True)  # still locked: a taker that opened it re-checks the path
            except OSError:
                os.ftruncate(fd, 0)  # cannot delete (read-only dir): at least no stale holder info
            finally:
                os.close(fd)  # closing the descriptor drops the flock

    def __del__(self) -> None:  # a session dropped without aclose() must not keep its session locked
        self.release()
