"""The CLI's consoles, untrusted text made safe for them, and the ``--workspace`` check.

Light on purpose: every command imports it.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from kairos.errors import ConfigError
from kairos.paths import workspace_dir
from kairos.security.terminal import safe_for_terminal

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
"""Errors, warnings and notices: one line each however long (a terminal wraps them; a log keeps them whole)."""


def _text(text: str) -> str:
    """Untrusted text (model output, tool results, file content) as Rich prints it.

    Printed literally, with terminal escape sequences shown instead of obeyed.
    """
    return escape(safe_for_terminal(text))


def existing_workspace(path: Path) -> Path:
    """The ``--workspace`` callback of every command: the folder resolved, or exit 1 with a clear error.

    It runs while the command line is parsed, before the command imports or creates anything: a
    mistyped workspace is refused at once and leaves no empty folder behind.
    """
    try:
        return workspace_dir(path)
    except ConfigError as e:
        err_console.print(f"[bold red]error:[/] {_text(str(e))}")
        raise typer.Exit(1) from e


__all__ = ["console", "err_console", "existing_workspace"]
