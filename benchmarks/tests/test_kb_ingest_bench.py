"""The kb-ingest bench run small: its rows, stages and summary over real documents (no timing assertions)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

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
