"""The file tools: read_file, list_dir, grep, write_file, edit_file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kairos.tools.base import Tool, ToolContext, ToolResult
from kairos.tools.builtins import files
from kairos.tools.builtins.files import edit_file, grep, list_dir, read_file, write_file


@pytest.fixture
def ws(ctx: ToolContext) -> Path:
    return ctx.workspace


async def run(t: Tool, ctx: ToolContext, **args: Any) -> ToolResult:
    return await t.call(args, ctx)


def numbered(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


# --- confinement (all tools) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "args"),
    [
        (read_file, {"path": "../secret.txt"}),
        (list_dir, {"path": ".."}),
        (grep, {"pattern": "x", "path": "../secret.txt"}),
        (write_file, {"path": "../new.txt", "content": "x"}),
        (edit_file, {"path": "../secret.txt", "old": "top", "new": "x"}),
    ],
)
async def test_paths_outside_the_workspace_are_refused(ctx: ToolContext, t: Tool, args: dict[str, Any]) -> None:
    (ctx.workspace.parent / "secret.txt").write_text("top secret\n")
    r = await run(t, ctx, **args)
    assert r.is_error
    assert "outside the workspace" in r.content
    assert "top secret" not in r.content
    assert not (ctx.workspace.parent / "new.txt").exists()
    assert (ctx.workspace.parent / "secret.txt").read_text() == "top secret\n"


@pytest.mark.parametrize(("t", "extra"), [(read_file, {}), (edit_file, {"old": "top", "new": "x"})])
async def test_symlinks_out_of_the_workspace_are_refused(
    ctx: ToolContext, ws: Path, t: Tool, extra: dict[str, Any]
) -> None:
    (ws.parent / "secret.txt").write_text("top secret\n")
    (ws / "link.txt").symlink_to(ws.parent / "secret.txt")
    (ws / "linkdir").symlink_to(ws.parent)
    for path in ("link.txt", "linkdir/secret.txt"):
        r = await run(t, ctx, path=path, **extra)
        assert r.is_error and "outside the workspace" in r.content
    assert (ws.parent / "secret.txt").read_text() == "top secret\n"


async def test_write_through_a_symlink_out_of_the_workspace_is_refused(ctx: ToolContext, ws: Path) -> None:
    (ws / "out").symlink_to(ws.parent)
    r = await run(write_file, ctx, path="out/evil.txt", content="x")
    assert r.is_error and "outside the workspace" in r.content
    assert not (ws.parent / "evil.txt").exists()


# --- read_file ------------------------------------------------------------------------------


async def test_read_whole_small_file(ctx: ToolContext, ws: Path) -> None:
    (ws / "a.txt").write_text("alpha\n\tbeta\ngamma")
    r = await run(read_file, ctx, path="a.txt")
    assert not r.is_error
    assert r.content == "a.txt: lines 1–3 of 3\n1\talpha\n2\t\tbeta\n3\tgamma"


async def test_read_range_says_how_to_read_on(ctx: ToolContext, ws: Path) -> None:
    (ws / "big.txt").write_text(numbered(500))
    r = await run(read_file, ctx, path="big.txt")
    header, *rows = r.content.splitlines()
    assert header == "big.txt: lines 1–200 of 500; 300 more lines, read on with offset=201"
    assert len(rows) == 200 and rows[0] == "  1\tline 1" and rows[-1] == "200\tline 200"

    r = await run(read_file, ctx, path="big.txt", offset=201, limit=10)
    header, *rows = r.content.splitlines()
    assert header == "big.txt: lines 201–210 of 500; 290 more lines, read on with offset=211"
    assert rows[0] == "201\tline 201" and rows[-1] == "210\tline 210"

    r = await run(read_file, ctx, path="big.txt", offset=495, limit=100)
    assert r.content.splitlines()[0] == "big.txt: lines 495–500 of 500"


async def test_read_offset_past_the_end_is_an_error(ctx: ToolContext, ws: Path) -> None:
    (ws / "a.txt").write_text(numbered(3))
    r = await run(read_file, ctx, path="a.txt", offset=10)
    assert r.is_error
    assert "has 3 lines" in r.content and "offset from 1 to 3" in r.content


async def test_read_offset_below_one_starts_at_the_top(ctx: ToolContext, ws: Path) -> None:
    (ws / "a.txt").write_text(numbered(3))
    assert (await run(read_file, ctx, path="a.txt", offset=0)).content.startswith("a.txt: lines 1–3 of 3\n")


async def test_read_empty_file(ctx: ToolContext, ws: Path) -> None:
    (ws / "empty.txt").write_text("")
    r = await run(read_file, ctx, path="empty.txt")
    assert not r.is_error and r.content == "empty.txt: empty file (0 lines)"


async def test_read_missing_file_suggests_list_dir_and_similar_names(ctx: ToolContext, ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "main.py").write_text("x\n")
    r = await run(read_file, ctx, path="src/mian.py")
    assert r.is_error
    assert "File not found: 'src/mian.py'" in r.content
    assert "src/main.py" in r.content
    assert "list_dir(path='src')" in r.content
    r = await run(read_file, ctx, path="nowhere/deep/x.py")
    assert r.is_error and "list_dir(path='.')" in r.content


async def test_read_directory_is_an_error(ctx: ToolContext, ws: Path) -> None:
    (ws / "d").mkdir()
    r = await run(read_file, ctx, path="d")
    assert r.is_error and "is a directory" in r.content and "list_dir" in r.content


async def test_read_binary_file_is_an_error(ctx: ToolContext, ws: Path) -> None:
    (ws / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    r = await run(read_file, ctx, path="img.png")
    assert r.is_error and "binary file" in r.content


async def test_read_non_utf8_text_is_shown_with_replacements(ctx: ToolContext, ws: Path) -> None:
    (ws / "latin.txt").write_bytes("café au lait, naïve résumé and plenty of plain text\n".encode("latin-1"))
    r = await run(read_file, ctx, path="latin.txt")
    assert not r.is_error and "caf\ufffd au lait" in r.content


async def test_read_crlf_file(ctx: ToolContext, ws: Path) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    assert (await run(read_file, ctx, path="win.txt")).content == "win.txt: lines 1–2 of 2\n1\tone\n2\ttwo"


async def test_read_cuts_very_long_lines(ctx: ToolContext, ws: Path) -> None:
    (ws / "min.js").write_text("x" * 5000 + "\nend\n")
    r = await run(read_file, ctx, path="min.js")
    assert "[line cut: 5000 characters" in r.content
    assert r.content.endswith("2\tend")


async def test_read_stays_within_its_output_budget_and_says_where_it_stopped(ctx: ToolContext, ws: Path) -> None:
    (ws / "wide.txt").write_text("".join(f"{i:04d} " + "y" * 195 + "\n" for i in range(1, 201)))
    r = await run(read_file, ctx, path="wide.txt")
    header = r.content.splitlines()[0]
    last = int(r.content.splitlines()[-1].split("\t")[0])
    assert last < 200
    assert header == f"wide.txt: lines 1–{last} of 200; {200 - last} more lines, read on with offset={last + 1}"
    assert len(r.content) <= files.OUTPUT_BUDGET + 200


async def test_relative_paths_follow_the_cwd(ctx: ToolContext, ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "a.txt").write_text("in sub\n")
    ctx.cwd = ws / "sub"
    assert (await run(read_file, ctx, path="a.txt")).content == "a.txt: lines 1–1 of 1\n1\tin sub"
    assert not (await run(read_file, ctx, path="../sub/a.txt")).is_error


# --- list_dir -------------------------------------------------------------------------------


async def test_list_dir_sorted_with_dirs_and_sizes(ctx: ToolContext, ws: Path) -> None:
    (ws / "b.txt").write_text("12345")
    (ws / "A_dir").mkdir()
    (ws / ".hidden").write_text("")
    (ws / "c.bin").write_bytes(b"\0" * 2048)
    (ws / "ln").symlink_to("b.txt")
    r = await run(list_dir, ctx)
    assert not r.is_error
    assert r.content.splitlines() == [
        "./ (5 entries)",
        ".hidden  0 B",
        "A_dir/",
        "b.txt  5 B",
        "c.bin  2.0 KB",
        "ln -> b.txt",
    ]


async def test_list_dir_of_subdirectory_and_empty_dir(ctx: ToolContext, ws: Path) -> None:
    (ws / "sub" / "inner").mkdir(parents=True)
    assert (await run(list_dir, ctx, path="sub")).content == "sub/ (1 entries)\ninner/"
    assert (await run(list_dir, ctx, path="sub/inner")).content == "sub/inner/ (empty directory)"


async def test_list_dir_caps_the_count_with_a_notice(ctx: ToolContext, ws: Path) -> None:
    for i in range(files.MAX_LIST_ENTRIES + 5):
        (ws / f"f{i:04d}").write_text("")
    lines = (await run(list_dir, ctx)).content.splitlines()
    assert lines[0] == f"./ ({files.MAX_LIST_ENTRIES + 5} entries)"
    assert len(lines) == files.MAX_LIST_ENTRIES + 2
    assert lines[-1].startswith(f"[showing {files.MAX_LIST_ENTRIES} of {files.MAX_LIST_ENTRIES + 5} entries")


async def test_list_dir_errors(ctx: ToolContext, ws: Path) -> None:
    (ws / "f.txt").write_text("x")
    r = await run(list_dir, ctx, path="f.txt")
    assert r.is_error and "is a file" in r.content and "read_file" in r.content
    r = await run(list_dir, ctx, path="missing")
    assert r.is_error and "not found" in r.content


# --- grep -----------------------------------------------------------------------------------


@pytest.fixture
def tree(ws: Path) -> Path:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "core.py").write_text("import os\n\ndef main():\n    return TODO\n")
    (ws / "src" / "util.py").write_text("def helper():\n    pass  # todo later\n")
    (ws / "README.md").write_text("Run main() to start.\n")
    for skipped in (".git", ".venv", ".kairos", "__pycache__", "node_modules"):
        (ws / skipped).mkdir()
        (ws / skipped / "x.py").write_text("def main(): hidden\n")
    (ws / "blob.bin").write_bytes(b"def main()\0\x01\x02")
    return ws


async def test_grep_rows_are_path_line_text(ctx: ToolContext, tree: Path) -> None:
    r = await run(grep, ctx, pattern=r"main\(\)")
    assert not r.is_error
    assert r.content.splitlines() == [
        "README.md:1: Run main() to start.",
        "src/pkg/core.py:3: def main():",
        "[skipped 1 binary file: blob.bin]",  # .git, .venv, .kairos, ... are skipped without a word
    ]


async def test_grep_flags_and_single_file(ctx: ToolContext, tree: Path) -> None:
    r = await run(grep, ctx, pattern="(?i)todo", path="src")
    assert r.content.splitlines() == ["src/pkg/core.py:4:     return TODO", "src/util.py:2:     pass  # todo later"]
    r = await run(grep, ctx, pattern="def", path="src/util.py")
    assert r.content == "src/util.py:1: def helper():"


async def test_grep_glob_filters_files(ctx: ToolContext, tree: Path) -> None:
    r = await run(grep, ctx, pattern="main", glob="*.md")
    assert r.content == "README.md:1: Run main() to start."
    r = await run(grep, ctx, pattern="def", glob="src/**/*.py")
    assert r.content.splitlines() == ["src/pkg/core.py:3: def main():", "src/util.py:1: def helper():"]


async def test_grep_paths_are_relative_to_the_cwd(ctx: ToolContext, tree: Path) -> None:
    ctx.cwd = tree / "src"
    r = await run(grep, ctx, pattern="def main", path="pkg")
    assert r.content == "pkg/core.py:3: def main():"
    assert not (await run(read_file, ctx, path="pkg/core.py")).is_error


async def test_grep_no_match_is_not_an_error(ctx: ToolContext, tree: Path) -> None:
    r = await run(grep, ctx, pattern="nothing_like_this")
    assert not r.is_error
    assert r.content.startswith("No matches for 'nothing_like_this' in . (")


async def test_grep_invalid_regex_explains(ctx: ToolContext, tree: Path) -> None:
    r = await run(grep, ctx, pattern="main(")
    assert r.is_error
    assert "Invalid regular expression 'main('" in r.content
    assert "missing )" in r.content and "backslash" in r.content


async def test_grep_caps_results_with_a_notice(ctx: ToolContext, ws: Path) -> None:
    (ws / "many.txt").write_text("hit\n" * 30)
    r = await run(grep, ctx, pattern="hit", max_results=5)
    lines = r.content.splitlines()
    assert lines[:5] == [f"many.txt:{i}: hit" for i in range(1, 6)]
    assert lines[5].startswith("[stopped at 5 matches; there are more")
    assert len(lines) == 6


async def test_grep_exactly_max_results_has_no_notice(ctx: ToolContext, ws: Path) -> None:
    (ws / "few.txt").write_text("hit\n" * 5)
    assert len((await run(grep, ctx, pattern="hit", max_results=5)).content.splitlines()) == 5


async def test_grep_shows_the_match_of_a_long_line(ctx: ToolContext, ws: Path) -> None:
    (ws / "long.txt").write_text("a" * 1000 + "NEEDLE" + "b" * 1000 + "\n")
    r = await run(grep, ctx, pattern="NEEDLE")
    assert "NEEDLE" in r.content and len(r.content) < 300


async def test_grep_skips_symlinks_out_of_the_workspace(ctx: ToolContext, ws: Path) -> None:
    (ws.parent / "secret.txt").write_text("password\n")
    (ws / "leak.txt").symlink_to(ws.parent / "secret.txt")
    (ws / "inside.txt").write_text("password here\n")
    (ws / "alias.txt").symlink_to("inside.txt")
    r = await run(grep, ctx, pattern="password")
    assert r.content.splitlines() == [
        "alias.txt:1: password here",
        "inside.txt:1: password here",
        "[skipped 1 link to outside the workspace or into kairos's state: leak.txt]",
    ]


async def test_grep_missing_path(ctx: ToolContext) -> None:
    r = await run(grep, ctx, pattern="x", path="nope")
    assert r.is_error and "list_dir" in r.content


# --- write_file -----------------------------------------------------------------------------


async def test_write_creates_parents_then_overwrites(ctx: ToolContext, ws: Path) -> None:
    assert write_file.side_effects
    r = await run(write_file, ctx, path="a/b/c.txt", content="héllo\nworld\n")
    assert not r.is_error
    assert r.content == "Created a/b/c.txt (13 bytes, 2 lines)."
    assert (ws / "a" / "b" / "c.txt").read_text() == "héllo\nworld\n"
    r = await run(write_file, ctx, path="a/b/c.txt", content="x")
    assert r.content == "Overwrote a/b/c.txt (1 bytes, 1 lines; it had 13 bytes)."
    assert (ws / "a" / "b" / "c.txt").read_text() == "x"


async def test_write_to_a_directory_or_under_a_file_is_an_error(ctx: ToolContext, ws: Path) -> None:
    (ws / "d").mkdir()
    r = await run(write_file, ctx, path="d", content="x")
    assert r.is_error and "is a directory" in r.content
    (ws / "f").write_text("")
    r = await run(write_file, ctx, path="f/x.txt", content="x")
    assert r.is_error and "Cannot write" in r.content


# --- edit_file ------------------------------------------------------------------------------

SOURCE = "def f():\n    a = 1\n    b = 2\n    return a + b\n\n\ndef g():\n    a = 1\n    return a\n"


async def test_edit_replaces_once_and_shows_the_change(ctx: ToolContext, ws: Path) -> None:
    assert edit_file.side_effects
    (ws / "m.py").write_text(SOURCE)
    r = await run(edit_file, ctx, path="m.py", old="    b = 2\n", new="    b = 3\n    c = 4\n")
    assert not r.is_error
    assert (ws / "m.py").read_text() == SOURCE.replace("    b = 2\n", "    b = 3\n    c = 4\n")
    assert r.content.splitlines()[0] == "Edited m.py: lines 1–8 now read:"
    assert "3\t    b = 3" in r.content and "4\t    c = 4" in r.content


async def test_edit_without_match_is_an_error_with_the_closest_line(ctx: ToolContext, ws: Path) -> None:
    (ws / "m.py").write_text(SOURCE)
    r = await run(edit_file, ctx, path="m.py", old="return a - b", new="return 0")
    assert r.is_error
    assert "No match for `old` in m.py" in r.content
    assert "closest line is line 4: 'return a + b'" in r.content
    assert "read_file" in r.content
    assert (ws / "m.py").read_text() == SOURCE


async def test_edit_without_match_spots_whitespace_and_line_numbers(ctx: ToolContext, ws: Path) -> None:
    (ws / "m.py").write_text(SOURCE)
    r = await run(edit_file, ctx, path="m.py", old="def f():\n  a = 1", new="x")
    assert r.is_error and "whitespace or indentation differs" in r.content
    r = await run(edit_file, ctx, path="m.py", old="2\t    a = 1", new="x")
    assert r.is_error and "line numbers" in r.content


async def test_edit_with_several_matches_is_an_error(ctx: ToolContext, ws: Path) -> None:
    (ws / "m.py").write_text(SOURCE)
    r = await run(edit_file, ctx, path="m.py", old="    a = 1\n", new="    a = 5\n")
    assert r.is_error
    assert "matches 2 places in m.py (lines 2, 8)" in r.content
    assert "more surrounding lines" in r.content
    assert (ws / "m.py").read_text() == SOURCE


async def test_edit_argument_errors(ctx: ToolContext, ws: Path) -> None:
    (ws / "m.py").write_text(SOURCE)
    assert "empty" in (await run(edit_file, ctx, path="m.py", old="", new="x")).content
    assert "the same" in (await run(edit_file, ctx, path="m.py", old="a", new="a")).content
    r = await run(edit_file, ctx, path="nope.py", old="a", new="b")
    assert r.is_error and "not found" in r.content
    (ws / "bin").write_bytes(b"a\0b")
    assert "binary" in (await run(edit_file, ctx, path="bin", old="a", new="b")).content


async def test_edit_can_delete_and_keeps_windows_line_ends(ctx: ToolContext, ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    r = await run(edit_file, ctx, path="w.txt", old="one\ntwo\n", new="")
    assert not r.is_error
    assert (ws / "w.txt").read_bytes() == b"three\r\n"
