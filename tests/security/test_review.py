"""The review-before-use store: approvals pin content, live in the user config dir, fail closed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kairos.security.review import ApprovalStore, JsonFile


def test_default_location_is_the_user_config_dir(user_config_dir: Path) -> None:
    assert ApprovalStore().path == user_config_dir / "approvals.json"


def test_approvals_pin_a_digest_per_kind_and_name(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "cfg" / "approvals.json")
    assert store.status("skill", "x", "d1") == "needs_approval"
    store.approve("skill", "x", "d1", source="/s/x", now=datetime(2025, 1, 2, tzinfo=UTC))
    assert store.status("skill", "x", "d1") == "approved"
    assert store.status("skill", "x", "d2") == "changed"
    assert store.status("mcp-server", "x", "d1") == "needs_approval"  # kinds do not mix
    store.approve("mcp-server", "x", "tools-hash")
    rec = store.get("skill", "x")
    assert rec is not None and (rec.source, rec.approved_at) == ("/s/x", "2025-01-02T00:00:00+00:00")
    assert [(a.kind, a.name) for a in store.approvals()] == [("mcp-server", "x"), ("skill", "x")]
    assert [a.name for a in store.approvals("skill")] == ["x"]
    assert store.revoke("skill", "x") and not store.revoke("skill", "x")
    assert store.status("skill", "x", "d1") == "needs_approval"
    assert store.status("mcp-server", "x", "tools-hash") == "approved"


def test_written_atomically_and_privately(tmp_path: Path) -> None:
    path = tmp_path / "approvals.json"
    ApprovalStore(path).approve("skill", "a", "d")
    assert json.loads(path.read_text())["skill:a"]["digest"] == "d"
    assert path.stat().st_mode & 0o077 == 0
    assert [p.name for p in tmp_path.iterdir()] == ["approvals.json"]  # no temporary file left


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"skill:a": "not a record"}', "\udcff"])
def test_an_unusable_file_approves_nothing(tmp_path: Path, content: str) -> None:
    path = tmp_path / "approvals.json"
    path.write_text(content, errors="surrogateescape")
    store = ApprovalStore(path)
    assert store.status("skill", "a", "d") == "needs_approval"
    if content.startswith(("{not", "[", "\udcff")):
        assert store.problem is not None and str(path) in store.problem


def test_reads_are_cached_until_the_file_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.json"
    path.write_text('{"a": 1}')
    f = JsonFile(path, "things")
    parses = []
    real = JsonFile._parse

    def counting(self: JsonFile) -> tuple[dict[str, object], str | None]:
        parses.append(1)
        return real(self)

    monkeypatch.setattr(JsonFile, "_parse", counting)
    assert f.read() == {"a": 1} and f.read() == {"a": 1}
    assert len(parses) == 1
    f.write({"a": 2, "b": 3})
    assert f.read() == {"a": 2, "b": 3} and len(parses) == 2
    path.unlink()
    assert f.read() == {} and f.problem is None
