"""The runtime bench's measurements on a small scale: they finish, lose nothing, and report what they claim."""

from __future__ import annotations

from pathlib import Path

from kairos_bench.runtime_perf import _dispatch, _interrupt_latencies, _memory


async def test_dispatch_delivers_every_event_and_reports_rates(tmp_path: Path) -> None:
    result = await _dispatch(5, 200, tmp_path, producers=8)
    assert result["pending_after"] == 0 and result["events"] == 200
    assert result["events_per_s"] > 0 and result["end_to_end_per_s"] > 0


async def test_interrupts_stop_a_stream_and_a_tool(tmp_path: Path) -> None:
    for mode in ("stream", "tool"):
        latencies = await _interrupt_latencies(mode, 3, tmp_path)
        assert len(latencies) == 3 and all(v >= 0 for v in latencies)


async def test_memory_counts_sessions_and_closes_idle_workers(tmp_path: Path) -> None:
    result = await _memory(20, tmp_path, idle_close_s=0.05)
    assert result["sessions"] == 20 and result["open_workers"] == 0 and result["rss_mb"] > 0
