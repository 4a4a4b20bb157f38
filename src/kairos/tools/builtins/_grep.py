"""The ``grep`` tool: a bounded, honest recursive search.

Bounded: the pattern runs on the ``regex`` module (Python ``re`` syntax, version 0) with a
timeout on every line, so a catastrophic pattern such as ``(a|aa)+$`` ends with an error telling
the model to simplify it instead of hanging the agent; the whole search has a time budget.
Honest: every file it did not search is reported with the reason (too large, binary,
unreadable, ...) instead of silently answering "no matches".
"""

from __future__ import annotations

import fnmatch
import io
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import regex  # type: ignore[import-untyped,unused-ignore]  # no stubs in the dev extras (types-regex)

from kairos.tools.base import ToolContext, ToolResult
from kairos.tools.builtins._fs import (
    SNIFF_BYTES,
    error,
    looks_binary,
    megabytes,
    missing,
    open_regular,
    resolve,
    show,
)
from kairos.tools.function import tool

OUTPUT_BUDGET = 10_000
MAX_GREP_RESULTS = 500
MAX_GREP_FILE_BYTES = 5_000_000
GREP_TIME_BUDGET_S = 20.0
"""Wall-clock budget of one grep call; files not reached by then are reported as not searched."""
GREP_LINE_TIMEOUT_S = 1.0
"""How long the pattern may take on one line before grep calls the pattern too slow."""
GREP_LINE_CHARS = 200
SKIP_DIRS = frozenset({".git", ".venv", ".kairos", "__pycache__", "node_modules"})
_NAMES_SHOWN = 5
_TOO_LARGE = "file{s} over "


@dataclass(slots=True)
class _Skipped:
    """Files grep did not search, by reason, in the order met."""

    reasons: dict[str, list[str]] = field(default_factory=dict)
    """``{s}`` in a reason is the plural ending; the list holds the files' names."""

    def add(self, reason: str, name: str) -> None:
        self.reasons.setdefault(reason, []).append(name)

    def note(self) -> str:
        if not self.reasons:
            return ""
        parts = []
        for reason, names in self.reasons.items():
            shown = ", ".join(names[:_NAMES_SHOWN])
            more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
            parts.append(f"{len(names)} {reason.format(s='' if len(names) == 1 else 's')}: {shown}{more}")
        large = any(r.startswith(_TOO_LARGE) for r in self.reasons)
        hint = "; search large files with bash, e.g. grep -n PATTERN FILE" if large else ""
        return "[skipped " + "; ".join(parts) + hint + "]"


def _glob_match(rel: str, name: str, pattern: str) -> bool:
    if "/" not in pattern:
        return fnmatch.fnmatchcase(name, pattern)
    return fnmatch.fnmatchcase(rel, pattern) or fnmatch.fnmatchcase(rel, pattern.replace("**/", ""))


def _walk(root: Path, skip: frozenset[Path]) -> Iterator[Path]:
    """Files under ``root`` in path order, skipping SKIP_DIRS and ``skip`` (kairos's state).

    Symlinked directories are not entered.
    """
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
        elif entry.name not in SKIP_DIRS and Path(entry.path) not in skip:
            yield from _walk(Path(entry.path), skip)


def _why_not(ctx: ToolContext, p: Path) -> str | None:
    """Why ``p`` is not searched (a reason for the skipped note), or None to search it."""
    try:
        if p.is_symlink():
            try:
                ctx.resolve_path(str(p))  # a link may point out of the workspace or into kairos's state
            except PermissionError:
                return "link{s} to outside the workspace or into kairos's state"
        st = p.stat()
    except (OSError, RuntimeError):
        return "unreadable file{s}"
    if stat.S_ISDIR(st.st_mode):
        return "link{s} to directories (not followed)"
    if not stat.S_ISREG(st.st_mode):
        return "special file{s} (pipes, sockets, devices)"
    if st.st_size > MAX_GREP_FILE_BYTES:
        return _TOO_LARGE + megabytes(MAX_GREP_FILE_BYTES)
    return None


def _snippet(line: str, start: int) -> str:
    if len(line) <= GREP_LINE_CHARS:
        return line
    lo = max(0, start - GREP_LINE_CHARS // 3)
    hi = lo + GREP_LINE_CHARS
    return ("…" if lo else "") + line[lo:hi] + ("…" if hi < len(line) else "")


class _TooSlow(Exception):
    """The pattern ran out of time on a line (``budget``: the whole search's budget ran out)."""

    def __init__(self, where: str, budget: bool) -> None:
        super().__init__(where)
        self.where = where
        self.budget = budget


@dataclass(slots=True)
class _Matches:
    """Matching rows collected so far, within the result cap and the output budget."""

    cap: int
    deadline: float
    rows: list[str] = field(default_factory=list)
    used: int = 0
    notice: str = ""

    def search(self, rx: regex.Pattern[str], f: BinaryIO, shown: str) -> None:
        """Add the matching lines of ``f``; sets ``notice`` when the cap or the budget is reached.

        Raises:
            _TooSlow: the pattern took too long on one line.
            OSError: the file cannot be read.
        """
        with io.TextIOWrapper(f, encoding="utf-8", errors="replace") as text:
            for lineno, raw in enumerate(text, start=1):
                line = raw.rstrip("\r\n")
                left = self.deadline - time.monotonic()
                try:
                    m = rx.search(line, timeout=max(min(GREP_LINE_TIMEOUT_S, left), 0.001))
                except TimeoutError:
                    raise _TooSlow(f"{shown}:{lineno}", budget=left <= GREP_LINE_TIMEOUT_S) from None
                if m is None:
                    continue
                row = f"{shown}:{lineno}: {_snippet(line, m.start())}"
                if len(self.rows) >= self.cap:
                    self.notice = f"[stopped at {self.cap} matches; there are more: narrow the pattern, path or glob]"
                    return
                if self.used + len(row) + 1 > OUTPUT_BUDGET:
                    self.notice = (
                        f"[output limit reached after {len(self.rows)} matches; narrow the pattern, path or glob]"
                    )
                    return
                self.rows.append(row)
                self.used += len(row) + 1


@tool(read_only=True)
def grep(
    pattern: str, path: str = ".", glob: str | None = None, max_results: int = 50, *, ctx: ToolContext
) -> ToolResult:
    r"""Search text files for a Python regular expression, recursively; prints `path:line: text` for each matching line.
    Use it to find where something is defined or used. Skips binary files, files over 5 MB and .git, .venv,
    node_modules, __pycache__ (it says which files it skipped).
    Case-sensitive: start the pattern with (?i) to ignore case. Escape ( ) [ ] . * + ? with a backslash to match them.

    Args:
        pattern: Python regex, e.g. "def main", "class \w+Error", "(?i)todo".
        path: file or directory to search, relative to the current directory.
        glob: only search files whose name matches, e.g. "*.py" or "src/**/*.ts".
        max_results: stop after this many matching lines.
    """
    try:
        rx = regex.compile(pattern, flags=regex.VERSION0)
    except (regex.error, OverflowError, RecursionError) as exc:
        msg, pos = getattr(exc, "msg", str(exc)), getattr(exc, "pos", None)
        return error(
            f"Invalid regular expression {pattern!r}: {msg}{f' (at position {pos})' if pos is not None else ''}. "
            "grep uses Python `re` syntax: put a backslash before special characters such as ( ) [ ] { } . * + ? | "
            "to match them literally, e.g. 'foo\\(' to find 'foo('."
        )
    root = resolve(ctx, path)
    if isinstance(root, ToolResult):
        return root
    if not root.exists():
        return missing(ctx, root, path)
    found = _Matches(cap=min(max(max_results, 1), MAX_GREP_RESULTS), deadline=time.monotonic() + GREP_TIME_BUDGET_S)
    state = frozenset(d for d in ctx.state_dirs if d != root and d not in root.parents)
    skipped = _Skipped()
    searched = 0
    try:
        for p in _walk(root, state):
            if time.monotonic() > found.deadline:
                raise _TooSlow(show(ctx, p), budget=True)
            rel = Path(os.path.relpath(p, root)).as_posix()
            if glob and p != root and not _glob_match(rel, p.name, glob):
                continue
            shown = show(ctx, p)
            if (reason := _why_not(ctx, p)) is not None:
                skipped.add(reason, shown)
                continue
            try:
                f, _ = open_regular(p)  # never blocks, even on a file swapped for a pipe since the check
                with f:
                    if looks_binary(f.read(SNIFF_BYTES)):
                        skipped.add("binary file{s}", shown)
                        continue
                    f.seek(0)
                    searched += 1
                    found.search(rx, f, shown)
            except OSError:
                skipped.add("unreadable file{s}", shown)
            if found.notice:
                break
    except _TooSlow as slow:
        if not slow.budget:
            so_far = f" ({len(found.rows)} matches found before it):\n" + "\n".join(found.rows) if found.rows else "."
            return error(
                f"The pattern {pattern!r} is too slow: it ran over {GREP_LINE_TIMEOUT_S:g} s on a single line "
                f"({slow.where}) and the search was stopped; simplify it. Avoid nested or overlapping repetition "
                "such as (a+)+, (a|aa)+ or (.*x)*; anchor it or use a literal word from the line you want"
                f"{so_far}"
            )
        found.notice = (
            f"[search stopped after {GREP_TIME_BUDGET_S:g} s at {slow.where}; files after it were not searched: "
            "narrow the path or glob]"
        )
    tail = [n for n in (found.notice, skipped.note()) if n]
    if not found.rows:
        what = f" matching glob {glob!r}" if glob else ""
        head = f"No matches for {pattern!r} in {show(ctx, root)} ({searched} text files{what} searched)."
        return ToolResult("\n".join([head, *tail]))
    return ToolResult("\n".join(found.rows + tail))
