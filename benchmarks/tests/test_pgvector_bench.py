"""The pgvector bench's plumbing at a tiny N (real servers: pgserver's PostgreSQL + pgvector, Debian's PostgreSQL)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from rich.console import Console

from kairos.testing.servers import find_postgres_bin
from kairos_bench import PGVECTOR
from kairos_bench.pgvector import BATCH, DIM, exact_top, pgserver_bin, unit_vectors


def test_exact_top_and_unit_vectors() -> None:
    data = unit_vectors(50, seed=1)
    assert data.shape == (50, DIM) and np.allclose(np.linalg.norm(data, axis=1), 1.0, atol=1e-5)
    assert exact_top(data, data[:3], 1) == [{0}, {1}, {2}]  # each vector is its own nearest


def test_both_backends_run_at_a_tiny_n() -> None:
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is not installed: pip install -e '.[scale]'")
    if pgserver_bin() is None and find_postgres_bin() is None:
        pytest.skip("neither pgserver (pip install pgserver) nor Debian's PostgreSQL (apt-get install postgresql)")
    out = PGVECTOR.run(console=Console(quiet=True), docs=2 * BATCH, trials=1, queries=20)
    assert out["bench"] == "pgvector" and out["params"]["sizes"] == [2 * BATCH]
    rows = {r["backend"]: r for r in out["rows"]}
    assert set(rows) == {"pgvector", "usearch"}
    for name, row in rows.items():
        if not row.get("installed", True):
            assert "install" in row["error"]
            continue
        assert row["n"] == 2 * BATCH and row["insert_rows_per_s"] > 0 and row["build_s"] > 0
        assert 0.5 <= row["recall_at_10"] <= 1.0, name  # HNSW on 2,000 random vectors finds most neighbours
        assert row["query_ms_p50"] <= row["query_ms_p99"] and row["disk_mb"] > 0 and row["start_s"] > 0
        assert out["summary"][f"{name}_{2 * BATCH}_recall_at_10"] == row["recall_at_10"]
    if "version" in rows["pgvector"]:
        assert "pgvector 0.6" in rows["pgvector"]["version"]
