"""File tools: ``read_file``, ``list_dir``, ``grep``, ``write_file`` and ``edit_file``.

Every path goes through :meth:`ToolContext.resolve_path` (confined to the workspace, relative to
the session's cwd), and paths are shown back relative to that cwd so the model can pass them
straight to the next call. Each tool keeps its own output under ``OUTPUT_BUDGET`` characters, so
the harness's cap never cuts a listing in a way the header does not explain.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from kairos.tools.base import ToolContext, ToolResult, tool

OUTPUT_BUDGET = 10_000
"""Characters of listing a tool returns at most (below the harness's default cap)."""
MAX_LINE_CHARS = 2_000
MAX_LIST_ENTRIES = 300
MAX_GREP_RESULTS = 500
MAX_GREP_FILE_BYTES = 5_000_000
GREP_TIME_BUDGET_S = 20.0
GREP_LINE_CHARS = 200
SKIP_DIRS = frozenset({".git", ".venv", ".kairos", "__pycache__", "node_modules"})
_SNIFF_BYTES = 8192


def _error(message: str) -> ToolResult:
    return ToolResult(message, is_error=True)


def _resolve(ctx: ToolContext, path: str) -> Path | ToolResult:
    try:
        return ctx.resolve_path(path)
    except PermissionError as exc:
        return _error(f"Access denied: {exc}.")
    except (OSError, RuntimeError, ValueError) as exc:
        return _error(f"Invalid path {path!r}: {exc}.")


def _show(ctx: ToolContext, p: Path) -> str:
    """``p`` relative to the cwd: the form the next tool call accepts as is."""
    return Path(os.path.relpath(p, ctx.cwd or ctx.workspace)).as_posix()


def _looks_binary(sample: bytes) -> bool:
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


def _sniff(p: Path) -> bytes:
    with p.open("rb") as f:
        return f.read(_SNIFF_BYTES)


def _missing(ctx: ToolContext, p: Path, path: str) -> ToolResult:
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
        hint = " Similar names there: " + ", ".join(_show(ctx, parent / n) for n in close) + "."
    where = _show(ctx, parent)
    return _error(f"File not found: {path!r}.{hint} Use list_dir(path={where!r}) to see what exists.")


def _not_regular(ctx: ToolContext, p: Path, path: str) -> ToolResult | None:
    """An error result unless ``p`` is an existing regular file."""
    if p.is_dir():
        return _error(f"{path!r} is a directory, not a file. Use list_dir(path={_show(ctx, p)!r}) to see its contents.")
    if not p.exists():
        return _missing(ctx, p, path)
    if not p.is_file():
        return _error(f"{path!r} is not a regular file (a device, socket or pipe); it cannot be read as text.")
    return None


def _binary_error(ctx: ToolContext, p: Path) -> ToolResult:
    name = _show(ctx, p)
    return _error(
        f"{name} is a binary file ({p.stat().st_size} bytes); this tool only handles text. "
        f"Use bash (e.g. `file {name}` or `xxd {name} | head`) to inspect it."
    )


def _clip(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return f"{line[:MAX_LINE_CHARS]}… [line cut: {len(line)} characters; use bash (cut, fold) to see the rest]"


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover


@tool
def read_file(path: str, offset: int = 1, limit: int = 200, *, ctx: ToolContext) -> ToolResult:
    """Read a text file. Shows numbered lines; the number and tab before each line are not part of the file.
    Reads up to `limit` lines starting at line `offset`; the first line says which lines you got and how to read on.
    Cannot read directories (use list_dir) or binary files.

    Args:
        path: file path, relative to the current directory.
        offset: first line to show (1 = start of the file).
        limit: how many lines to show at most.
    """
    p = _resolve(ctx, path)
    if isinstance(p, ToolResult):
        return p
    try:
        if (err := _not_regular(ctx, p, path)) is not None:
            return err
        if _looks_binary(_sniff(p)):
            return _binary_error(ctx, p)
        first = max(offset, 1)
        last_wanted = first + max(limit, 1) - 1
        shown: list[tuple[int, str]] = []
        used = 0
        full = False
        total = 0
        with p.open(encoding="utf-8", errors="replace") as f:
            for total, raw in enumerate(f, start=1):
                if full or not first <= total <= last_wanted:
                    continue
                line = _clip(raw.rstrip("\r\n"))
                if shown and used + len(line) + 8 > OUTPUT_BUDGET:
                    full = True
                    continue
                shown.append((total, line))
                used += len(line) + 8
    except OSError as exc:
        return _error(f"Cannot read {path!r}: {exc.strerror or exc}.")
    name = _show(ctx, p)
    if total == 0:
        return ToolResult(f"{name}: empty file (0 lines)")
    if first > total:
        return _error(
            f"offset={first} is past the end of {name}, which has {total} lines; use an offset from 1 to {total}."
        )
    last = shown[-1][0]
    header = f"{name}: lines {first}–{last} of {total}"
    if last < total:
        header += f"; {total - last} more lines, read on with offset={last + 1}"
    width = len(str(last))
    body = "\n".join(f"{n:>{width}}\t{line}" for n, line in shown)
    return ToolResult(f"{header}\n{body}")


@tool
def list_dir(path: str = ".", *, ctx: ToolContext) -> ToolResult:
    """List a directory: one entry per line, sorted, directories end with `/`, files show their size.
    Use it to find files before reading them. Includes hidden files; does not recurse into subdirectories.

    Args:
        path: directory path, relative to the current directory ("." = here).
    """
    p = _resolve(ctx, path)
    if isinstance(p, ToolResult):
        return p
    if not p.exists():
        return _missing(ctx, p, path)
    if not p.is_dir():
        return _error(f"{path!r} is a file, not a directory. Use read_file(path={_show(ctx, p)!r}) to read it.")
    try:
        with os.scandir(p) as it:
            entries = sorted(it, key=lambda e: (e.name.lower(), e.name))
    except OSError as exc:
        return _error(f"Cannot list {path!r}: {exc.strerror or exc}.")
    name = _show(ctx, p)
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
        return f"{entry.name}  {_human(entry.stat().st_size)}"
    except OSError:
        return f"{entry.name}  (unreadable)"


def _glob_match(rel: str, name: str, pattern: str) -> bool:
    if "/" not in pattern:
        return fnmatch.fnmatchcase(name, pattern)
    return fnmatch.fnmatchcase(rel, pattern) or fnmatch.fnmatchcase(rel, pattern.replace("**/", ""))


def _walk(root: Path) -> Iterator[Path]:
    """Files under ``root`` in path order, skipping SKIP_DIRS; symlinked directories are not entered."""
    if not root.is_dir():
        yield root
        return
    try:
        with os.scandir(root) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            yield Path(entry.path)
        elif entry.name not in SKIP_DIRS:
            yield from _walk(Path(entry.path))


def _searchable(ctx: ToolContext, p: Path) -> bool:
    """A regular, not-too-large file inside the workspace (symlinks may point out of it)."""
    try:
        if p.is_symlink():
            target = p.resolve()
            if target != ctx.workspace and ctx.workspace not in target.parents:
                return False
        st = p.stat()
    except (OSError, RuntimeError):
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size <= MAX_GREP_FILE_BYTES


def _snippet(line: str, start: int) -> str:
    if len(line) <= GREP_LINE_CHARS:
        return line
    lo = max(0, start - GREP_LINE_CHARS // 3)
    hi = lo + GREP_LINE_CHARS
    return ("…" if lo else "") + line[lo:hi] + ("…" if hi < len(line) else "")


@tool
def grep(
    pattern: str, path: str = ".", glob: str | None = None, max_results: int = 50, *, ctx: ToolContext
) -> ToolResult:
    """Search text files for a Python regular expression, recursively; prints `path:line: text` for each matching line.
    Use it to find where something is defined or used. Skips binary files and .git, .venv, node_modules, __pycache__.
    Case-sensitive: start the pattern with (?i) to ignore case. Escape ( ) [ ] . * + ? with a backslash to match them.

    Args:
        pattern: Python regex, e.g. "def main", "class \\w+Error", "(?i)todo".
        path: file or directory to search, relative to the current directory.
        glob: only search files whose name matches, e.g. "*.py" or "src/**/*.ts".
        max_results: stop after this many matching lines.
    """
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        return _error(
            f"Invalid regular expression {pattern!r}: {exc.msg} (at position {exc.pos}). grep uses Python `re` "
            "syntax: put a backslash before special characters such as ( ) [ ] { } . * + ? | to match them "
            "literally, e.g. 'foo\\(' to find 'foo('."
        )
    root = _resolve(ctx, path)
    if isinstance(root, ToolResult):
        return root
    if not root.exists():
        return _missing(ctx, root, path)
    cap = min(max(max_results, 1), MAX_GREP_RESULTS)
    deadline = time.monotonic() + GREP_TIME_BUDGET_S
    rows: list[str] = []
    used = 0
    searched = 0
    notice = ""
    for p in _walk(root):
        if time.monotonic() > deadline:
            notice = f"[search stopped after {GREP_TIME_BUDGET_S:g} s; narrow the path or glob]"
            break
        rel = Path(os.path.relpath(p, root)).as_posix()
        if glob and p != root and not _glob_match(rel, p.name, glob):
            continue
        if not _searchable(ctx, p):
            continue
        try:
            if _looks_binary(_sniff(p)):
                continue
            searched += 1
            shown = _show(ctx, p)
            with p.open(encoding="utf-8", errors="replace") as f:
                for lineno, raw in enumerate(f, start=1):
                    line = raw.rstrip("\r\n")
                    m = rx.search(line)
                    if m is None:
                        continue
                    row = f"{shown}:{lineno}: {_snippet(line, m.start())}"
                    if len(rows) >= cap:
                        notice = f"[stopped at {cap} matches; there are more: narrow the pattern, path or glob]"
                    elif used + len(row) + 1 > OUTPUT_BUDGET:
                        notice = f"[output limit reached after {len(rows)} matches; narrow the pattern, path or glob]"
                    else:
                        rows.append(row)
                        used += len(row) + 1
                        continue
                    break
        except OSError:
            continue
        if notice:
            break
    if not rows:
        what = f" matching glob {glob!r}" if glob else ""
        return ToolResult(f"No matches for {pattern!r} in {_show(ctx, root)} ({searched} text files{what} searched).")
    return ToolResult("\n".join(rows + ([notice] if notice else [])))


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
    p = _resolve(ctx, path)
    if isinstance(p, ToolResult):
        return p
    if p.is_dir():
        return _error(f"{path!r} is a directory; give a file path inside it, e.g. {_show(ctx, p / 'notes.txt')!r}.")
    data = content.encode("utf-8")
    try:
        existed = p.exists()
        before = p.stat().st_size if existed else 0
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    except OSError as exc:
        return _error(f"Cannot write {path!r}: {exc.strerror or exc}.")
    size = f"{len(data)} bytes, {_count_lines(content)} lines"
    if existed:
        return ToolResult(f"Overwrote {_show(ctx, p)} ({size}; it had {before} bytes).")
    return ToolResult(f"Created {_show(ctx, p)} ({size}).")


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _no_match_hint(text: str, old: str) -> str:
    if re.match(r"\s*\d+\t", old):
        return "It looks like `old` includes line numbers from read_file; leave them out."
    if " ".join(old.split()) in " ".join(text.split()):
        return "The text is there but its whitespace or indentation differs; copy it exactly."
    first = next((line.strip() for line in old.splitlines() if line.strip()), "")
    lines = text.splitlines()
    stripped = [line.strip() for line in lines[:20_000]]
    close = difflib.get_close_matches(first, stripped, n=1, cutoff=0.6) if first else []
    if close:
        n = stripped.index(close[0])
        return f"The closest line is line {n + 1}: {_clip(lines[n].strip())!r}."
    return ""


@tool(side_effects=True)
def edit_file(path: str, old: str, new: str, *, ctx: ToolContext) -> ToolResult:
    """Replace one exact piece of text in a file with new text; read the file first.
    `old` must match exactly once, spaces and indentation included; add surrounding lines to make it unique.
    To create a file or rewrite all of it, use write_file.

    Args:
        path: file path, relative to the current directory.
        old: the exact text to replace, copied from the file (without line numbers).
        new: the text to put in its place ("" deletes it).
    """
    p = _resolve(ctx, path)
    if isinstance(p, ToolResult):
        return p
    if not old:
        return _error("`old` is empty; give the exact text to replace. To create a file, use write_file.")
    if old == new:
        return _error("`old` and `new` are the same, so nothing would change.")
    try:
        if (err := _not_regular(ctx, p, path)) is not None:
            return err
        raw = p.read_bytes()
    except OSError as exc:
        return _error(f"Cannot read {path!r}: {exc.strerror or exc}.")
    name = _show(ctx, p)
    if b"\0" in raw[:_SNIFF_BYTES]:
        return _binary_error(ctx, p)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _error(f"{name} is not valid UTF-8 text, so edit_file cannot change it safely; use bash instead.")
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")  # the file uses Windows line ends
        count = text.count(old)
    if count == 0:
        hint = _no_match_hint(text, old)
        return _error(
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
        return _error(
            f"`old` matches {count} places in {name} (lines {where}); it must match exactly one. "
            "Include more surrounding lines in `old` so it is unique."
        )
    index = text.index(old)
    updated = text[:index] + new + text[index + len(old) :]
    try:
        p.write_bytes(updated.encode("utf-8"))
    except OSError as exc:
        return _error(f"Cannot write {path!r}: {exc.strerror or exc}.")
    first = _line_of(updated, index)
    last = first + new.count("\n")
    lines = [line.rstrip("\r") for line in updated.split("\n")[: _count_lines(updated)]]
    lo, hi = max(first - 3, 1), min(last + 3, len(lines), first + 30)
    width = len(str(hi))
    body = "\n".join(f"{n:>{width}}\t{_clip(lines[n - 1])}" for n in range(lo, hi + 1))
    return ToolResult(
        f"Edited {name}: lines {lo}–{hi} now read:\n{body}" if body else f"Edited {name}; it is now empty."
    )
