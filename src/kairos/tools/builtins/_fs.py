"""Helpers shared by the file tools: opening files without ever blocking, sniffing, messages.

A named pipe (FIFO) in the workspace must never hang a tool: a plain ``open`` waits for the
other end forever. :func:`open_regular` therefore opens with ``O_NONBLOCK`` (which returns at
once for pipes and devices), checks with ``fstat`` on the very descriptor it opened (no race
with a file swapped in between), refuses anything but a regular file, and only then switches
the descriptor back to blocking I/O.
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from kairos.tools.base import ToolContext, ToolResult

MAX_LINE_CHARS = 2_000
SNIFF_BYTES = 8192
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class NotRegularFileError(OSError):
    """The path exists but is a pipe, socket, device or directory, not a regular file."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def describe_mode(mode: int) -> str:
    """What kind of file ``mode`` (from ``stat``) is, for messages."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def open_regular(p: Path, *, write: bool = False) -> tuple[BinaryIO, os.stat_result]:
    """Open ``p`` in binary mode if, and only if, it is a regular file; never blocks on a pipe or device.

    For writing the file is created when missing but **not truncated**: the caller truncates once
    it knows the file is regular. Returns the open file and its ``fstat`` (the size before any write).

    Raises:
        NotRegularFileError: ``p`` is a pipe, socket, device or directory.
        OSError: it cannot be opened (missing, no permission, ...).
    """
    try:
        fd = os.open(p, _WRITE_FLAGS if write else _READ_FLAGS, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a pipe with no reader (O_WRONLY | O_NONBLOCK)
            raise NotRegularFileError("a named pipe (FIFO) or a socket") from exc
        if exc.errno == errno.EISDIR:
            raise NotRegularFileError("a directory") from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(describe_mode(st.st_mode))
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "wb" if write else "rb")  # fdopen never truncates
    except BaseException:
        os.close(fd)
        raise
    return f, st


def error(message: str) -> ToolResult:
    return ToolResult(message, is_error=True)


def resolve(ctx: ToolContext, path: str, *, write: bool = False) -> Path | ToolResult:
    """``ctx.resolve_path`` with its refusals turned into error results."""
    try:
        return ctx.resolve_path(path, write=write)
    except PermissionError as exc:
        return error(f"Access denied: {exc}.")
    except (OSError, RuntimeError, ValueError) as exc:
        return error(f"Invalid path {path!r}: {exc}.")


def show(ctx: ToolContext, p: Path) -> str:
    """``p`` relative to the cwd: the form the next tool call accepts as is."""
    return Path(os.path.relpath(p, ctx.cwd or ctx.workspace)).as_posix()


def looks_binary(sample: bytes) -> bool:
    if b"\0" in sample:
        return True
    try:
        sample.decode("utf-8")
        return False
    except UnicodeDecodeError as exc:
        if exc.start >= len(sample) - 3:  # a multi-byte character cut by the sample's end
            return False
    text = sample.decode("utf-8", errors="replace")
    return text.count("\ufffd") > len(text) * 0.3


def missing(ctx: ToolContext, p: Path, path: str) -> ToolResult:
    parent = p.parent
    while not parent.is_dir() and parent != ctx.workspace and ctx.workspace in parent.parents:
        parent = parent.parent
    hint = ""
    try:
        names = [e.name for e in parent.iterdir()] if parent == p.parent else []
    except OSError:
        names = []
    close = difflib.get_close_matches(p.name, names, n=3, cutoff=0.6)
    if close:
        hint = " Similar names there: " + ", ".join(show(ctx, parent / n) for n in close) + "."
    where = show(ctx, parent)
    return error(f"File not found: {path!r}.{hint} Use list_dir(path={where!r}) to see what exists.")


def not_regular(ctx: ToolContext, p: Path, path: str, kind: str) -> ToolResult:
    """The error for a path that is not a regular file (``kind`` from :class:`NotRegularFileError`)."""
    if kind == "a directory":
        return error(f"{path!r} is a directory, not a file. Use list_dir(path={show(ctx, p)!r}) to see its contents.")
    return error(
        f"{path!r} is {kind}, not a regular file; file tools only read and write regular files "
        "(a pipe or device could block forever). Use bash if you really mean to use it."
    )


def open_error(ctx: ToolContext, p: Path, path: str, exc: OSError, verb: str = "read") -> ToolResult:
    """The error result for a failed :func:`open_regular`."""
    if isinstance(exc, NotRegularFileError):
        return not_regular(ctx, p, path, exc.kind)
    if isinstance(exc, FileNotFoundError):
        return missing(ctx, p, path)
    return error(f"Cannot {verb} {path!r}: {exc.strerror or exc}.")


def binary_error(ctx: ToolContext, p: Path, size: int) -> ToolResult:
    name = show(ctx, p)
    return error(
        f"{name} is a binary file ({size} bytes); this tool only handles text. "
        f"Use bash (e.g. `file {name}` or `xxd {name} | head`) to inspect it."
    )


def clip(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return f"{line[:MAX_LINE_CHARS]}… [line cut: {len(line)} characters; use bash (cut, fold) to see the rest]"


def human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover


def megabytes(size: int) -> str:
    """A limit in decimal megabytes, as stated in messages (5_000_000 -> "5 MB")."""
    return f"{size / 1_000_000:g} MB"
