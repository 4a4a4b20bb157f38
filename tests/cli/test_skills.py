"""``kairos skills`` as a user runs it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kairos.cli import skills as skills_cli
from kairos.cli.skills import skills_app
from kairos.security.trust import TrustStore
from kairos.skills.catalog import load_skill_folder
from kairos.skills.config import SkillsConfig
from tests.skills.test_catalog import write_skill

runner = CliRunner()


@pytest.fixture(autouse=True)
def _state_in_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAIROS_HOME", raising=False)


def invoke(*args: str, input: str | None = None) -> tuple[int, str]:
    result = runner.invoke(skills_app, list(args), input=input)
    return result.exit_code, result.output


def test_list_shows_builtins_workspace_and_broken(workspace: Path) -> None:
    write_skill(workspace / "skills", "mine", "Use when mine.")
    bad = workspace / "skills" / "bad"
    bad.mkdir()
    (bad / "SKILL.md").write_text("oops")
    code, out = invoke("list", "-w", str(workspace))
    assert code == 0, out
    assert "report-writing" in out and "changelog" in out and "kairos (built-in)" in out
    assert "mine" in out and "Use when mine." in out
    assert "bad" in out and "invalid" in out and "front matter" in out


def test_review_then_approve_then_revoke(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_config_dir: Path
) -> None:
    shared = tmp_path / "shared"
    folder = write_skill(shared, "vendor", "Use for vendor work.", body="Run scripts/x.sh")
    (folder / "scripts").mkdir()
    (folder / "scripts" / "x.sh").write_text("echo vendor-script\n")
    (workspace / "kairos.toml").write_text("")  # the [skills] table arrives when the config is wired
    ws = ["-w", str(workspace)]

    code, out = invoke("list", *ws)
    assert "vendor" not in out  # not configured yet: only the defaults are scanned

    cfg = SkillsConfig(dirs=[str(shared)], builtin=False, entry_points=False)
    monkeypatch.setattr(skills_cli, "_config", lambda _ws: cfg)
    code, out = invoke("list", *ws)
    assert "needs_approval" in out and "kairos skills approve vendor" in out
    code, out = invoke("show", "vendor", *ws)
    assert code == 0 and "echo vendor-script" in out and "sha256:" in out
    code, out = invoke("approve", "vendor", *ws, input="n\n")
    assert code == 1
    code, out = invoke("approve", "vendor", *ws, input="y\n")
    assert code == 0 and "approved" in out
    skill = load_skill_folder(folder, "path", "x")
    assert skill.digest[:12] in (user_config_dir / "approvals.json").read_text()
    assert not (workspace / ".kairos").exists()  # nothing the workspace (or the agent) can write
    code, out = invoke("list", *ws)
    assert "approved" in out
    code, out = invoke("revoke", "vendor", *ws)
    assert code == 0
    code, out = invoke("revoke", "vendor", *ws)
    assert code == 1 and "no approval" in out


def test_approve_trusted_and_unknown(workspace: Path) -> None:
    code, out = invoke("approve", "report-writing", "-w", str(workspace), "--yes")
    assert code == 0 and "trusted already" in out
    code, out = invoke("approve", "nope", "-w", str(workspace), "--yes")
    assert code == 1 and "no skill named 'nope'" in out


def test_new_scaffolds_a_valid_four_part_skill(workspace: Path) -> None:
    code, out = invoke("new", "weekly-notes", "-w", str(workspace), "-d", "Use when: writing weekly notes. Not for x.")
    assert code == 0, out
    folder = workspace / ".kairos" / "skills" / "weekly-notes"
    skill = load_skill_folder(folder, "workspace", "test")
    assert skill.description == "Use when: writing weekly notes. Not for x."
    for part in ("## Role and reader", "## Principles", "## Prohibitions", "## References"):
        assert part in skill.body
    assert "{{python}} {{skill_dir}}/scripts/" in skill.body
    code, out = invoke("new", "weekly-notes", "-w", str(workspace), "-d", "again")
    assert code == 1 and "already exists" in out
    code, out = invoke("new", "Bad_Name", "-w", str(workspace), "-d", "x")
    assert code == 1 and "not a valid skill name" in out


def test_new_prompts_for_the_description_and_honours_dir(workspace: Path) -> None:
    code, out = invoke("new", "x-y", "-w", str(workspace), "--dir", "skills", input="Use when x. Not for y.\n")
    assert code == 0, out
    assert (workspace / "skills" / "x-y" / "SKILL.md").is_file()
    code, out = invoke("list", "-w", str(workspace))
    assert "x-y" in out and "needs_trust" in out and "kairos trust" in out
    TrustStore().trust(workspace)
    code, out = invoke("list", "-w", str(workspace))
    assert "x-y" in out and "needs_trust" not in out and "trusted" in out


def test_a_workspace_skill_can_be_approved_alone(workspace: Path) -> None:
    write_skill(workspace / "skills", "mine", "Use when mine.")
    code, out = invoke("approve", "mine", "-w", str(workspace), "--yes")
    assert code == 0 and "approved" in out
    code, out = invoke("list", "-w", str(workspace))
    assert "mine" in out and "approved" in out


def test_show_prints_escape_sequences_instead_of_obeying_them(workspace: Path) -> None:
    TrustStore().trust(workspace)
    folder = write_skill(workspace / "skills", "tricky", "Use when tricky.", body="visible\x1b[2K\rhidden")
    (folder / "notes.md").write_text("\x1b]0;pwned\x07 title")
    code, out = invoke("show", "tricky", "-w", str(workspace))
    assert code == 0, out
    assert "\x1b" not in out and "\\x1b[2K\\rhidden" in out and "\\x1b]0;pwned\\x07" in out


def test_list_notes_a_workspace_approvals_file_it_ignores(workspace: Path) -> None:
    (workspace / ".kairos").mkdir()
    (workspace / ".kairos" / "skill-approvals.json").write_text("{}")
    code, out = invoke("list", "-w", str(workspace))
    flat = out.replace("\n", "")  # Rich wraps long paths
    assert code == 0 and "ignoring" in flat and "skill-approvals.json" in flat
