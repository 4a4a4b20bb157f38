"""Draft a Keep a Changelog section from the Conventional Commits in a git range.

Standard library only; runs the local ``git`` (no network). The mapping from commit types to
sections is in the skill's reference.md.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

SECTIONS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
TYPE_SECTION = {
    "feat": "Added",
    "fix": "Fixed",
    "perf": "Changed",
    "refactor": "Changed",
    "style": "Changed",
    "deprecate": "Deprecated",
    "remove": "Removed",
    "revert": "Removed",
    "security": "Security",
    "sec": "Security",
}
HIDDEN = frozenset({"docs", "test", "tests", "ci", "build", "chore"})
HEADER = (
    "# Changelog\n\nAll notable changes to this project are documented in this file.\n\n"
    "The format is based on [Keep a Changelog](https://keepachangelog.com/en/1.1.0/).\n"
)
_CC = re.compile(r"^(?P<type>[a-zA-Z]+)(?:\((?P<scope>[^)]*)\))?(?P<bang>!)?:\s*(?P<text>.+)$")
_SEP, _END = "\x1f", "\x1e"


class UsageError(Exception):
    """Bad input: reported on stderr with exit status 2."""


@dataclass(frozen=True)
class Entry:
    section: str
    text: str
    breaking: bool = False


def git(repo: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise UsageError("git is not installed") from e
    if out.returncode != 0:
        raise UsageError(f"git {' '.join(args)} failed: {out.stderr.strip() or out.returncode}")
    return out.stdout


def latest_tag(repo: Path, until: str) -> str | None:
    try:
        return git(repo, "describe", "--tags", "--abbrev=0", until).strip() or None
    except UsageError:
        return None


def commits(repo: Path, since: str | None, until: str) -> list[tuple[str, str]]:
    """(subject, body) of every non-merge commit in ``since..until``, oldest first."""
    rng = f"{since}..{until}" if since else until
    raw = git(repo, "log", "--no-merges", "--reverse", f"--format=%s{_SEP}%b{_END}", rng)
    out = []
    for record in raw.split(_END):
        record = record.strip("\n")
        if record:
            subject, _, body = record.partition(_SEP)
            out.append((subject.strip(), body.strip()))
    return out


def classify(subject: str, body: str, *, include_all: bool = False) -> Entry | None:
    """The changelog entry for one commit, or None when the commit is left out."""
    m = _CC.match(subject)
    breaking = any(line.startswith(("BREAKING CHANGE:", "BREAKING-CHANGE:")) for line in body.splitlines())
    if m is None:
        return Entry("Changed", subject, breaking)
    kind = m.group("type").lower()
    breaking = breaking or bool(m.group("bang"))
    text = m.group("text").strip()
    text = text[0].upper() + text[1:]
    if m.group("scope"):
        text = f"**{m.group('scope')}:** {text}"
    if kind in HIDDEN and not breaking:
        return Entry("Changed", text) if include_all else None
    section = "Changed" if breaking and kind not in ("feat", "fix") else TYPE_SECTION.get(kind, "Changed")
    return Entry(section, text, breaking)


def render(entries: Sequence[Entry], version: str, day: date | None) -> str:
    head = "## [Unreleased]" if version == "Unreleased" else f"## [{version}] - {(day or date.today()).isoformat()}"
    parts = [head]
    for section in SECTIONS:
        items = [e for e in entries if e.section == section]
        items.sort(key=lambda e: not e.breaking)  # stable: breaking first, then commit order
        if items:
            lines = [f"- {'**Breaking:** ' if e.breaking else ''}{e.text}" for e in items]
            parts.append(f"### {section}\n" + "\n".join(lines))
    if len(parts) == 1:
        parts.append("No user-visible changes.")
    return "\n\n".join(parts) + "\n"


def insert_section(path: Path, section: str, version: str) -> None:
    """Put ``section`` above the newest release (below ``## [Unreleased]``, which stays on top)."""
    text = path.read_text(encoding="utf-8") if path.exists() else HEADER
    if re.search(rf"^## \[{re.escape(version)}\]", text, re.M):
        raise UsageError(f"{path} already has a section for {version}; edit it instead of adding another")
    m = re.search(r"^## (?!\[Unreleased\])", text, re.M)
    at = m.start() if m is not None else len(text)
    text = text[:at].rstrip("\n") + "\n\n" + section + ("\n" + text[at:] if m is not None else "")
    path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Draft a Keep a Changelog section from git history.")
    ap.add_argument("--since", help="start of the range, exclusive (default: the latest tag)")
    ap.add_argument("--until", default="HEAD")
    ap.add_argument("--version", default="Unreleased")
    ap.add_argument("--date", type=date.fromisoformat, help="release date, YYYY-MM-DD (default today)")
    ap.add_argument("--all", action="store_true", help="keep docs/test/ci/build/chore commits")
    ap.add_argument("--write", type=Path, help="insert the section into this changelog file")
    ap.add_argument("--repo", type=Path, default=Path("."))
    args = ap.parse_args(argv)
    try:
        git(args.repo, "rev-parse", "--git-dir")
        since = args.since or latest_tag(args.repo, args.until)
        found = commits(args.repo, since, args.until)
        entries = [e for s, b in found if (e := classify(s, b, include_all=args.all)) is not None]
        section = render(entries, args.version, args.date)
        if args.write:
            insert_section(args.write, section, args.version)
    except UsageError as e:
        print(f"git_changes.py: error: {e}", file=sys.stderr)
        return 2
    print(section.rstrip("\n"))
    left_out = len(found) - len(entries)
    rng = f"{since}..{args.until}" if since else f"the start..{args.until}"
    print(f"\n({len(found)} commits in {rng}; {left_out} left out as docs/test/ci/build/chore)")
    if args.write:
        print(f"Inserted into {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
