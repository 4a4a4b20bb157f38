"""Exception tree for kairos.

KairosError
├── ConfigError                 bad configuration or CLI input; says what to change
├── ModelError                  anything from a model backend
│   ├── ModelUnavailableError   unreachable / rate limited after the last retry
│   └── BundledModelError       a bundled GGUF is missing a part or fails its checksum
├── ContextOverflowError        a request would not fit the model's window
└── SessionNotFoundError        ``--session ID`` names no stored session

Errors the *model* caused (bad JSON, unknown tool, failing tool) are not exceptions: they go
back to the model as tool results.
"""

from __future__ import annotations


class KairosError(Exception):
    """Root of every error kairos raises on purpose."""


class ConfigError(KairosError):
    pass


class ModelError(KairosError):
    def __init__(self, message: str, *, model: str = "") -> None:
        super().__init__(message)
        self.model = model


class ModelUnavailableError(ModelError):
    def __init__(self, message: str, *, model: str = "", attempts: int = 0) -> None:
        super().__init__(message, model=model)
        self.attempts = attempts


class BundledModelError(ModelError):
    def __init__(self, message: str, *, model: str = "", package: str | None = None) -> None:
        super().__init__(message, model=model)
        self.package = package


class ContextOverflowError(KairosError):
    def __init__(self, message: str, *, prompt_tokens: int, limit: int) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.limit = limit


class SessionNotFoundError(KairosError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r} in this workspace; `kairos chat` without --session starts one")
        self.session_id = session_id
