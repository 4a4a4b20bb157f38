"""Execution checkers: after ``write_file``/``edit_file``, check what was written and say what is wrong.

Python goes through ``ruff check`` (the workspace's own ruff settings apply, else only the error
rules :data:`DEFAULT_RUFF_RULES`, not style; without ruff, Python's compiler still catches syntax
errors); JSON, TOML and YAML through their parsers. Findings come
back in the tool result, with line numbers, so the model fixes its mistake on the next call instead
of finding it three steps later. A checker never fails the write: a crash, a timeout or a missing
program is reported as such, and the file stays written.

Usage::

    result = with_checks(path, text, ToolResult("Created a.py (...)."), env)
    result.metadata["checks"]  # {"checker": "ruff", "findings": [...], "error": None}
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from kairos.tools.base import ToolResult

MAX_CHECK_BYTES = 2_000_000
"""Larger files are not checked (the result says so)."""
MAX_SHOWN = 20
"""Findings listed in the result; the rest are counted."""
RUFF_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: where (1-based line and column, 0 when unknown), a code if the checker has one, and what."""

    line: int
    column: int
    message: str
    code: str = ""


@dataclass(slots=True)
class CheckReport:
    """What one checker said about one file."""

    checker: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    """Why the checker could not run (its findings are then unknown, not empty)."""

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (``result.metadata["checks"]``)."""
        return {"checker": self.checker, "findings": [asdict(f) for f in self.findings], "error": self.error}

    def render(self) -> str:
        """The lines appended to the tool result."""
        if self.error:
            return f"Check ({self.checker}): could not run — {self.error}. The file was written; check it yourself."
        if not self.findings:
            return f"Check ({self.checker}): no problems found."
        n = len(self.findings)
        lines = [f"Check ({self.checker}): {n} problem{'s' if n > 1 else ''} — fix them:"]
        for f in self.findings[:MAX_SHOWN]:
            where = f"line {f.line}" + (f", col {f.column}" if f.column else "") if f.line else "file"
            lines.append(f"  {where}: {f.code + ' ' if f.code else ''}{f.message}")
        if n > MAX_SHOWN:
            lines.append(f"  … and {n - MAX_SHOWN} more (not shown; fix these first, or run the checker with bash)")
        return "\n".join(lines)


CheckFn = Callable[[Path, str, Mapping[str, str]], list[Finding]]


@dataclass(frozen=True, slots=True)
class Checker:
    """A checker for files with some suffixes."""

    name: str
    suffixes: tuple[str, ...]
    check: CheckFn


def _check_json(path: Path, text: str, env: Mapping[str, str]) -> list[Finding]:
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return [Finding(e.lineno, e.colno, e.msg)]
    return []


_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)|\(at end of document\)")


def _check_toml(path: Path, text: str, env: Mapping[str, str]) -> list[Finding]:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = _TOML_AT.search(msg)
        if m and m.group(1):
            return [Finding(int(m.group(1)), int(m.group(2)), msg[: m.start()].strip())]
        if m:
            return [Finding(text.count("\n") + 1, 0, msg[: m.start()].strip() + " (at the end of the file)")]
        return [Finding(0, 0, msg)]
    return []


def _check_yaml(path: Path, text: str, env: Mapping[str, str]) -> list[Finding]:
    try:
        for _ in yaml.safe_load_all(text):
            pass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        what = " ".join(x for x in (e.context, e.problem) if x) or str(e)
        return [Finding(mark.line + 1 if mark else 0, mark.column + 1 if mark else 0, what)]
    except yaml.YAMLError as e:
        return [Finding(0, 0, str(e))]
    return []


def ruff_command() -> list[str] | None:
    """How to run ruff: the one next to this Python (the venv), else on PATH, else None."""
    here = Path(sys.executable).parent / ("ruff.exe" if os.name == "nt" else "ruff")
    if here.is_file():
        return [str(here)]
    found = shutil.which("ruff")
    return [found] if found else None


DEFAULT_RUFF_RULES = "E4,E7,E9,F"
"""Rules checked where no ruff configuration applies: errors (syntax, undefined names, unused imports), not style."""


def has_ruff_config(folder: Path) -> bool:
    """Whether ruff would find a configuration for files in ``folder`` (it looks in every parent)."""
    for d in (folder, *folder.parents):
        if (d / "ruff.toml").is_file() or (d / ".ruff.toml").is_file():
            return True
        try:
            if "[tool.ruff" in (d / "pyproject.toml").read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            continue
    return False


def _check_python(path: Path, text: str, env: Mapping[str, str]) -> list[Finding]:
    cmd = ruff_command()
    if cmd is None:  # no ruff: at least the syntax
        try:
            compile(text, str(path), "exec", dont_inherit=True)
        except SyntaxError as e:
            return [Finding(e.lineno or 0, e.offset or 0, f"SyntaxError: {e.msg}")]
        return []
    args = [*cmd, "check", "--output-format", "json", "--no-cache", "--exit-zero", "--stdin-filename", str(path)]
    if not has_ruff_config(path.parent):
        args += ["--select", DEFAULT_RUFF_RULES]
    proc = subprocess.run(
        [*args, "-"],
        input=text.encode("utf-8"),
        capture_output=True,
        timeout=RUFF_TIMEOUT_S,
        cwd=path.parent,
        env=dict(env),
        check=False,
    )
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", errors="replace").strip().splitlines()
        raise RuntimeError(f"ruff exited with {proc.returncode}: {err[-1] if err else 'no message'}")
    out = []
    for item in json.loads(proc.stdout or b"[]"):
        loc = item.get("location") or {}
        out.append(Finding(int(loc.get("row") or 0), int(loc.get("column") or 0), str(item.get("message", "")),
                           str(item.get("code") or "")))  # fmt: skip
    return sorted(out, key=lambda f: (f.line, f.column))


execution_checkers: tuple[Checker, ...] = (
    Checker("ruff", (".py", ".pyi"), _check_python),
    Checker("json", (".json",), _check_json),
    Checker("toml", (".toml",), _check_toml),
    Checker("yaml", (".yaml", ".yml"), _check_yaml),
)
"""The checkers ``write_file``/``edit_file`` run, by file suffix."""


def checker_for(path: Path, checkers: tuple[Checker, ...] = execution_checkers) -> Checker | None:
    """The checker for ``path``'s suffix, or None."""
    suffix = path.suffix.lower()
    return next((c for c in checkers if suffix in c.suffixes), None)


def check_file(path: Path, text: str | None = None, env: Mapping[str, str] | None = None) -> CheckReport | None:
    """Check the file at ``path`` (its content ``text``, read from disk when None) with the checker for its type.

    Returns None when no checker applies. Never raises: a checker that crashes, times out or
    cannot read the file gives a report with ``error``.
    """
    checker = checker_for(path)
    if checker is None:
        return None
    report = CheckReport(checker.name)
    try:
        size = len(text.encode("utf-8", errors="replace")) if text is not None else path.stat().st_size
        if size > MAX_CHECK_BYTES:
            report.error = f"the file has {size} bytes; files over {MAX_CHECK_BYTES} are not checked"
            return report
        if text is None:
            text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        report.error = f"cannot read the file back ({type(e).__name__}: {e})"
        return report
    try:
        report.findings = checker.check(path, text, env if env is not None else os.environ)
    except subprocess.TimeoutExpired:
        report.error = f"{checker.name} did not finish within {RUFF_TIMEOUT_S:g} s"
    except Exception as e:  # a checker must never fail the write
        report.error = f"{checker.name} failed ({type(e).__name__}: {str(e)[:300]})"
    return report


def with_checks(path: Path, text: str, result: ToolResult, env: Mapping[str, str] | None = None) -> ToolResult:
    """``result`` of a successful write of ``text`` to ``path`` with the checker's findings appended.

    Unchanged when no checker applies to the file's type.
    """
    report = check_file(path, text, env)
    if report is None:
        return result
    result.content = f"{result.content}\n{report.render()}"
    result.metadata["checks"] = report.as_dict()
    return result


__all__ = [
    "DEFAULT_RUFF_RULES",
    "MAX_CHECK_BYTES",
    "CheckReport",
    "Checker",
    "Finding",
    "check_file",
    "checker_for",
    "execution_checkers",
    "has_ruff_config",
    "ruff_command",
    "with_checks",
]
