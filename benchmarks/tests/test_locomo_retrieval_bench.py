from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kairos.knowledge import HashEmbedder
from kairos_bench import LOCOMO_RETRIEVAL
from kairos_bench.locomo_retrieval import DEFAULT_DATA, load_turns, norm_id, parse_when, run

CONV: dict[str, Any] = {
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a greyhound called Comet."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely! I started pottery classes."},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "Look", "blip_caption": "a photo of a lighthouse"},
        ],
        "session_2_date_time": "9:00 am on 1 June, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "My pottery bowl cracked in the kiln."}],
    },
    "qa": [
        {"question": "What is the name of Ann's greyhound?", "answer": "Comet", "evidence": ["D1:1"], "category": 4},
        {"question": "What happened to the pottery bowl in the kiln?", "evidence": ["D2:01", "D1:2"], "category": 1},
        {"question": "Adversarial", "adversarial_answer": "x", "evidence": ["D1:1"], "category": 5},
        {"question": "No evidence", "answer": "x", "evidence": [], "category": 2},
    ],
}


def test_helpers() -> None:
    assert norm_id("D30:05") == "D30:5" and norm_id("D:11:26") == "D11:26" and norm_id("odd") == "odd"
    assert parse_when("1:56 pm on 8 May, 2023") is not None and parse_when("someday") is None
    turns = load_turns(CONV["conversation"])
    assert [t.turn_id for t in turns] == ["D1:1", "D1:2", "D1:3", "D2:1"]
    assert turns[2].text == "Look [shares a photo: a photo of a lighthouse]"
    assert turns[3].when == "9:00 am on 1 June, 2023"


def test_run_on_a_small_folder(tmp_path: Path) -> None:
    (tmp_path / "conv-x.json").write_text(json.dumps(CONV))
    result = run(Console(quiet=True), data=tmp_path, embedder=HashEmbedder())
    assert result["bench"] == "locomo-retrieval"
    assert result["params"]["questions"] == 2 and result["params"]["questions_without_evidence"] == 1
    rows = {r["mode"]: r for r in result["rows"]}
    assert set(rows) == {"bm25", "dense", "hybrid", "hybrid+contextual", "hybrid+rerank"}
    assert "not run" in rows["hybrid+rerank"]["status"]
    # four turns, k up to 20: every evidence turn is retrieved in every mode
    assert rows["bm25"]["recall@5"] == 1.0 and rows["hybrid"]["recall@20"] == 1.0
    bm25_top = rows["bm25"]["mrr"]
    assert 0.5 <= bm25_top <= 1.0
    summary = result["summary"]
    assert summary["recall10_best"] == max(summary[f"recall10_{m}"] for m in ("bm25", "dense", "hybrid"))
    assert summary["recall10_gain_over_bm25"] == pytest.approx(summary["recall10_best"] - summary["recall10_bm25"])


def test_empty_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no LoCoMo conversation files"):
        run(Console(quiet=True), data=tmp_path, embedder=HashEmbedder())


@pytest.mark.skipif(not DEFAULT_DATA.is_dir(), reason="the shared LoCoMo data is not here")
def test_quick_run_on_the_shared_data() -> None:
    result = run(Console(quiet=True), quick=True, embedder=HashEmbedder())
    assert result["params"]["questions"] == 30 and result["summary"]["recall10_bm25"] > 0.3


def test_registered_with_a_data_option() -> None:
    assert LOCOMO_RETRIEVAL.takes_data and LOCOMO_RETRIEVAL.module == "locomo_retrieval"
