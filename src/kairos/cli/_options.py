"""Options several commands share (``kairos run``, ``chat``, ``serve``, ``worker``…).

One definition each, so their names, help and checks cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kairos.cli._console import existing_workspace

ModelOpt = Annotated[
    str | None, typer.Option("--model", "-m", help="local | local-small | openai:NAME | anthropic:NAME | PATH.gguf")
]
BaseUrlOpt = Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible endpoint (vLLM, Ollama, ...)")]
WorkspaceOpt = Annotated[
    Path,
    typer.Option(
        "--workspace",
        "-w",
        help="directory the tools work in; state lives in its .kairos/",
        callback=existing_workspace,
    ),
]
TokenEnvOpt = Annotated[str, typer.Option("--token-env", help="env var holding the bearer token")]
GraceOpt = Annotated[float, typer.Option("--grace", min=0, help="seconds running turns get to finish on stop")]
StoreOpt = Annotated[
    str | None,
    typer.Option("--store", help="session store: embedded (SQLite, the default) or postgresql://… ([storage] store)"),
]
BusOpt = Annotated[
    str | None,
    typer.Option("--bus", help="event bus and work queue: embedded (the default) or nats://host:port ([storage] bus)"),
]

__all__ = ["BaseUrlOpt", "BusOpt", "GraceOpt", "ModelOpt", "StoreOpt", "TokenEnvOpt", "WorkspaceOpt"]
