"""The shipped skills' scripts run with the project's Python and give exact, checkable output."""

from __future__ import annotations

import csv
import hashlib
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from kairos.skills.catalog import builtin_root, load_skill_folder

REPORT = builtin_root() / "report-writing" / "scripts" / "make_report.py"
CHANGES = builtin_root() / "changelog" / "scripts" / "git_changes.py"


def run(script: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("name", ["report-writing", "changelog"])
def test_skill_follows_the_four_part_structure(name: str) -> None:
    skill = load_skill_folder(builtin_root() / name, "builtin", "test")
    for part in ("## Role and reader", "## Principles", "## Prohibitions", "## References"):
        assert part in skill.body
    assert "Use when" in skill.description and "Not for" in skill.description
    assert "{{python}} {{skill_dir}}/scripts/" in skill.body
    for rel in skill.files():  # every file the body names exists
        assert (skill.folder / rel).is_file()
    assert "reference.md" in skill.files()


def write_sales(path: Path) -> None:
    rows = [
        ("2026-01-01", "North", "3", "10.10"),
        ("2026-01-02", "South", "5", "20.25"),
        ("2026-01-03", "North", "2", "0.05"),
        ("2026-01-04", "East", "", "7"),
        ("2026-01-05", "South", "1", "1000.005"),
    ]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["date", "region", "units", "revenue"])
        w.writerows(rows)


def test_report_script_computes_exact_figures(tmp_path: Path) -> None:
    write_sales(tmp_path / "sales.csv")
    out = run(REPORT, "sales.csv", "--out", "report.md", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = (tmp_path / "report.md").read_text()
    assert out.stdout.startswith(report.rstrip("\n")) and "Wrote report.md" in out.stdout
    digest = hashlib.sha256((tmp_path / "sales.csv").read_bytes()).hexdigest()[:12]
    assert f"Source: `sales.csv` (5 rows, sha256 `{digest}`)" in report
    total = Decimal("10.10") + Decimal("20.25") + Decimal("0.05") + Decimal("7") + Decimal("1000.005")
    assert f"- Total revenue: {total:,.3f} (5 values)" in report  # exact: 1,037.405
    assert "- Total units: 11 (4 values)" in report  # the empty cell is skipped
    # mean 1037.405 / 5 = 207.481; median of 5 is the 3rd value (10.10)
    assert "| revenue | 5 | 1,037.405 | 207.481 | 10.100 | 0.050 | 1,000.005 |" in report
    assert "| units | 4 | 11 | 2.75 | 2.50 | 1 | 5 |" in report
    assert "| North | 2 | 5 | 45.5% | 10.150 | 1.0% |" in report
    assert "| South | 2 | 6 | 54.5% | 1,020.255 | 98.3% |" in report
    assert "- Largest region by units: South (6, 54.5% of the total)" in report
    assert "- Total revenue by region: South 1,020.255; North 10.150" in report  # every group on one line
    assert "By date" not in report  # few dates, but none repeats: no one-row groups
    assert report.index("## Key figures") < report.index("## Overview") < report.index("## Breakdown")


def test_report_script_options_and_errors(tmp_path: Path) -> None:
    write_sales(tmp_path / "sales.csv")
    out = run(REPORT, "sales.csv", "--value", "revenue", "--group-by", "region", "--out", "r.md", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "r.md").read_text()
    assert "units" not in text and "- Largest region by revenue: South (1,020.255, 98.3% of the total)" in text
    same = run(REPORT, "sales.csv", "--value", "revenue", "--group-by", "region", "--out", "r.md", cwd=tmp_path)
    assert same.returncode == 0 and "already up to date" in same.stdout and (tmp_path / "r.md").read_text() == text
    again = run(REPORT, "sales.csv", "--out", "r.md", cwd=tmp_path)  # other options: other content
    assert again.returncode == 2 and "already exists with different content" in again.stderr
    assert (tmp_path / "r.md").read_text() == text
    assert run(REPORT, "sales.csv", "--out", "r.md", "--force", cwd=tmp_path).returncode == 0
    bad = run(REPORT, "sales.csv", "--value", "nope", "--out", "x.md", cwd=tmp_path)
    assert bad.returncode == 2 and "numeric columns: units, revenue" in bad.stderr
    (tmp_path / "words.csv").write_text("a,b\nx,y\n")
    assert "no numeric column" in run(REPORT, "words.csv", "--out", "w.md", cwd=tmp_path).stderr
    assert "does not exist" in run(REPORT, "missing.csv", cwd=tmp_path).stderr


def test_report_groups_only_low_cardinality_text_columns(tmp_path: Path) -> None:
    with (tmp_path / "d.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "team", "score"])
        w.writerows([(f"id{i}", "ab"[i % 2], str(i)) for i in range(20)])
    out = run(REPORT, "d.csv", "--out", "r.md", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "### By team" in out.stdout and "### By id" not in out.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    r = tmp_path / "repo"
    r.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(r), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    git("commit", "-q", "--allow-empty", "-m", "feat: first release")
    git("tag", "v0.1.0")
    for msg in ("feat(cli): add --json flag", "fix: resume after a crash", "chore: bump deps", "docs: readme"):
        git("commit", "-q", "--allow-empty", "-m", msg)
    git("commit", "-q", "--allow-empty", "-m", "refactor!: rename --ctx to --context-window")
    git("commit", "-q", "--allow-empty", "-m", "perf: faster loads", "-m", "BREAKING CHANGE: needs Python 3.11")
    git("commit", "-q", "--allow-empty", "-m", "Tidy the output")
    return r


EXPECTED = """\
## [0.2.0] - 2026-03-02

### Added
- **cli:** Add --json flag

### Changed
- **Breaking:** Rename --ctx to --context-window
- **Breaking:** Faster loads
- Tidy the output

### Fixed
- Resume after a crash
"""


def test_changelog_script_groups_commits_since_the_last_tag(repo: Path) -> None:
    out = run(CHANGES, "--version", "0.2.0", "--date", "2026-03-02", cwd=repo)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(EXPECTED.rstrip("\n"))
    assert "(7 commits in v0.1.0..HEAD; 2 left out as docs/test/ci/build/chore)" in out.stdout
    everything = run(CHANGES, "--all", "--since", "v0.1.0", cwd=repo)
    assert everything.stdout.startswith("## [Unreleased]") and "- Bump deps" in everything.stdout


def test_changelog_script_writes_below_unreleased_and_refuses_duplicates(repo: Path) -> None:
    log = repo / "CHANGELOG.md"
    log.write_text("# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-01-01\n\n### Added\n- First.\n")
    args = ("--version", "0.2.0", "--date", "2026-03-02", "--write", "CHANGELOG.md")
    assert run(CHANGES, *args, cwd=repo).returncode == 0
    text = log.read_text()
    assert text.index("## [Unreleased]") < text.index("## [0.2.0]") < text.index("## [0.1.0]")
    assert EXPECTED in text
    dup = run(CHANGES, *args, cwd=repo)
    assert dup.returncode == 2 and "already has a section for 0.2.0" in dup.stderr
    fresh = run(CHANGES, "--version", "0.2.0", "--date", "2026-03-02", "--write", "NEW.md", cwd=repo)
    assert fresh.returncode == 0 and (repo / "NEW.md").read_text().startswith("# Changelog\n")


def test_changelog_script_outside_git(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    out = run(CHANGES, cwd=tmp_path)
    assert out.returncode == 2 and "failed" in out.stderr
