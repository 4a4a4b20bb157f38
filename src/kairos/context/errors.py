"""Four-layer tool error reports (book ch2 Exp 2-9, technique 4).

A bare ``FileNotFoundError: ...`` tells the model *that* a call failed; these reports also say
*why* and *what to try next*, which the book measured as error recovery rising from 60% to 95%:

1. the exception type and its description;
2. the call's parameters as JSON (so the model sees exactly what it sent);
3. a stack summary: a few frames of the tool's own code, never the harness's;
4. targeted fix suggestions per exception type (with close file names for a missing path).

A plugin installs it by returning one from ``Plugin.error_formatter`` (the status bar does). The
executor uses it only for exceptions a tool raised; bad JSON, schema mismatches and timeouts
already get their own results.
"""

from __future__ import annotations

import difflib
import inspect
import json
import os
import subprocess
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kairos.models.types import ToolCall
from kairos.tools.base import Tool

_HARNESS_FILES = ("kairos/tools/base.py", "kairos/tools/executor.py", "kairos/agent/")
_STDLIB = sysconfig.get_paths()["stdlib"]
_STDLIB_RUNNERS = ("/asyncio/", "/concurrent/futures/", "/threading.py", "/contextlib.py")

Suggester = Callable[[BaseException, Tool, dict[str, Any]], list[str]]


class FourLayerErrors:
    """An ``ErrorFormatter`` that writes four-layer reports.

    Args:
        max_frames: stack frames of the tool's own code shown at most.
        max_param_chars: the parameters' JSON is cut after this many characters.
        max_message_chars: the exception's message is cut after this many characters.
    """

    def __init__(self, *, max_frames: int = 4, max_param_chars: int = 1500, max_message_chars: int = 1000) -> None:
        self.max_frames = max_frames
        self.max_param_chars = max_param_chars
        self.max_message_chars = max_message_chars

    def __call__(self, call: ToolCall, t: Tool, args: dict[str, Any], exc: BaseException) -> str:
        """The report for ``exc``, raised by tool ``t`` called as ``call`` with ``args``."""
        message = str(exc).strip() or "(no message)"
        if len(message) > self.max_message_chars:
            message = message[: self.max_message_chars] + " …"
        params = json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)
        if len(params) > self.max_param_chars:
            params = params[: self.max_param_chars] + " … [cut]"
        frames = stack_summary(exc, t, self.max_frames)
        tips = suggestions(exc, t, args)
        lines = [
            f"Tool '{t.name}' failed.",
            f"[1] Error: {type(exc).__name__}: {message}",
            f"[2] Parameters: {params}",
            "[3] Stack (the tool's code, innermost call last):",
            *(f"    {f}" for f in frames or ["(no frames of the tool's own code)"]),
            "[4] How to fix:",
            *(f"    - {tip}" for tip in tips),
        ]
        return "\n".join(lines)


def stack_summary(exc: BaseException, t: Tool, max_frames: int = 4) -> list[str]:
    """``file:line in function: code`` for the tool's own frames (harness and event-loop frames dropped)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _is_harness(f.filename)]
    fn = getattr(t, "fn", None)  # a function tool's own code; schema tools have none
    try:
        own = inspect.getsourcefile(fn) if fn is not None else None
    except TypeError:  # a builtin or C function has no source file
        own = None
    start = next((i for i, f in enumerate(frames) if f.filename == own), 0)
    frames = frames[start:]
    if len(frames) > 1:  # library internals say little; keep the innermost frame for where it failed
        frames = [f for f in frames[:-1] if not f.filename.startswith(_STDLIB)] + frames[-1:]
    if len(frames) > max_frames:
        frames = [frames[0], *frames[-(max_frames - 1) :]] if max_frames > 1 else frames[-1:]
    out = []
    for f in frames:
        where = "/".join(Path(f.filename).parts[-2:])
        code = f" : {f.line.strip()}" if f.line else ""
        out.append(f"{where}:{f.lineno} in {f.name}{code}")
    return out


def _is_harness(filename: str) -> bool:
    name = filename.replace("\\", "/")
    return any(h in name for h in _HARNESS_FILES) or any(s in name for s in _STDLIB_RUNNERS)


def suggestions(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    """Fix suggestions for ``exc``: the most specific matching rule first, then a generic one."""
    for kind, rule in _RULES:
        if isinstance(exc, kind):
            return [*rule(exc, t, args), _GENERIC]
    return [f"Check the parameters against the tool's schema: {_param_names(t)}.", _GENERIC]


_GENERIC = (
    "Do not repeat the same call unchanged: it will fail the same way. Change the parameters, "
    "gather the missing information with another tool, or take a different approach."
)


def _param_names(t: Tool) -> str:
    props = t.spec.parameters.get("properties", {})
    required = set(t.spec.parameters.get("required", []))
    return ", ".join(f"{n}{'' if n in required else ' (optional)'}" for n in props) or "(no parameters)"


def _close_names(path: Path) -> tuple[Path | None, list[str]]:
    """The nearest existing ancestor of ``path`` and names in it close to the missing part."""
    parent = path.parent
    while not parent.is_dir() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return None, []
    try:
        names = sorted(p.name for p in parent.iterdir() if not p.name.startswith("."))
    except OSError:
        return parent, []
    missing = path.relative_to(parent).parts[0] if path.is_relative_to(parent) else path.name
    return parent, difflib.get_close_matches(missing, names, n=3, cutoff=0.6)


def _caller_base(filename: str, args: dict[str, Any]) -> Path | None:
    """The folder the caller's path argument was relative to, so suggestions use the same terms."""
    full = Path(filename).as_posix()
    for value in args.values():
        if isinstance(value, str) and value.strip() and not Path(value).is_absolute():
            tail = Path(value).as_posix()
            if full.endswith("/" + tail):
                return Path(full[: -len(tail)])
    return None


def _not_found(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    name = getattr(exc, "filename", None)
    tips = []
    if isinstance(name, str) and name:
        parent, close = _close_names(Path(name))
        base = _caller_base(name, args)

        def show(p: Path) -> str:
            rel = os.path.relpath(p, base) if base is not None else p.name
            return rel + ("/" if p.is_dir() else "")

        if parent is not None and close:
            tips.append(
                f"Did you mean {' or '.join(repr(show(parent / c)) for c in close)}? (similar names that exist)"
            )
        if parent is not None:
            tips.append(f"The nearest existing folder is {show(parent)!r}: list it to see what is there.")
    tips.append(
        "The path does not exist. Check its spelling and its folders: paths are relative to the current directory."
    )
    tips.append(
        "List the directory first (a list/ls tool), then retry with an exact path from the listing. "
        "If the file is really missing, create it or use an alternative source."
    )
    return tips


def _permission(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    return [
        "Access was denied: the path is outside the workspace or not readable/writable by this user.",
        "Use a path inside the workspace (relative to the current directory); check permissions with `ls -l`.",
        "Do not try to bypass the restriction; ask the user if the file really is needed.",
    ]


def _is_dir(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    return ["The path is a directory, not a file: list it to find the file you want inside it."]


def _not_dir(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    return ["A part of the path is a file, not a directory: check each folder name of the path."]


def _timeout(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    return [
        "The operation took too long. Ask for less at once (a narrower path, pattern or range).",
        "For long commands raise the tool's timeout parameter if it has one, or run them in the background.",
    ]


def _json(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    where = f" at line {getattr(exc, 'lineno', '?')}, column {getattr(exc, 'colno', '?')}"
    return [
        f"The text is not valid JSON{where}: check quotes (double quotes only), commas and brackets.",
        "If you passed JSON as a parameter, send it as a JSON value, not as an escaped string.",
    ]


def _validation(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    fields = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in errors)
    return [f"These fields are invalid: {fields}.", f"The tool's parameters are: {_param_names(t)}."]


def _unicode(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    return ["The file is not UTF-8 text (probably binary): inspect it with `file` or read it as bytes."]


def _value(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    return [
        f"A parameter value was not accepted. The tool's parameters are: {_param_names(t)}.",
        "Compare each value with what the tool expects (format, range, existing names) and fix the wrong one.",
    ]


def _connection(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    return ["The remote side could not be reached. Retry once later; if it fails again, use another source."]


def _other_os(exc: BaseException, t: Tool, args: dict[str, Any]) -> list[str]:
    return ["An operating-system error: check the path, free disk space and permissions."]


_RULES: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], Suggester], ...] = (
    (FileNotFoundError, _not_found),
    (PermissionError, _permission),
    (IsADirectoryError, _is_dir),
    (NotADirectoryError, _not_dir),
    ((TimeoutError, subprocess.TimeoutExpired), _timeout),
    (json.JSONDecodeError, _json),
    (ValidationError, _validation),
    (UnicodeDecodeError, _unicode),
    (ConnectionError, _connection),
    ((ValueError, TypeError, KeyError, IndexError), _value),
    (OSError, _other_os),
)
