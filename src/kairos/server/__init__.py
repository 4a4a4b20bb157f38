"""The HTTP API of ``kairos serve``: sessions, streams, webhooks, the outbox, an OpenAI endpoint, telemetry.

:func:`create_app` builds the FastAPI app over a :class:`~kairos.runtime.Runtime`;
:func:`serve` runs it under uvicorn with a drain on SIGTERM/SIGINT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kairos._lazy import lazy_exports

if TYPE_CHECKING:
    from kairos.server.app import MAX_BODY, create_app
    from kairos.server.auth import check_bind, sign, verify
    from kairos.server.outbox import OutboxAPI
    from kairos.server.serving import serve
    from kairos.server.state import ServerState
    from kairos.server.telemetry import GenAITelemetry, telemetry_from_env

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "kairos.server.app": "MAX_BODY create_app",
        "kairos.server.auth": "check_bind sign verify",
        "kairos.server.outbox": "OutboxAPI",
        "kairos.server.serving": "serve",
        "kairos.server.state": "ServerState",
        "kairos.server.telemetry": "GenAITelemetry telemetry_from_env",
    },
)

__all__ = [
    "MAX_BODY",
    "GenAITelemetry",
    "OutboxAPI",
    "ServerState",
    "check_bind",
    "create_app",
    "serve",
    "sign",
    "telemetry_from_env",
    "verify",
]
