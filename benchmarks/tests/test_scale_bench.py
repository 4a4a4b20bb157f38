"""``kairos bench scale`` in small: one worker on real PostgreSQL and NATS, one kill -9, the JSON it reports."""

from __future__ import annotations

import json

from kairos_bench import scale


def test_tiny_scale_run_loses_nothing_and_reports_its_schema(scale_deps: None) -> None:
    result = scale.run(workers="1", sessions=4, rate=4, duration=6, burst=16, kill_every_s=3, latency_s=0.05)
    assert set(result) == {"bench", "params", "rows", "summary"} and result["bench"] == "scale"
    summary = result["summary"]
    for key in ("lost_events", "duplicated_side_effects", "dispatch_p99_ms", "throughput_ratio_2_vs_1",
                "handover_p99_s"):  # fmt: skip
        assert key in summary
    assert summary["lost_events"] == 0 and summary["duplicated_side_effects"] == 0, result["rows"]
    assert summary["kills"] == 1 and summary["throughput_ratio_2_vs_1"] is None  # one worker count only
    row = result["rows"][0]
    assert row["workers"] == 1 and row["sessions"] == 4 and row["accepted"] == row["sent"] > 0
    assert row["worker_starts"] == 2 and row["drained"], row  # the killed worker was started again
    json.dumps(result)
