"""The heap policy of a process that serves until it exits (``kairos serve``).

Python's full GC pass walks every tracked object and stops the event loop while it does. In the
``load`` bench (1,000 open sessions, 200 events/s) such passes came every ~20 s and took 100–340
ms, most of it on objects that never die: imported modules at first, then the open sessions'
messages. Two measures, both from the ``gc`` module's documented API:

* :func:`settle_heap` at startup: what startup built is frozen (``gc.freeze``), as the gc docs
  advise for servers.
* :class:`HeapKeeper` while serving: after each full pass its survivors are frozen too, so the
  next passes walk only what is newer. Frozen objects are never collected, so cyclic garbage among
  them (a closed session's objects) would stay; when the frozen set has grown to ``growth`` times
  its size after the last full sweep, everything is unfrozen and the next full pass sweeps it all
  once. Memory held by such garbage is bounded by that factor; the long pauses become rare.
"""

from __future__ import annotations

import asyncio
import gc


def settle_heap() -> None:
    """Collect once, then freeze what startup built (modules, the app, recovered sessions)."""
    gc.collect()
    gc.freeze()


def _full_passes() -> int:
    return int(gc.get_stats()[2]["collections"])


class HeapKeeper:
    """Freeze the survivors of each full GC pass; unfreeze all when the frozen set has grown ``growth``-fold."""

    def __init__(self, growth: float = 2.0, floor: int = 100_000) -> None:
        self.growth = growth
        self.floor = floor
        """The frozen size below which no sweep is forced (a small heap's full pass is short anyway)."""
        self.sweeps = 0
        self._passes = _full_passes()
        self._swept_at = max(gc.get_freeze_count(), floor)
        self._sweeping = False

    def tick(self) -> None:
        """After a new full pass: freeze its survivors, or unfreeze everything for one full sweep."""
        passes = _full_passes()
        if passes == self._passes:
            return
        self._passes = passes
        if self._sweeping:  # that pass walked everything: start counting again from what lives now
            gc.freeze()
            self._swept_at = max(gc.get_freeze_count(), self.floor)
            self._sweeping = False
        elif gc.get_freeze_count() > self.growth * self._swept_at:
            gc.unfreeze()  # the next full pass walks (and collects) everything once
            self._sweeping = True
            self.sweeps += 1
        else:
            gc.freeze()

    async def run(self, every_s: float = 1.0) -> None:
        """Check after every ``every_s`` seconds until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            self.tick()


def keep_heap() -> asyncio.Task[None]:
    """Settle the heap now and keep it while the loop runs (call on the server's loop once it serves)."""
    settle_heap()
    return asyncio.get_running_loop().create_task(HeapKeeper().run(), name="heap-keeper")


__all__ = ["HeapKeeper", "keep_heap", "settle_heap"]
