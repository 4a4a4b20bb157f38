"""``kairos serve``'s heap policy: full GC passes walk only what is new; frozen garbage is swept in time."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kairos.server.heap import HeapKeeper, settle_heap


class Node:
    """An object that can sit in a reference cycle and be watched through a weak reference."""

    ref: object = None


@pytest.fixture(autouse=True)
def manual_gc() -> Iterator[None]:
    """No automatic passes during a test (each one is made explicitly); the process collects everything after."""
    gc.disable()
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()


def test_settle_heap_freezes_what_startup_built_and_later_garbage_is_still_collected() -> None:
    built_at_startup = [[i] for i in range(1000)]
    settle_heap()
    assert gc.get_freeze_count() >= len(built_at_startup)
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1


def test_the_survivors_of_a_full_pass_are_frozen_and_frozen_garbage_is_swept_when_the_set_doubles() -> None:
    keeper = HeapKeeper(growth=2.0, floor=10)
    node = Node()
    node.ref = node  # a cycle: only the cyclic GC can free it
    alive = weakref.ref(node)
    keeper.tick()
    assert gc.get_freeze_count() == 0  # no full pass since the keeper started: nothing to do
    gc.collect()
    keeper.tick()
    assert gc.get_freeze_count() > 0 and keeper.sweeps == 0  # the pass's survivors, the node among them
    del node
    gc.collect()
    assert alive() is not None  # frozen: the full pass did not walk it
    keeper.tick()  # the frozen set is far above twice the floor: unfreeze for one sweep
    assert keeper.sweeps == 1 and gc.get_freeze_count() == 0
    gc.collect()
    assert alive() is None
    keeper.tick()  # after the sweep, what lives is frozen again
    assert gc.get_freeze_count() > 0 and keeper.sweeps == 1
