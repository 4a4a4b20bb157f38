"""``--workspace``: a missing one is refused by every command before anything loads or is created;
the state folder kairos creates stays out of ``git status`` (issue 24 §5)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kairos.models
from kairos.cli import app
from kairos.paths import STATE_GITIGNORE

runner = CliRunner()

COMMANDS = [
    ["run", "hello"],
    ["chat"],
    ["serve"],
    ["sessions"],
    ["config"],
    ["kb", "add", "notes.md"],
    ["kb", "search", "x"],
    ["kb", "stats"],
    ["kb", "remove", "notes.md"],
    ["memory", "show"],
    ["memory", "search", "x"],
    ["memory", "forget", "--all"],
    ["memory", "export"],
    ["mcp", "serve"],
    ["mcp", "list"],
    ["mcp", "show", "srv"],
    ["mcp", "approve", "srv"],
    ["skills", "list"],
    ["skills", "show", "s"],
    ["skills", "approve", "s"],
    ["skills", "revoke", "s"],
    ["skills", "new", "my-skill", "-d", "when to use it"],
]
"""Every command that takes ``--workspace``."""


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The model specs loaded (none may be, for a workspace that does not exist)."""
    loaded: list[str] = []
    monkeypatch.setattr(kairos.models, "load_model", lambda spec, *a, **kw: loaded.append(spec))
    return loaded


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_missing_workspace_is_refused_and_not_created(args: list[str], tmp_path: Path, loads: list[str]) -> None:
    missing = tmp_path / "typo" / "ws"
    result = runner.invoke(app, [*args, "-w", str(missing)], input="")
    assert result.exit_code == 1, result.output
    assert f"the workspace {missing} does not exist" in result.stderr, result.output
    assert not (tmp_path / "typo").exists(), "nothing may be created for a mistyped --workspace"
    assert loads == []


@pytest.mark.parametrize("args", [["sessions"], ["kb", "stats"], ["run", "hello"]], ids=" ".join)
def test_a_file_as_workspace_is_refused(args: list[str], tmp_path: Path, loads: list[str]) -> None:
    (tmp_path / "notes.txt").write_text("not a folder")
    result = runner.invoke(app, [*args, "-w", str(tmp_path / "notes.txt")])
    assert result.exit_code == 1 and "is a file, not a folder" in result.stderr
    assert loads == []


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_state_folder_stays_out_of_git_status(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "notes.md").write_text("# Notes\n\nDeploys run on Fridays.\n")
    assert runner.invoke(app, ["sessions", "-w", str(repo)]).exit_code == 0
    added = runner.invoke(app, ["kb", "add", str(repo / "notes.md"), "-w", str(repo), "--embedder", "hash"])
    assert added.exit_code == 0, added.output
    assert (repo / ".kairos" / "knowledge.db").is_file()
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, capture_output=True,
                            text=True, check=True).stdout  # fmt: skip
    assert status.splitlines() == ["?? notes.md"]
    assert (repo / ".kairos" / ".gitignore").read_text() == STATE_GITIGNORE


def test_an_existing_state_folder_gets_its_gitignore_once(tmp_path: Path) -> None:
    """A workspace used before this release (or a .kairos/ made by a plain mkdir); an edited file is kept."""
    ws = tmp_path / "ws"
    (ws / ".kairos").mkdir(parents=True)
    assert runner.invoke(app, ["sessions", "-w", str(ws)]).exit_code == 0
    assert (ws / ".kairos" / ".gitignore").read_text() == STATE_GITIGNORE
    (ws / ".kairos" / ".gitignore").write_text("*\n!keep-me.txt\n")
    assert runner.invoke(app, ["sessions", "-w", str(ws)]).exit_code == 0
    assert (ws / ".kairos" / ".gitignore").read_text() == "*\n!keep-me.txt\n"


def test_kairos_home_gets_a_gitignore_only_when_kairos_creates_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("KAIROS_HOME", str(tmp_path / "state" / "kairos"))
    assert runner.invoke(app, ["sessions", "-w", str(ws)]).exit_code == 0
    assert (tmp_path / "state" / "kairos" / ".gitignore").read_text() == STATE_GITIGNORE
    # an existing folder (here a repository's root) is not kairos's to hide: a `*` there would hide the repository
    monkeypatch.setenv("KAIROS_HOME", str(ws))
    assert runner.invoke(app, ["sessions", "-w", str(ws)]).exit_code == 0
    assert not (ws / ".gitignore").exists() and not (ws / ".kairos").exists()
