"""The lexical bench's plumbing on one LoCoMo conversation and a few questions (a real PostgreSQL)."""

from __future__ import annotations

import importlib.util

import pytest
from rich.console import Console

from kairos.testing.servers import find_postgres_bin
from kairos_bench import LEXICAL
from kairos_bench._locomo import DEFAULT_DATA
from kairos_bench.lexical import ENGINES, or_query


def test_or_query_joins_words_with_or() -> None:
    assert or_query("When did Caroline go, Caroline?") == "when | did | caroline | go"
    assert or_query("?!") == "nothing"


def test_both_engines_run_on_a_tiny_corpus() -> None:
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is not installed: pip install -e '.[scale]'")
    if find_postgres_bin() is None:
        pytest.skip("no PostgreSQL binaries (apt-get install postgresql)")
    if not (DEFAULT_DATA / "conv-26.json").is_file():
        pytest.skip(f"no LoCoMo data in {DEFAULT_DATA}")
    out = LEXICAL.run(console=Console(quiet=True), conversations=["conv-26"], limit=5)
    assert set(out) == {"bench", "params", "rows", "summary"} and out["bench"] == "lexical"
    assert [r["engine"] for r in out["rows"]] == list(ENGINES)
    summary = out["summary"]
    assert summary["questions"] == 5 and summary["chosen"] in {"pg_fts", "embedded"}
    for key in ("recall10_pg_fts", "recall10_embedded", "top10_overlap"):
        assert 0.0 <= summary[key] <= 1.0, key
    assert summary["top10_overlap_embedded"] == 1.0  # the reference agrees with itself
