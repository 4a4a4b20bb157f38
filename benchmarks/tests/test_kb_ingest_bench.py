"""The kb-ingest bench run small: its rows, stages and summary over real documents (no timing assertions)."""

from __future__ import annotations

import json
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kairos.cli import app
from kairos.knowledge.stages import STAGES
from kairos_bench import KB_INGEST
from kairos_bench.kb_ingest import CORPUS, corpus

FIRST = [p for _, p in CORPUS[:3]]


@pytest.mark.skipif(not all(p.is_file() for p in FIRST), reason="the machine image's documentation packages are absent")
def test_a_small_run_stores_every_document_and_accounts_for_each_stage() -> None:
    out = KB_INGEST.run(console=Console(quiet=True), quick=True, docs=3, embedder="hash")
    assert out["bench"] == "kb-ingest" and out["params"]["corpus"] == {"html": 1, "text": 1, "markdown": 0, "pdf": 1}
    (row,) = out["rows"]
    assert row["docs"] == row["stored"] == 3 and row["errors"] == []
    assert row["chunks"] == row["embedded"] > 3  # the PDF alone has many pages
    assert all(row[f"{stage}_s"] >= 0 for stage in STAGES) and row["extract_s"] > 0 and row["embed_s"] > 0
    summary = out["summary"]
    assert summary["chunks"] == row["chunks"] and summary["docs"] == 3
    assert summary["chunks_per_s"] == row["chunks_per_s"] > 0 and summary["docs_per_s"] > 0
    assert {f"{stage}_s" for stage in STAGES} | {"cpu_s_per_chunk", "chunks_per_s_idle_bound"} <= summary.keys()


def test_the_corpus_is_29_real_documents_of_every_kind_and_a_missing_one_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kinds = [kind for kind, _ in CORPUS]
    assert len(CORPUS) == 29 and {"html", "text", "markdown", "pdf"} == set(kinds)
    assert len({p for _, p in CORPUS}) == 29
    monkeypatch.setattr("kairos_bench.kb_ingest.CORPUS", (("text", tmp_path / "gone.txt"),))
    with pytest.raises(FileNotFoundError, match="gone.txt"):
        corpus()


@pytest.mark.skipif(not all(p.is_file() for p in FIRST), reason="the machine image's documentation packages are absent")
def test_kairos_bench_kb_ingest_writes_its_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    name = pyproject["project"]["entry-points"]["kairos.benchmarks"]["kb-ingest"]
    assert name == "kairos_bench:KB_INGEST"
    group, real = "kairos.benchmarks", metadata.entry_points
    eps = [metadata.EntryPoint("kb-ingest", name, group)]  # this checkout's, installed or not

    def entry_points(**kw: Any) -> Any:
        return eps if kw.get("group") == group else real(**kw)

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    out = tmp_path / "kb-ingest.json"
    args = ["bench", "kb-ingest", "--quick", "--docs", "2", "--embedder", "hash", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["bench"] == "kb-ingest" and data["summary"]["docs"] == 2 and len(data["rows"]) == 1
