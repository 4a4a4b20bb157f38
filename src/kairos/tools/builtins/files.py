"""File tools: ``read_file``, ``list_dir``, ``grep``, ``write_file`` and ``edit_file``.

Every path goes through :meth:`ToolContext.resolve_path` (confined to the workspace, relative to
the session's cwd; writes never reach kairos's own state in ``.kairos``), and paths are shown
back relative to that cwd so the model can pass them straight to the next call. Each tool keeps
its own output under ``OUTPUT_BUDGET`` characters, so the harness's cap never cuts a listing in
a way the header does not explain. Files are opened with :func:`~._fs.open_regular`, so a named
pipe or device in the workspace is refused instead of blocking the tool forever; ``grep`` lives
in :mod:`._grep`. After a write, the file is checked (ruff, JSON/TOML/YAML parsers) and the
findings are appended to the result (:mod:`kairos.tools.toolsets.checkers`).
"""

from __future__ import annotations

import difflib
import io
import os
import re
from collections.abc import Iterator

import regex  # type: ignore[import-untyped,unused-ignore]  # no stubs in the dev extras (types-regex)

from kairos.tools.base import ToolContext, ToolResult
from kairos.tools.builtins._fs import (
    SNIFF_BYTES,
    binary_error,
    clip,
    error,
    human,
    looks_binary,
    megabytes,
    missing,
    open_error,
    open_regular,
    resolve,
    show,
)
from kairos.tools.builtins._grep import GREP_TIME_BUDGET_S, MAX_GREP_FILE_BYTES, OUTPUT_BUDGET, SKIP_DIRS, grep
from kairos.tools.function import tool
from kairos.tools.toolsets.checkers import with_checks

__all__ = [
    "GREP_TIME_BUDGET_S",
    "MAX_EDIT_FILE_BYTES",
    "MAX_GREP_FILE_BYTES",
    "MAX_LIST_ENTRIES",
    "OUTPUT_BUDGET",
    "SKIP_DIRS",
    "edit_file",
    "grep",
    "list_dir",
    "read_file",
    "write_file",
]

MAX_LIST_ENTRIES = 300
MAX_EDIT_FILE_BYTES = 20_000_000
"""edit_file refuses larger files (it holds the file, and the hint search, in memory)."""
HINT_WINDOW_LINES = 10_000
"""Lines of the file edit_file compares with `old` to suggest the closest one."""
HINT_TIMEOUT_S = 2.0
"""How long edit_file looks for `old` with other whitespace before giving up on that hint."""
_HINT_LINE_CHARS = 300


@tool(read_only=True)
def read_file(path: str, offset: int = 1, limit: int = 200, *, ctx: ToolContext) -> ToolResult:
    """Read a text file. Shows numbered lines; the number and tab before each line are not part of the file.
    Reads up to `limit` lines starting at line `offset`; the first line says which lines you got and how to read on.
    Cannot read directories (use list_dir) or binary files.

    Args:
        path: file path, relative to the current directory.
        offset: first line to show (1 = start of the file).
        limit: how many lines to show at most.
    """
    p = resolve(ctx, path)
    if isinstance(p, ToolResult):
        return p
    try:
        f, st = open_regular(p)
    except OSError as exc:
        return open_error(ctx, p, path, exc)
    first = max(offset, 1)
    last_wanted = first + max(limit, 1) - 1
    shown: list[tuple[int, str]] = []
    used = 0
    full = False
    total = 0
    try:
        with f:
            if looks_binary(f.read(SNIFF_BYTES)):
                return binary_error(ctx, p, st.st_size)
            f.seek(0)
            with io.TextIOWrapper(f, encoding="utf-8", errors="replace") as text:
                for total, raw in enumerate(text, start=1):
                    if full or not first <= total <= last_wanted:
                        continue
                    line = clip(raw.rstrip("\r\n"))
                    if shown and used + len(line) + 8 > OUTPUT_BUDGET:
                        full = True
                        continue
                    shown.append((total, line))
                    used += len(line) + 8
    except OSError as exc:
        return error(f"Cannot read {path!r}: {exc.strerror or exc}.")
    name = show(ctx, p)
    if total == 0:
        return ToolResult(f"{name}: empty file (0 lines)")
    if first > total:
        return error(
            f"offset={first} is past the end of {name}, which has {total} lines; use an offset from 1 to {total}."
        )
    last = shown[-1][0]
    header = f"{name}: lines {first}–{last} of {total}"
    if last < total:
        header += f"; {total - last} more lines, read on with offset={last + 1}"
    width = len(str(last))
    body = "\n".join(f"{n:>{width}}\t{line}" for n, line in shown)
    return ToolResult(f"{header}\n{body}")


@tool(read_only=True)
def list_dir(path: str = ".", *, ctx: ToolContext) -> ToolResult:
    """List a directory: one entry per line, sorted, directories end with `/`, files show their size.
    Use it to find files before reading them. Includes hidden files; does not recurse into subdirectories.

    Args:
        path: directory path, relative to the current directory ("." = here).
    """
    p = resolve(ctx, path)
    if isinstance(p, ToolResult):
        return p
    if not p.exists():
        return missing(ctx, p, path)
    if not p.is_dir():
        return error(f"{path!r} is a file, not a directory. Use read_file(path={show(ctx, p)!r}) to read it.")
    try:
        with os.scandir(p) as it:
            entries = sorted(it, key=lambda e: (e.name.lower(), e.name))
    except OSError as exc:
        return error(f"Cannot list {path!r}: {exc.strerror or exc}.")
    name = show(ctx, p)
    header = f"{name}/ ({len(entries)} entries)" if entries else f"{name}/ (empty directory)"
    rows = [header]
    used = len(header)
    for count, entry in enumerate(entries):
        row = _entry_row(entry)
        if count >= MAX_LIST_ENTRIES or used + len(row) + 1 > OUTPUT_BUDGET:
            rows.append(
                f"[showing {count} of {len(entries)} entries; list a subdirectory, or use grep with glob "
                "or bash (find, ls) to narrow it down]"
            )
            break
        rows.append(row)
        used += len(row) + 1
    return ToolResult("\n".join(rows))


def _entry_row(entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            return f"{entry.name} -> {os.readlink(entry.path)}"
        if entry.is_dir():
            return f"{entry.name}/"
        return f"{entry.name}  {human(entry.stat().st_size)}"
    except OSError:
        return f"{entry.name}  (unreadable)"


def _count_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


@tool(side_effects=True)
def write_file(path: str, content: str, *, ctx: ToolContext) -> ToolResult:
    """Create a file or replace its whole content; missing parent directories are created.
    Use edit_file to change part of an existing file instead of rewriting it.

    Args:
        path: file path, relative to the current directory.
        content: the complete new text of the file.
    """
    p = resolve(ctx, path, write=True)
    if isinstance(p, ToolResult):
        return p
    if p.is_dir():
        return error(f"{path!r} is a directory; give a file path inside it, e.g. {show(ctx, p / 'notes.txt')!r}.")
    data = content.encode("utf-8")
    try:
        existed = os.path.lexists(p)
        p.parent.mkdir(parents=True, exist_ok=True)
        f, st = open_regular(p, write=True)
    except OSError as exc:
        return open_error(ctx, p, path, exc, "write")
    try:
        with f:
            f.truncate(0)
            f.write(data)
    except OSError as exc:
        return error(f"Cannot write {path!r}: {exc.strerror or exc}.")
    size = f"{len(data)} bytes, {_count_lines(content)} lines"
    if existed:
        done = ToolResult(f"Overwrote {show(ctx, p)} ({size}; it had {st.st_size} bytes).")
    else:
        done = ToolResult(f"Created {show(ctx, p)} ({size}).")
    return with_checks(p, content, done, ctx.environment())


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _no_match_hint(text: str, old: str) -> str:
    """Why `old` may not match, in bounded time and memory (linear in the file; no word lists)."""
    if re.match(r"\s*\d+\t", old):
        return "It looks like `old` includes line numbers from read_file; leave them out."
    words = old.split()
    if words:
        # The words of `old` with any whitespace between them; a timeout because a run of
        # repeated words makes the search quadratic.
        loose = regex.compile(r"\s+".join(regex.escape(w) for w in words))
        try:
            if loose.search(text, timeout=HINT_TIMEOUT_S) is not None:
                return "The text is there but its whitespace or indentation differs; copy it exactly."
        except TimeoutError:
            pass
    first = next((line.strip() for line in old.splitlines() if line.strip()), "")
    if not first:
        return ""
    # Only a window of the file: difflib is quadratic per line and a list of every line of a
    # large file costs many times its size.
    window = [(n, line.strip()) for n, line in enumerate(_lines(text, 0, HINT_WINDOW_LINES), start=1)]
    keys = [line[:_HINT_LINE_CHARS] for _, line in window]
    close = difflib.get_close_matches(first[:_HINT_LINE_CHARS], keys, n=1, cutoff=0.6)
    if not close:
        return ""
    n, line = window[keys.index(close[0])]
    shown = line if len(line) <= _HINT_LINE_CHARS else line[:_HINT_LINE_CHARS] + "…"
    return f"The closest line is line {n}: {shown!r}."


def _lines(text: str, start: int, count: int) -> Iterator[str]:
    """Up to ``count`` lines of ``text`` from offset ``start``, without splitting the whole text."""
    for _ in range(count):
        end = text.find("\n", start)
        yield text[start : end if end >= 0 else len(text)].rstrip("\r")
        if end < 0:
            return
        start = end + 1


@tool(side_effects=True)
def edit_file(path: str, old: str, new: str, *, ctx: ToolContext) -> ToolResult:
    """Replace one exact piece of text in a file with new text; read the file first.
    `old` must match exactly once, spaces and indentation included; add surrounding lines to make it unique.
    To create a file or rewrite all of it, use write_file. Files over 20 MB: use bash (sed, python).

    Args:
        path: file path, relative to the current directory.
        old: the exact text to replace, copied from the file (without line numbers).
        new: the text to put in its place ("" deletes it).
    """
    p = resolve(ctx, path, write=True)
    if isinstance(p, ToolResult):
        return p
    if not old:
        return error("`old` is empty; give the exact text to replace. To create a file, use write_file.")
    if old == new:
        return error("`old` and `new` are the same, so nothing would change.")
    try:
        f, st = open_regular(p)
    except OSError as exc:
        return open_error(ctx, p, path, exc)
    name = show(ctx, p)
    try:
        with f:
            if st.st_size > MAX_EDIT_FILE_BYTES:
                return error(
                    f"{name} is {human(st.st_size)} ({st.st_size} bytes); edit_file only edits files up to "
                    f"{megabytes(MAX_EDIT_FILE_BYTES)}. Use bash instead, e.g. `sed -i 's/old/new/' {name}` or a "
                    "short python script, and check the result with grep."
                )
            raw = f.read(MAX_EDIT_FILE_BYTES + 1)
    except OSError as exc:
        return error(f"Cannot read {path!r}: {exc.strerror or exc}.")
    if len(raw) > MAX_EDIT_FILE_BYTES:  # grew since fstat
        return error(f"{name} is over {megabytes(MAX_EDIT_FILE_BYTES)}; use bash (sed, python) to edit it.")
    if b"\0" in raw[:SNIFF_BYTES]:
        return binary_error(ctx, p, len(raw))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return error(f"{name} is not valid UTF-8 text, so edit_file cannot change it safely; use bash instead.")
    del raw  # only the text is needed from here on: halve the peak memory of the hint search
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")  # the file uses Windows line ends
        count = text.count(old)
    if count == 0:
        hint = _no_match_hint(text, old)
        return error(
            f"No match for `old` in {name}. {hint + ' ' if hint else ''}"
            f"Re-read the file with read_file and copy the exact text (indentation included, without line numbers)."
        )
    if count > 1:
        starts: list[int] = []
        at = text.find(old)
        while at >= 0 and len(starts) < 10:
            starts.append(_line_of(text, at))
            at = text.find(old, at + 1)
        where = ", ".join(str(n) for n in starts) + (", …" if count > len(starts) else "")
        return error(
            f"`old` matches {count} places in {name} (lines {where}); it must match exactly one. "
            "Include more surrounding lines in `old` so it is unique."
        )
    index = text.index(old)
    updated = text[:index] + new + text[index + len(old) :]
    try:
        w, _ = open_regular(p, write=True)
        with w:
            w.truncate(0)
            w.write(updated.encode("utf-8"))
    except OSError as exc:
        return open_error(ctx, p, path, exc, "write")
    first = _line_of(updated, index)
    last = first + new.count("\n")
    lo = max(first - 3, 1)
    hi = min(last + 3, _count_lines(updated), first + 30)
    at = updated.rfind("\n", 0, index) + 1  # the start of line `first`, then back to line `lo`
    for _ in range(first - lo):
        at = updated.rfind("\n", 0, at - 1) + 1
    width = len(str(hi))
    shown = zip(range(lo, hi + 1), _lines(updated, at, hi - lo + 1), strict=False)
    body = "\n".join(f"{n:>{width}}\t{clip(line)}" for n, line in shown)
    done = ToolResult(
        f"Edited {name}: lines {lo}–{hi} now read:\n{body}" if body else f"Edited {name}; it is now empty."
    )
    return with_checks(p, updated, done, ctx.environment())
