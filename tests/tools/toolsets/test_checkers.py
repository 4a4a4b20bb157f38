"""Execution checkers: write_file/edit_file report ruff and parser findings after each write."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kairos.tools.base import ToolContext
from kairos.tools.builtins.files import edit_file, write_file
from kairos.tools.toolsets import checkers
from kairos.tools.toolsets.checkers import check_file, execution_checkers

from .conftest import run


async def test_python_findings_from_ruff(ctx: ToolContext) -> None:
    assert checkers.ruff_command() is not None
    res = await run(write_file, ctx, path="m.py", content="import os\n\n\ndef f():\n    return undefined_name\n")
    assert not res.is_error
    assert res.content.startswith("Created m.py")
    assert "Check (ruff): 2 problems" in res.content
    assert "line 1, col 8: F401" in res.content and "line 5, col 12: F821" in res.content
    found = res.metadata["checks"]["findings"]
    assert {f["code"] for f in found} == {"F401", "F821"}
    assert (ctx.workspace / "m.py").read_text().startswith("import os")  # the write stands


async def test_python_syntax_error_and_clean_file(ctx: ToolContext) -> None:
    bad = await run(write_file, ctx, path="s.py", content="def f(:\n    pass\n")
    assert "Check (ruff):" in bad.content and "line 1" in bad.content
    assert any("Syntax" in f["message"] or "Expected" in f["message"] for f in bad.metadata["checks"]["findings"])
    good = await run(write_file, ctx, path="s.py", content="def f() -> int:\n    return 1\n")
    assert good.content.startswith("Overwrote s.py") and "Check (ruff): no problems found." in good.content


async def test_workspace_ruff_settings_apply(ctx: ToolContext) -> None:
    (ctx.workspace / "ruff.toml").write_text('[lint]\nselect = ["E711"]\n')
    res = await run(write_file, ctx, path="c.py", content="import os\nx = None\nif x == None:\n    pass\n")
    codes = [f["code"] for f in res.metadata["checks"]["findings"]]
    assert codes == ["E711"]  # F401 is not selected by this workspace


async def test_edit_file_runs_the_checker(ctx: ToolContext) -> None:
    (ctx.workspace / "conf.json").write_text('{"a": 1,\n "b": 2}\n')
    res = await run(edit_file, ctx, path="conf.json", old='"b": 2', new='"b": 2,')
    assert res.content.startswith("Edited conf.json")
    assert "Check (json): 1 problem" in res.content and "line 2" in res.content
    fixed = await run(edit_file, ctx, path="conf.json", old='"b": 2,', new='"b": 3')
    assert "Check (json): no problems found." in fixed.content


@pytest.mark.parametrize(
    ("name", "content", "line", "words"),
    [
        ("a.json", '{\n  "x": [1, 2,\n}\n', 3, "Expecting value"),
        ("a.toml", 'title = "x"\n[server]\nport = = 3\n', 3, "Invalid value"),
        ("a.yaml", "key: value\nlist:\n  - a\n - b\n", 4, "expected <block end>"),
        ("a.yml", "a: [1, 2\n", 2, "expected ',' or ']'"),
    ],
)
async def test_parsers_report_lines(ctx: ToolContext, name: str, content: str, line: int, words: str) -> None:
    res = await run(write_file, ctx, path=name, content=content)
    findings = res.metadata["checks"]["findings"]
    assert len(findings) == 1, res.content
    assert findings[0]["line"] == line and words in findings[0]["message"], findings
    assert f"line {line}" in res.content


async def test_other_files_are_not_checked(ctx: ToolContext) -> None:
    res = await run(write_file, ctx, path="notes.txt", content="anything {")
    assert "Check" not in res.content and "checks" not in res.metadata


async def test_a_crashing_checker_never_fails_the_write(
    ctx: ToolContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "bin" / "ruff"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'ruff: cannot start' >&2\nexit 2\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(checkers, "ruff_command", lambda: [str(broken)])
    res = await run(write_file, ctx, path="x.py", content="x = 1\n")
    assert not res.is_error and res.content.startswith("Created x.py")
    assert "could not run — ruff failed" in res.content and "cannot start" in res.content
    assert (ctx.workspace / "x.py").read_text() == "x = 1\n"


async def test_without_ruff_python_syntax_is_still_checked(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkers, "ruff_command", lambda: None)
    res = await run(write_file, ctx, path="y.py", content="if True\n    pass\n")
    assert "SyntaxError" in res.content and "line 1" in res.content


def test_large_files_are_not_checked(tmp_path: Path) -> None:
    p = tmp_path / "big.json"
    report = check_file(p, "[" + "1," * (checkers.MAX_CHECK_BYTES // 2) + "1]")
    assert report is not None and report.error is not None and "not checked" in report.error


def test_many_findings_are_counted_not_dropped(tmp_path: Path) -> None:
    p = tmp_path / "many.py"
    text = "".join(f"import mod{i}\n" for i in range(30))
    report = check_file(p, text, os.environ)
    assert report is not None and len(report.findings) == 30
    shown = report.render()
    assert "… and 10 more" in shown and shown.count("F401") == 20


def test_registry_covers_the_promised_types() -> None:
    suffixes = {s for c in execution_checkers for s in c.suffixes}
    assert {".py", ".json", ".toml", ".yaml", ".yml"} <= suffixes


async def test_without_a_ruff_config_only_errors_not_style(ctx: ToolContext) -> None:
    assert not checkers.has_ruff_config(ctx.workspace)
    res = await run(write_file, ctx, path="st.py", content="import sys, os\nfrom pathlib import Path\nprint(sys)\n")
    codes = sorted(f["code"] for f in res.metadata["checks"]["findings"])
    assert codes == ["E401", "F401", "F401"]  # no import-sorting or other style rules
