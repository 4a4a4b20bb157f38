"""The ``python`` tool: run Python code in the session's sandboxed shell (same cwd, same limits)."""

from __future__ import annotations

import uuid

from kairos.tools.base import ToolContext, ToolResult
from kairos.tools.builtins.shell import MAX_TIMEOUT_S, run_command
from kairos.tools.function import tool


@tool(side_effects=True, timeout_s=MAX_TIMEOUT_S + 30)
async def python(code: str, timeout_s: float = 60, network: bool = False, *, ctx: ToolContext) -> ToolResult:
    """Run a Python 3 program and return what it prints (stdout and stderr together).
    Use it for calculations, data processing and quick checks; print() what you want to see.
    Each call is a fresh interpreter (nothing is kept between calls except files); it runs in the same
    sandbox as bash: it can write only inside the workspace, has no network and cannot read input.

    Args:
        code: the program, e.g. "import json; print(json.dumps({'a': 1}))".
        timeout_s: seconds before it is killed (at most 600).
        network: true only when the code needs the internet; the user is asked first.
    """
    if "\0" in code:
        return ToolResult("The code contains a NUL character; remove it.", is_error=True)
    end = f"__KAIROS_PY_{uuid.uuid4().hex}__"
    # a quoted here-document: bash expands nothing in it; python reads the program from stdin
    command = f"python3 - <<'{end}'\n{code}\n{end}"
    return await run_command(command, timeout_s, network, ctx)
