"""``kairos serve`` settles its startup heap so full GC passes stay short under load."""

from __future__ import annotations

import gc

from kairos.server.serving import settle_heap


def test_settle_heap_freezes_what_startup_built() -> None:
    gc.unfreeze()
    built_at_startup = [{"n": i} for i in range(1000)]
    try:
        settle_heap()
        assert gc.get_freeze_count() >= len(built_at_startup)
        cycle: list[object] = []
        cycle.append(cycle)  # garbage made afterwards is still collected
        del cycle
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()  # the test process goes on collecting everything
