"""The ui bench run small in a real chromium: every metric measured, every streamed delta painted."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from kairos_bench import UI
from kairos_bench.ui import CHROMIUM

pytest.importorskip("playwright.async_api", reason="playwright is missing (make test installs it)")


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing (make test installs chromium)")
def test_a_small_run_measures_load_delta_to_paint_and_the_inspector() -> None:
    out = UI.run(console=Console(quiet=True), trials=1, records=200, requests=6, deltas=20)
    assert out["bench"] == "ui" and out["params"]["records"] == 200
    metrics = {r["metric"]: r for r in out["rows"]}
    assert set(metrics) == {"ui_load_ms_5k", "ui_delta_to_paint_p95_ms", "ui_inspector_ms"}
    assert metrics["ui_delta_to_paint_p95_ms"]["missing"] == 0  # every delta reached the screen
    assert metrics["ui_inspector_ms"]["requests"] == 6
    assert all(isinstance(v, float) and v > 0 for v in out["summary"].values())
