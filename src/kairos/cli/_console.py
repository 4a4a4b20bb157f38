"""The CLI's two consoles and untrusted text made safe for them (light: every command imports it)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from kairos.security.terminal import safe_for_terminal

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
"""Errors, warnings and notices: one line each however long (a terminal wraps them; a log keeps them whole)."""


def _text(text: str) -> str:
    """Untrusted text (model output, tool results, file content) as Rich prints it.

    Printed literally, with terminal escape sequences shown instead of obeyed.
    """
    return escape(safe_for_terminal(text))


__all__ = ["console", "err_console"]
