"""The file tools' safety limits: kairos's state, pipes, slow patterns, huge files, skipped files."""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from kairos.tools.base import Tool, ToolContext, ToolResult
from kairos.tools.builtins import _grep, files
from kairos.tools.builtins.files import edit_file, grep, read_file, write_file


@pytest.fixture
def ws(ctx: ToolContext) -> Path:
    return ctx.workspace


async def run(t: Tool, ctx: ToolContext, **args: Any) -> ToolResult:
    return await t.call(args, ctx)


# --- kairos's own state ---------------------------------------------------------------------


@pytest.fixture
def state(ws: Path) -> Path:
    st = ws / ".kairos"
    (st / "spill").mkdir(parents=True)
    (st / "kairos.db").write_bytes(b"SQLite format 3\0 ROWS")
    (st / "spill" / "out.txt").write_text("spilled output\n")
    return st


@pytest.mark.parametrize("path", [".kairos/skill-approvals.json", ".kairos/kairos.db", ".kairos/spill/new.txt"])
async def test_write_file_never_writes_kairos_state(ctx: ToolContext, state: Path, path: str) -> None:
    r = await run(write_file, ctx, path=path, content='{"approved": ["evil"]}')
    assert r.is_error
    assert "Access denied" in r.content and "kairos's own state" in r.content and "cannot change it" in r.content
    assert not (state / "skill-approvals.json").exists()
    assert not (state / "spill" / "new.txt").exists()
    assert (state / "kairos.db").read_bytes() == b"SQLite format 3\0 ROWS"


async def test_edit_file_never_writes_kairos_state(ctx: ToolContext, state: Path) -> None:
    for path in (".kairos/kairos.db", ".kairos/spill/out.txt"):
        r = await run(edit_file, ctx, path=path, old="s", new="x")
        assert r.is_error and "kairos's own state" in r.content
    assert (state / "kairos.db").read_bytes() == b"SQLite format 3\0 ROWS"
    assert (state / "spill" / "out.txt").read_text() == "spilled output\n"


async def test_read_file_reads_spill_files_but_not_the_rest_of_the_state(ctx: ToolContext, state: Path) -> None:
    r = await run(read_file, ctx, path=".kairos/kairos.db")
    assert r.is_error and "kairos's own state" in r.content and "ROWS" not in r.content
    r = await run(read_file, ctx, path=".kairos/spill/out.txt")
    assert not r.is_error and r.content.endswith("1\tspilled output")


async def test_grep_does_not_reach_state_through_links_or_extra_state_dirs(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".kairos").mkdir(parents=True)
    (ws / ".kairos" / "kairos.db").write_text("needle in the db\n")
    (ws / "home").mkdir()  # e.g. KAIROS_HOME inside the workspace
    (ws / "home" / "kairos.db").write_text("needle in the home db\n")
    (ws / "db-link.txt").symlink_to(ws / ".kairos" / "kairos.db")
    (ws / "ok.txt").write_text("needle\n")
    ctx = ToolContext(workspace=ws, state_dirs=(ws / "home",))
    r = await run(grep, ctx, pattern="needle")
    assert r.content.splitlines() == [
        "ok.txt:1: needle",
        "[skipped 1 link to outside the workspace or into kairos's state: db-link.txt]",
    ]
    assert (await run(grep, ctx, pattern="needle", path="home")).is_error


# --- pipes and other non-regular files never block ------------------------------------------


async def no_hang(call: Awaitable[ToolResult], fifo: Path) -> ToolResult:
    """Await ``call``; if it hangs on the pipe, unblock it (so the test fails instead of hanging)."""
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=30)  # a safety net, not a timing assertion
    if not done:
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # gives a blocked open() its other end
        try:
            await task
        finally:
            os.close(fd)
        pytest.fail("the tool blocked on a named pipe")
    return task.result()


@pytest.fixture
def fifo(ws: Path) -> Path:
    p = ws / "pipe"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize(
    ("t", "args"),
    [
        (read_file, {}),
        (write_file, {"content": "x"}),
        (edit_file, {"old": "a", "new": "b"}),
    ],
)
async def test_file_tools_refuse_a_fifo_without_blocking(
    ctx: ToolContext, fifo: Path, t: Tool, args: dict[str, Any]
) -> None:
    r = await no_hang(run(t, ctx, path="pipe", **args), fifo)
    assert r.is_error
    assert "'pipe' is a named pipe (FIFO)" in r.content and "not a regular file" in r.content


async def test_write_file_refuses_a_fifo_that_has_a_reader(ctx: ToolContext, fifo: Path) -> None:
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        r = await no_hang(run(write_file, ctx, path="pipe", content="x"), fifo)
        assert r.is_error and "named pipe (FIFO)" in r.content
        assert os.read(reader, 10) == b""  # nothing was written into the pipe
    finally:
        os.close(reader)


async def test_grep_skips_a_fifo_and_says_so(ctx: ToolContext, ws: Path, fifo: Path) -> None:
    (ws / "a.txt").write_text("hit\n")
    r = await no_hang(run(grep, ctx, pattern="hit"), fifo)
    assert r.content.splitlines() == ["a.txt:1: hit", "[skipped 1 special file (pipes, sockets, devices): pipe]"]


# --- grep: slow patterns, time budget, skipped files ----------------------------------------


async def test_grep_nested_quantifier_ends_promptly(ctx: ToolContext, ws: Path) -> None:
    # Python's `re` backtracks for hours here; the regex module answers at once.
    (ws / "x.txt").write_text("a" * 41 + "!\n")
    r = await run(grep, ctx, pattern="(a+)+$")
    assert not r.is_error and r.content.startswith("No matches for '(a+)+$' in . (1 text files searched)")


async def test_grep_catastrophic_pattern_is_an_error(
    ctx: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_grep, "GREP_LINE_TIMEOUT_S", 0.2)
    (ws / "a.txt").write_text("aa hit\n")
    (ws / "x.txt").write_text("a" * 41 + "!\n")
    r = await run(grep, ctx, pattern="(a|aa)+$|hit")
    assert r.is_error
    assert r.content.startswith("The pattern '(a|aa)+$|hit' is too slow: it ran over 0.2 s on a single line (x.txt:1)")
    assert "simplify it" in r.content
    assert r.content.endswith("(1 matches found before it):\na.txt:1: aa hit")


async def test_grep_stops_at_its_time_budget_and_says_where(
    ctx: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_grep, "GREP_TIME_BUDGET_S", 0.2)  # below the per-line timeout: the budget ends it
    (ws / "a.txt").write_text("aa hit\n")
    (ws / "x.txt").write_text("a" * 41 + "!\n")
    (ws / "y.txt").write_text("hit\n")
    r = await run(grep, ctx, pattern="(a|aa)+$|hit")
    assert not r.is_error
    assert r.content.splitlines() == [
        "a.txt:1: aa hit",
        "[search stopped after 0.2 s at x.txt:1; files after it were not searched: narrow the path or glob]",
    ]


async def test_grep_keeps_python_re_syntax(ctx: ToolContext, ws: Path) -> None:
    (ws / "m.py").write_text("class ValueErrorX(Exception):\n    x = {'k': 1}\n")
    r = await run(grep, ctx, pattern=r"(?P<kw>class)\s+\w+Error\w?\(|\{'k'")
    assert r.content.splitlines() == ["m.py:1: class ValueErrorX(Exception):", "m.py:2:     x = {'k': 1}"]


def sparse(p: Path, size: int) -> None:
    with p.open("wb") as f:
        f.truncate(size)


async def test_grep_says_which_files_it_skipped_and_why(ctx: ToolContext, ws: Path) -> None:
    sparse(ws / "big.log", _grep.MAX_GREP_FILE_BYTES + 1)
    sparse(ws / "dump.sql", 2 * _grep.MAX_GREP_FILE_BYTES)
    (ws / "img.png").write_bytes(b"\x89PNG\0\0needle")
    (ws / "small.txt").write_text("no hit here\n")
    r = await run(grep, ctx, pattern="needle")
    assert not r.is_error
    assert r.content.splitlines() == [
        "No matches for 'needle' in . (1 text files searched).",
        "[skipped 2 files over 5 MB: big.log, dump.sql; 1 binary file: img.png; "
        "search large files with bash, e.g. grep -n PATTERN FILE]",
    ]
    r = await run(grep, ctx, pattern="needle", path="big.log")
    assert r.content.endswith(
        "[skipped 1 file over 5 MB: big.log; search large files with bash, e.g. grep -n PATTERN FILE]"
    )


async def test_grep_lists_a_few_skipped_names_and_counts_the_rest(ctx: ToolContext, ws: Path) -> None:
    for i in range(8):
        (ws / f"b{i}.bin").write_bytes(b"\0\1\2")
    r = await run(grep, ctx, pattern="x")
    assert r.content.endswith("[skipped 8 binary files: b0.bin, b1.bin, b2.bin, b3.bin, b4.bin and 3 more]")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
async def test_grep_reports_unreadable_files(ctx: ToolContext, ws: Path) -> None:
    (ws / "locked.txt").write_text("needle\n")
    (ws / "locked.txt").chmod(0)
    r = await run(grep, ctx, pattern="needle")
    assert r.content.endswith("[skipped 1 unreadable file: locked.txt]")


# --- edit_file: bounded work on huge files --------------------------------------------------


def traced_peak(before: int) -> int:
    _, peak = tracemalloc.get_traced_memory()
    return peak - before


async def test_edit_file_refuses_files_over_its_size_cap(ctx: ToolContext, ws: Path) -> None:
    big = ws / "huge.log"
    line = "x" * 99 + "\n"
    with big.open("w") as f:
        for _ in range(300):  # ~30 MB of real text
            f.write(line * 1000)
    size = big.stat().st_size
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        r = await run(edit_file, ctx, path="huge.log", old="not in the file", new="y")
        peak = traced_peak(before)
    finally:
        tracemalloc.stop()
    assert r.is_error
    assert "huge.log is 28.6 MB (30000000 bytes); edit_file only edits files up to 20 MB" in r.content
    assert "sed -i" in r.content
    assert peak < 1_000_000  # the file was never read
    assert big.stat().st_size == size


async def test_edit_file_no_match_hint_stays_bounded(ctx: ToolContext, ws: Path) -> None:
    # Many short words: the worst case for a hint that split the file into a list of words.
    text = "a b c d e f g\n" * 700_000 + "    return total + 1\n"
    (ws / "words.txt").write_text(text)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        r = await run(edit_file, ctx, path="words.txt", old="return total - 1", new="x")
        peak = traced_peak(before)
    finally:
        tracemalloc.stop()
    assert r.is_error and "No match for `old` in words.txt" in r.content
    assert peak < 4 * len(text)  # bytes + text + a whitespace-squeezed copy, no per-word objects
    r = await run(edit_file, ctx, path="words.txt", old="a b  c", new="x")
    assert "whitespace or indentation differs" in r.content


async def test_edit_file_closest_line_hint_looks_at_a_window(ctx: ToolContext, ws: Path) -> None:
    n = files.HINT_WINDOW_LINES
    lines = [f"{i}\n" for i in range(n + 100)]
    lines[10] = "total = compute(alpha, beta)\n"
    lines[n + 50] = "grand_summary = finish(gamma, delta)\n"
    (ws / "v.py").write_text("".join(lines))
    r = await run(edit_file, ctx, path="v.py", old="total = compute(alpha, gamma)", new="x")
    assert "closest line is line 11: 'total = compute(alpha, beta)'" in r.content
    r = await run(edit_file, ctx, path="v.py", old="grand_summary = finish(gamma, epsilon)", new="x")
    assert r.is_error and "No match" in r.content and f"line {n + 51}" not in r.content


async def test_edit_file_shows_the_edited_lines_of_a_large_file(ctx: ToolContext, ws: Path) -> None:
    (ws / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 100_001)))
    r = await run(edit_file, ctx, path="n.txt", old="line 50000\n", new="LINE A\nLINE B\n")
    assert r.content.splitlines() == [
        "Edited n.txt: lines 49997–50005 now read:",
        "49997\tline 49997",
        "49998\tline 49998",
        "49999\tline 49999",
        "50000\tLINE A",
        "50001\tLINE B",
        "50002\tline 50001",
        "50003\tline 50002",
        "50004\tline 50003",
        "50005\tline 50004",
    ]
