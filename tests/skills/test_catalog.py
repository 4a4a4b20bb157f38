"""Skill discovery, front-matter parsing, precedence and trust."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kairos.security.review import ApprovalStore
from kairos.security.trust import TrustStore
from kairos.skills.catalog import (
    SkillCatalog,
    SkillFormatError,
    SkillRoot,
    builtin_root,
    folder_digest,
    load_skill_folder,
    parse_skill_md,
)
from kairos.skills.config import SkillsConfig


def write_skill(root: Path, name: str, description: str = "Use when testing.", body: str = "Do it.") -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n\n{body}\n")
    return folder


def catalog_for(workspace: Path, *, trusted: bool = True, **config: object) -> SkillCatalog:
    """The catalog of ``workspace``, which the user has trusted unless ``trusted`` is False."""
    if trusted:
        TrustStore().trust(workspace)
    cfg = SkillsConfig.model_validate({"builtin": False, "entry_points": False, **config})
    return SkillCatalog.for_workspace(workspace, cfg)


def test_parse_front_matter_and_body() -> None:
    meta, body = parse_skill_md(
        "---\nname: a\ndescription: >-\n  Use when\n  folded.\nlicense: MIT\n---\n\n# A\nbody\n"
    )
    assert meta == {"name": "a", "description": "Use when folded.", "license": "MIT"}
    assert body == "# A\nbody"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("# no front matter\n", "must start with YAML front matter"),
        ("---\nname: a\n", "not closed"),
        ("---\nname: [unclosed\n---\nbody\n", "not valid YAML at line"),
        ("---\n- a\n- b\n---\nbody\n", "must be a mapping"),
    ],
)
def test_parse_errors_say_what_to_fix(text: str, needle: str) -> None:
    with pytest.raises(SkillFormatError, match=needle):
        parse_skill_md(text)


@pytest.mark.parametrize(
    ("front", "body", "needle"),
    [
        ("description: x", "b", "needs 'name'"),
        ("name: Bad_Name\ndescription: x", "b", "not a valid skill name"),
        ("name: other\ndescription: x", "b", "the folder is 'good'"),
        ("name: good", "b", "needs 'description'"),
        ("name: good\ndescription: " + "x" * 1100, "b", "at most 1024"),
        ("name: good\ndescription: x", "", "has no body"),
    ],
)
def test_invalid_meta(tmp_path: Path, front: str, body: str, needle: str) -> None:
    folder = tmp_path / "good"
    folder.mkdir()
    (folder / "SKILL.md").write_text(f"---\n{front}\n---\n{body}\n")
    with pytest.raises(SkillFormatError, match=needle):
        load_skill_folder(folder, "workspace", "test")


def test_skills_of_a_trusted_workspace_are_trusted_and_broken_ones_listed_with_reason(workspace: Path) -> None:
    root = workspace / ".kairos" / "skills"
    write_skill(root, "alpha")
    broken = root / "broken"
    broken.mkdir()
    (broken / "SKILL.md").write_text("no front matter")
    (root / "lower").mkdir()
    (root / "lower" / "skill.md").write_text("---\nname: lower\n---\n")
    (root / "not-a-skill").mkdir()  # folders without SKILL.md are ignored
    entries = {e.name: e for e in catalog_for(workspace).entries()}
    assert set(entries) == {"alpha", "broken", "lower"}
    assert entries["alpha"].status == "trusted" and entries["alpha"].usable
    assert entries["broken"].status == "invalid" and "front matter" in entries["broken"].reason
    assert "rename it to SKILL.md" in entries["lower"].reason
    assert [s.name for s in catalog_for(workspace).available()] == ["alpha"]


def test_earlier_dirs_shadow_later_ones_but_broken_skills_claim_no_name(workspace: Path) -> None:
    write_skill(workspace / ".kairos" / "skills", "same", "first")
    write_skill(workspace / "skills", "same", "second")
    bad = workspace / ".kairos" / "skills" / "other"
    bad.mkdir()
    (bad / "SKILL.md").write_text("---\nname: other\n---\nbody\n")
    write_skill(workspace / "skills", "other", "working")
    cat = catalog_for(workspace)
    statuses = sorted((e.name, e.status) for e in cat.entries())
    assert statuses == [("other", "invalid"), ("other", "trusted"), ("same", "shadowed"), ("same", "trusted")]
    assert {s.name: s.description for s in cat.available()} == {"same": "first", "other": "working"}
    found = cat.find("other")
    assert found is not None and found.status == "trusted"


def test_skills_outside_the_workspace_need_approval_pinned_to_content(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "shared"
    folder = write_skill(outside, "ext")
    cat = catalog_for(workspace, dirs=[str(outside)])
    (entry,) = cat.entries()
    assert entry.kind == "path" and entry.status == "needs_approval"
    assert "kairos skills approve ext" in entry.reason
    assert cat.available() == []
    assert entry.skill is not None
    cat.approvals.approve(entry.skill)
    assert [s.name for s in cat.available()] == ["ext"]
    (folder / "scripts").mkdir()
    (folder / "scripts" / "x.py").write_text("print(1)\n")  # an added script changes the hash
    (entry,) = cat.entries()
    assert entry.status == "changed" and cat.available() == []
    assert cat.approvals.revoke("ext") and not cat.approvals.revoke("ext")
    assert cat.entries()[0].status == "needs_approval"


def test_workspace_trust_can_be_switched_off(workspace: Path) -> None:
    write_skill(workspace / "skills", "mine")
    assert catalog_for(workspace, trust_workspace=False).entries()[0].status == "needs_approval"


def test_corrupt_approvals_file_fails_closed(workspace: Path, tmp_path: Path, user_config_dir: Path) -> None:
    write_skill(tmp_path / "shared", "ext")
    (user_config_dir / "approvals.json").write_text("{not json")
    cat = catalog_for(workspace, dirs=[str(tmp_path / "shared")])
    (entry,) = cat.entries()
    assert entry.status == "needs_approval" and "unreadable" in entry.reason


def test_builtin_skills_ship_valid_and_trusted(workspace: Path) -> None:
    cat = SkillCatalog.for_workspace(workspace, SkillsConfig(entry_points=False))
    entries = {e.name: e for e in cat.entries()}
    assert {"report-writing", "changelog"} <= set(entries)
    for name in ("report-writing", "changelog"):
        e = entries[name]
        assert e.kind == "builtin" and e.status == "trusted", e.reason
    assert (builtin_root() / "report-writing" / "scripts" / "make_report.py").is_file()
    untrusted = SkillCatalog.for_workspace(workspace, SkillsConfig(entry_points=False, trust_builtin=False))
    assert untrusted.available() == []


def test_entry_point_skills_are_untrusted(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    pkg = tmp_path / "thirdparty"
    write_skill(pkg, "vendor-skill")

    class FakeEP:
        def __init__(self, name: str, target: object) -> None:
            self.name, self.value, self.dist, self._target = name, name, None, target

        def load(self) -> object:
            if isinstance(self._target, Exception):
                raise self._target
            return self._target

    eps = [FakeEP("good", lambda: [pkg]), FakeEP("bad", ImportError("no module named x"))]
    monkeypatch.setattr(metadata, "entry_points", lambda group: eps if group == "kairos.skills" else [])
    cat = SkillCatalog.for_workspace(workspace, SkillsConfig(builtin=False))
    entries = {e.name: e for e in cat.entries()}
    assert entries["vendor-skill"].kind == "package" and entries["vendor-skill"].status == "needs_approval"
    assert entries["bad"].status == "invalid" and "no module named x" in entries["bad"].reason


def test_digest_ignores_bytecode_caches(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "a")
    before = folder_digest(folder)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert folder_digest(folder) == before


def test_skill_approvals_live_in_the_user_config_dir(workspace: Path, tmp_path: Path, user_config_dir: Path) -> None:
    folder = write_skill(tmp_path / "s", "a")
    skill = load_skill_folder(folder, "path", "test")
    cat = catalog_for(workspace)
    assert cat.approvals.path == user_config_dir / "approvals.json"
    assert cat.approvals.status(skill) == "needs_approval"
    cat.approvals.approve(skill)
    assert cat.approvals.status(skill) == "approved"
    rec = ApprovalStore().get("skill", "a")
    assert rec is not None and rec.digest == skill.digest and rec.source == str(folder.resolve())
    assert not (workspace / ".kairos").exists()


def test_a_root_can_itself_be_a_skill(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "solo")
    found = list(SkillCatalog([SkillRoot(folder, "workspace", "x")], ApprovalStore(tmp_path / "a.json")).available())
    assert [s.name for s in found] == ["solo"]


def test_rescans_reuse_a_parsed_skill_until_one_of_its_files_changes(tmp_path: Path) -> None:
    folder = write_skill(tmp_path / "skills", "alpha")
    (folder / "run.py").write_text("print(1)\n")
    catalog = catalog_for(tmp_path)
    first = catalog.available()[0]
    assert first.kind == "workspace"
    assert catalog.available()[0] is first  # nothing changed: no re-read, no re-hash
    (folder / "run.py").write_text("print(22)\n")
    edited = catalog.available()[0]
    assert edited is not first and edited.digest != first.digest
    (folder / "extra.md").write_text("x")
    assert catalog.available()[0].digest != edited.digest


def test_skills_of_an_untrusted_workspace_need_trust_and_say_how(workspace: Path) -> None:
    write_skill(workspace / "skills", "mine")
    write_skill(workspace / "skills", "other")
    cat = catalog_for(workspace, trusted=False)
    entries = {e.name: e for e in cat.entries()}
    assert {e.status for e in entries.values()} == {"needs_trust"} and cat.available() == []
    reason = entries["mine"].reason
    assert f"the workspace {workspace.resolve()} is not trusted" in reason and "kairos trust " in reason
    assert "kairos skills approve mine" in reason
    mine = entries["mine"].skill
    assert mine is not None
    cat.approvals.approve(mine)  # approving one skill does not trust the workspace
    assert [s.name for s in cat.available()] == ["mine"]
    TrustStore().trust(workspace)  # noticed on the next scan: no new catalog needed
    assert {e.name: e.status for e in cat.entries()} == {"mine": "trusted", "other": "trusted"}
    TrustStore().revoke(workspace)
    assert {e.name: e.status for e in cat.entries()} == {"mine": "approved", "other": "needs_trust"}


def test_a_linked_skill_folder_is_judged_by_where_it_really_is(workspace: Path, tmp_path: Path) -> None:
    outside = write_skill(tmp_path / "elsewhere", "linked")
    (workspace / "skills").mkdir()
    (workspace / "skills" / "linked").symlink_to(outside, target_is_directory=True)
    (entry,) = catalog_for(workspace).entries()
    assert entry.kind == "path" and entry.status == "needs_approval"
    assert str(outside.resolve()) in entry.origin and "kairos skills approve linked" in entry.reason


def test_a_linked_skills_dir_is_judged_by_where_it_really_is(workspace: Path, tmp_path: Path) -> None:
    write_skill(tmp_path / "elsewhere", "far")
    (workspace / ".kairos").mkdir()
    (workspace / ".kairos" / "skills").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (entry,) = catalog_for(workspace).entries()
    assert entry.kind == "path" and entry.status == "needs_approval"


def test_a_skill_with_links_out_of_its_folder_is_third_party(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("key")
    folder = write_skill(workspace / "skills", "sneaky")
    (folder / "data.txt").symlink_to(secret)
    (folder / "inner.md").write_text("x")
    (folder / "alias.md").symlink_to(folder / "inner.md")  # a link inside the folder is fine
    (entry,) = catalog_for(workspace).entries()
    assert entry.kind == "path" and entry.status == "needs_approval"
    assert entry.skill is not None and entry.skill.links_out == ("data.txt",)


def test_a_workspace_approvals_file_is_ignored(workspace: Path, tmp_path: Path) -> None:
    folder = write_skill(tmp_path / "shared", "ext")
    digest = folder_digest(folder)
    state = workspace / ".kairos"
    state.mkdir()
    shipped = {"ext": {"digest": digest, "folder": str(folder)}, "skill:ext": {"digest": digest}}
    (state / "skill-approvals.json").write_text(json.dumps(shipped))
    (state / "approvals.json").write_text(json.dumps(shipped))
    (entry,) = catalog_for(workspace, dirs=[str(tmp_path / "shared")]).entries()
    assert entry.status == "needs_approval"
