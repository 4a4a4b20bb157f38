"""Skill discovery, front-matter parsing, precedence and trust."""

from __future__ import annotations

from pathlib import Path

import pytest

from kairos.skills.catalog import (
    ApprovalStore,
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


def catalog_for(workspace: Path, **config: object) -> SkillCatalog:
    cfg = SkillsConfig.model_validate({"builtin": False, "entry_points": False, **config})
    return SkillCatalog.for_workspace(workspace, cfg, state_dir=workspace / ".state")


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


def test_workspace_skills_are_trusted_and_broken_ones_listed_with_reason(workspace: Path) -> None:
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


def test_corrupt_approvals_file_fails_closed(workspace: Path, tmp_path: Path) -> None:
    write_skill(tmp_path / "shared", "ext")
    state = workspace / ".state"
    state.mkdir()
    (state / "skill-approvals.json").write_text("{not json")
    cat = catalog_for(workspace, dirs=[str(tmp_path / "shared")])
    (entry,) = cat.entries()
    assert entry.status == "needs_approval" and "unreadable" in entry.reason


def test_builtin_skills_ship_valid_and_trusted(workspace: Path) -> None:
    cat = SkillCatalog.for_workspace(workspace, SkillsConfig(entry_points=False), state_dir=workspace / ".state")
    entries = {e.name: e for e in cat.entries()}
    assert {"report-writing", "changelog"} <= set(entries)
    for name in ("report-writing", "changelog"):
        e = entries[name]
        assert e.kind == "builtin" and e.status == "trusted", e.reason
    assert (builtin_root() / "report-writing" / "scripts" / "make_report.py").is_file()
    untrusted = SkillCatalog.for_workspace(
        workspace, SkillsConfig(entry_points=False, trust_builtin=False), state_dir=workspace / ".state"
    )
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
    cat = SkillCatalog.for_workspace(workspace, SkillsConfig(builtin=False), state_dir=workspace / ".state")
    entries = {e.name: e for e in cat.entries()}
    assert entries["vendor-skill"].kind == "package" and entries["vendor-skill"].status == "needs_approval"
    assert entries["bad"].status == "invalid" and "no module named x" in entries["bad"].reason


def test_digest_ignores_bytecode_caches(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "a")
    before = folder_digest(folder)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert folder_digest(folder) == before


def test_approval_store_round_trip(tmp_path: Path) -> None:
    folder = write_skill(tmp_path / "s", "a")
    skill = load_skill_folder(folder, "path", "test")
    store = ApprovalStore(tmp_path / "state" / "approvals.json")
    assert store.status(skill) == "needs_approval"
    store.approve(skill)
    assert store.status(skill) == "approved"
    assert store.load()["a"]["digest"] == skill.digest


def test_a_root_can_itself_be_a_skill(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "solo")
    found = list(SkillCatalog([SkillRoot(folder, "workspace", "x")], ApprovalStore(tmp_path / "a.json")).available())
    assert [s.name for s in found] == ["solo"]


def test_rescans_reuse_a_parsed_skill_until_one_of_its_files_changes(tmp_path: Path) -> None:
    folder = write_skill(tmp_path / "skills", "alpha")
    (folder / "run.py").write_text("print(1)\n")
    catalog = catalog_for(tmp_path)
    first = catalog.available()[0]
    assert catalog.available()[0] is first  # nothing changed: no re-read, no re-hash
    (folder / "run.py").write_text("print(22)\n")
    edited = catalog.available()[0]
    assert edited is not first and edited.digest != first.digest
    (folder / "extra.md").write_text("x")
    assert catalog.available()[0].digest != edited.digest
