"""The built-in tools every kairos agent can use.

``default_tools()`` returns all of them. The tools are stateless module-level objects: per-session
state (the bash shell, the cwd) lives in the :class:`~kairos.tools.base.ToolContext`.
"""

from __future__ import annotations

from kairos.tools.base import Tool
from kairos.tools.builtins.clock import current_time
from kairos.tools.builtins.files import edit_file, grep, list_dir, read_file, write_file
from kairos.tools.builtins.python import python
from kairos.tools.builtins.shell import BashSession, bash

__all__ = [
    "BashSession",
    "bash",
    "current_time",
    "default_tools",
    "edit_file",
    "grep",
    "list_dir",
    "python",
    "read_file",
    "write_file",
]


def default_tools() -> list[Tool]:
    """All built-in tools, sorted by name."""
    return [bash, current_time, edit_file, grep, list_dir, python, read_file, write_file]
