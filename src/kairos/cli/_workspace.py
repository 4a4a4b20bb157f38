"""Opening a workspace for a command: its settings, its session store, the model, the agent.

Shared by ``run``, ``chat``, ``sessions``, ``config``, ``serve`` and ``worker``, so a bad setting,
an unreadable database or an unknown session is refused the same way everywhere: one clear error
line on stderr and exit code 1, before any model loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kairos.cli._console import _text, console, err_console
from kairos.errors import KairosError, SessionNotFoundError

if TYPE_CHECKING:  # each command imports what it needs when it runs: `kairos --help` loads none of it
    from collections.abc import Callable

    from kairos.agent import Agent
    from kairos.config import KairosConfig
    from kairos.context.session import Session, SessionStore
    from kairos.models.base import Model


def _fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {_text(message)}")
    return typer.Exit(code)


def _notices(config: KairosConfig) -> None:
    """What loading the configuration ignored (an untrusted workspace's settings), on stderr."""
    for notice in config.notices:
        err_console.print(f"[yellow]notice:[/] {_text(notice)}")


def _open(
    workspace: Path, model: str | None, base_url: str | None, session: str | None
) -> tuple[KairosConfig, SessionStore]:
    """The workspace's settings and session store (``run`` and ``chat``), before any model loads.

    A bad setting, an unreadable database or an unknown ``--session`` is refused at once, not
    after seconds of loading a model (a missing workspace, earlier still: by the option).

    Raises:
        typer.Exit: after a clear error.
    """
    from kairos.config import load_config

    try:
        config = load_config(workspace, {"model": model, "base_url": base_url})
        _notices(config)
        store = _session_store(config, workspace)
    except KairosError as e:
        raise _fail(str(e)) from e
    try:
        if session is not None and not store.trajectories.has_session(session):
            raise SessionNotFoundError(session)
    except KairosError as e:
        store.close()
        raise _fail(str(e)) from e
    return config, store


def _model(config: KairosConfig, store: SessionStore) -> Model:
    """The model the settings name; closes ``store`` and exits after a clear error when it cannot load."""
    from kairos.models import load_model

    try:
        with console.status(f"loading model {_text(config.model)} ..."):
            return load_model(config.model, config.model_settings())
    except KairosError as e:
        store.close()
        raise _fail(str(e)) from e


def _setup(
    workspace: Path,
    model: str | None,
    base_url: str | None,
    session: str | None,
    title: str = "",
    adjust: Callable[[KairosConfig], KairosConfig] | None = None,
) -> tuple[Agent, SessionStore, Session]:
    """The product agent and the session to run (``run``); a clear error and exit 1 otherwise.

    ``adjust``: changes the command line asks for on top of the loaded config (``--browser``).
    """
    config, store = _open(workspace, model, base_url, session)
    if adjust is not None:
        config = adjust(config)
    llm = _model(config, store)
    from kairos.app import build_agent  # the agent stack loads only once the checks above passed

    try:
        return build_agent(llm, workspace, config), store, store.open(session, title=title)
    except KairosError as e:
        store.close()
        raise _fail(str(e)) from e


def _session_store(config: KairosConfig, workspace: Path) -> SessionStore:
    """The session store ``[storage] store`` names (PostgreSQL never silently replaced by SQLite).

    Raises:
        KairosError: the store cannot be opened (the message says what to do).
    """
    from kairos.context.session import SessionStore

    if config.storage.store_kind == "embedded":
        return SessionStore(workspace)
    from kairos.runtime.backends import open_store

    return open_store(config.storage.store, workspace)
