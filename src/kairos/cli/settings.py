"""``kairos config`` and ``kairos trust``: the settings a workspace gets, and whose settings count.

``config`` prints the effective settings and where they came from; ``trust`` lets a workspace's
kairos.toml and skills count as the user's own (or stops it). Registered on the main app by
:mod:`kairos.cli`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kairos.cli._console import _text, console, err_console
from kairos.cli._options import WorkspaceOpt
from kairos.cli._workspace import _fail, _notices
from kairos.errors import KairosError

if TYPE_CHECKING:
    from kairos.config import KairosConfig


def show_config(workspace: WorkspaceOpt = Path(".")) -> None:
    """Print the effective settings: defaults < user config < kairos.toml < environment (unknown keys are an error).

    The settings go to stdout as JSON; where they came from and what was ignored go to stderr.
    """
    from kairos.config import load_config

    try:
        config = load_config(workspace)
    except KairosError as e:
        raise _fail(str(e)) from e
    for source in config.sources:
        err_console.print(f"[dim]from {_text(source)}[/]")
    _notices(config)
    console.print_json(config.model_dump_json())


def _differences(a: KairosConfig, b: KairosConfig) -> list[str]:
    """Dotted names of the settings whose values differ between ``a`` and ``b``."""

    def walk(x: Any, y: Any, prefix: str) -> list[str]:
        if isinstance(x, dict) and isinstance(y, dict):
            return [n for k in sorted(x.keys() | y.keys()) for n in walk(x.get(k), y.get(k), f"{prefix}{k}.")]
        return [] if x == y else [prefix.rstrip(".")]

    return walk(a.model_dump(), b.model_dump(), "")


def trust(
    path: Annotated[Path, typer.Argument(help="the workspace to trust (default: the current directory)")] = Path("."),
    list_: Annotated[bool, typer.Option("--list", help="list the trusted workspaces")] = False,
    revoke: Annotated[bool, typer.Option("--revoke", help="stop trusting the workspace")] = False,
) -> None:
    """Trust a workspace, so its kairos.toml and skills count as yours.

    Its kairos.toml may then set the model endpoint and credentials and widen trust and approval,
    and its skills run without approval. Recorded in your config dir, not the workspace.
    """
    from kairos.config import load_config
    from kairos.security.trust import TrustStore

    store = TrustStore()
    if list_ and revoke:
        raise _fail("use either --list or --revoke")
    try:
        if list_:
            found = store.workspaces()
            if store.problem:
                err_console.print(f"[yellow]warning:[/] {_text(store.problem)}")
            if not found:
                console.print(f"no trusted workspaces ({_text(str(store.path))})")
            for entry in found:
                gone = "" if entry.path.is_dir() else " [yellow](no longer exists)[/]"
                console.print(f"{_text(str(entry.path))}  [dim]{_text(entry.trusted_at)}[/]{gone}")
            return
        if revoke:
            if not store.revoke(path):
                raise _fail(f"{path.resolve()} is not a trusted workspace (see: kairos trust --list)")
            console.print(f"[green]no longer trusted:[/] {_text(str(path.resolve()))}")
            return
        if not path.is_dir():
            raise _fail(f"{path} is not a directory")
        changed = _differences(load_config(path, trusted=False), load_config(path, trusted=True))
        recorded = store.trust(path)
    except KairosError as e:
        raise _fail(str(e)) from e
    except OSError as e:
        raise _fail(f"cannot update {store.path}: {e.strerror or e}") from e
    console.print(f"[green]trusted:[/] {_text(str(recorded))}")
    if changed:
        console.print("  its kairos.toml now also sets: " + _text(", ".join(changed)))
    console.print("[dim]undo with: kairos trust --revoke " + _text(shlex.quote(str(recorded))) + "[/]")
