from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from kairos_bench import BM25_SPEED
from kairos_bench.bm25_speed import agreement, fts_tokens, query_words, replicate, run
from kairos_bench.locomo_retrieval import DEFAULT_DATA

CONV = {
    "conversation": {
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a greyhound called Comet."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely! I started pottery classes."},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "Running every morning by the lighthouse."},
        ],
    },
    "qa": [
        {"question": "What is the name of Ann's greyhound?", "category": 4},
        {"question": "What classes did Bo start?", "category": 1},
        {"question": "Where does Ann run?", "category": 1},
    ],
}


def test_helpers() -> None:
    assert replicate(["a b", "c"], 5) == ["a b rep0", "c rep0", "a b rep1", "c rep1", "a b rep2"]
    assert fts_tokens(["Running classes, started!", ""]) == [["run", "class", "start"], []]
    assert query_words("What is the name of the dog?") == "name dog"
    import numpy as np

    scores = np.array([3.0, 3.0, 3.0, 1.0, 0.0])
    assert agreement([1, 2], scores) is not None  # fewer than 10 positives: compare with the 4 there are
    assert agreement([0, 1, 2, 3], scores) == 1.0 and agreement([4], scores) == 0.0
    assert agreement([], np.zeros(3)) is None


def test_small_corpus(tmp_path: Path) -> None:
    (tmp_path / "conv.json").write_text(json.dumps(CONV))
    result = run(Console(quiet=True), docs=300, data=tmp_path, repeats=1)
    assert result["bench"] == "bm25-speed" and result["params"]["docs"] == 300
    summary = result["summary"]
    # the peers score FTS5's tokens, tantivy its own stems and Lucene idf: on three turns the top 10s still agree
    assert summary["top10_agreement"] == 1.0 and summary["top10_agreement_rank_bm25"] == 1.0
    assert summary["qps_ratio_bm25s"] > 0 and summary["insert_p50_ms"] > 0
    engines = [row["engine"] for row in result["rows"]]
    assert engines[0].startswith("kairos (tantivy") and engines[1].startswith("tantivy alone")
    assert engines[2].startswith("SQLite FTS5 alone") and all(row["qps"] > 0 for row in result["rows"])
    assert "rebuild" in result["rows"][3]["insert"] and "incremental" in result["rows"][0]["insert"]


def test_empty_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no LoCoMo"):
        run(Console(quiet=True), data=tmp_path)


@pytest.mark.skipif(not DEFAULT_DATA.is_dir(), reason="the shared LoCoMo data is not here")
def test_shared_data_agrees_with_bm25s() -> None:
    result = run(Console(quiet=True), docs=3000, queries=40, repeats=1, rank_bm25_queries=5)
    assert result["summary"]["top10_agreement"] >= 0.95


def test_registered() -> None:
    assert "docs" in BM25_SPEED.options and BM25_SPEED.takes_data and BM25_SPEED.module == "bm25_speed"
