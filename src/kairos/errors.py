"""Exception tree for kairos.

KairosError
├── ConfigError                 bad configuration or CLI input; says what to change
├── ModelError                  anything from a model backend
│   ├── ModelUnavailableError   unreachable / rate limited after the last retry
│   └── BundledModelError       a bundled GGUF is missing a part or fails its checksum
├── ContextOverflowError        a request would not fit the model's window
├── SessionNotFoundError        ``--session ID`` names no stored session
├── SessionBusyError            another run (this process or another) holds the session
└── StoreError                  a database kairos keeps is unusable (a folder or broken link in its place)
    ├── StoreCorruptError       damaged, truncated, or not a kairos database
    ├── StoreBusyError          another process keeps it locked past the busy timeout
    ├── StoreReadOnlyError      it or its folder cannot be written (permissions, a read-only mount)
    ├── StoreFullError          the disk is full
    ├── StoreConflictError      another writer took the place first (a message seq): nothing was written
    └── SchemaTooNewError       a newer kairos migrated it: this release does not know its tables

Errors the *model* caused (bad JSON, unknown tool, failing tool) are not exceptions: they go
back to the model as tool results.
"""

from __future__ import annotations

from pathlib import Path


class KairosError(Exception):
    """Root of every error kairos raises on purpose."""


class ConfigError(KairosError):
    """Bad configuration or CLI input; the message says what to change."""


class ModelError(KairosError):
    """Anything a model backend reports."""

    def __init__(self, message: str, *, model: str = "") -> None:
        super().__init__(message)
        self.model = model


class ModelUnavailableError(ModelError):
    """The backend could not be reached (or stayed rate limited) after the last retry."""

    def __init__(self, message: str, *, model: str = "", attempts: int = 0) -> None:
        super().__init__(message, model=model)
        self.attempts = attempts


class BundledModelError(ModelError):
    """A bundled GGUF is missing a part or fails its checksum."""

    def __init__(self, message: str, *, model: str = "", package: str | None = None) -> None:
        super().__init__(message, model=model)
        self.package = package


class ContextOverflowError(KairosError):
    """A request would not fit the model's window, even after compression."""

    def __init__(self, message: str, *, prompt_tokens: int, limit: int) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.limit = limit


class SessionNotFoundError(KairosError):
    """A session id names no stored session (``str()`` is for the CLI; :attr:`api_message` for an API)."""

    def __init__(self, session_id: str, where: str = "") -> None:
        shown = session_id if len(session_id) <= 80 else session_id[:80] + "…"
        super().__init__(f"no session {shown!r} in this workspace; `kairos chat` without --session starts one")
        self.session_id = session_id
        self.api_message = f"no session {shown!r}{where}; POST /v1/sessions creates one"


class SessionBusyError(KairosError):
    """One writer per session: another run holds it (``holder`` says who)."""

    def __init__(self, session_id: str, holder: str) -> None:
        super().__init__(
            f"session {session_id!r} is in use by {holder}; wait for that run to finish (or stop it), "
            "or start a new session"
        )
        self.session_id = session_id
        self.holder = holder


class MessageTooLongError(KairosError):
    """A user message longer than the model's whole window: taken in, it would break every later turn."""


class IdempotencyConflictError(KairosError):
    """An idempotency key used before, for another payload: the retry is not the same request."""


class StoreError(KairosError):
    """A database kairos keeps cannot be used as it is; it is never replaced silently.

    The message names the file and says what to do; :attr:`path` is the file when one is known.
    """

    def __init__(self, message: str, *, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


class StoreCorruptError(StoreError):
    """The file is damaged, truncated or not a kairos database (SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_IOERR)."""


class StoreBusyError(StoreError):
    """Another process kept the database locked past the busy timeout: waiting, not moving it, is the fix."""


class StoreReadOnlyError(StoreError):
    """The database or its folder cannot be written (permissions, a read-only mount)."""


class StoreFullError(StoreError):
    """The disk (or the database's size limit) is full."""


class StoreConflictError(StoreError):
    """Another writer took the place first (a session's message seq): this write rolled back whole."""


class SchemaTooNewError(StoreError):
    """A newer kairos migrated the database: this release would misread it, so it does not touch it."""

    def __init__(self, message: str, *, path: Path | None, owner: str, found: int, known: int) -> None:
        super().__init__(message, path=path)
        self.owner = owner
        self.found = found
        self.known = known
