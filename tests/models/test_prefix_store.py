"""The disk cache of system-prefix KV states: bounded by size, least recently used first, damage-proof.

llama.cpp's state calls are replaced by a fake context here; tests/models/test_local.py has the real model.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kairos.models._prefix_store import PrefixStateStore

llama_cpp = pytest.importorskip("llama_cpp")


class FakeLlm:
    """Holds evaluated tokens as its 'state'; the state's bytes are the token ids."""

    def __init__(self) -> None:
        self._ctx = type("Ctx", (), {"ctx": self})()
        self.input_ids = np.zeros(4096, dtype=np.intc)
        self.n_tokens = 0
        self._requires_eval = False
        self.evaluated: list[int] = []
        self.eval_calls = 0

    def reset(self) -> None:
        self.n_tokens = 0
        self.evaluated = []

    def eval(self, tokens: list[int]) -> None:
        self.eval_calls += 1
        self.evaluated += tokens
        self.n_tokens = len(self.evaluated)

    def state(self) -> bytes:
        return np.asarray(self.evaluated, dtype=np.int32).tobytes()


@pytest.fixture(autouse=True)
def _fake_state_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    def get_size(ctx: FakeLlm) -> int:
        return len(ctx.state())

    def get_data(ctx: FakeLlm, buf: Any, size: int) -> int:
        data = ctx.state()
        ctypes.memmove(buf, data, len(data))
        return len(data)

    def set_data(ctx: FakeLlm, buf: Any, n: int) -> int:
        ctx.evaluated = np.frombuffer(bytes(buf)[:n], dtype=np.int32).tolist()
        return n

    monkeypatch.setattr(llama_cpp, "llama_state_get_size", get_size)
    monkeypatch.setattr(llama_cpp, "llama_state_get_data", get_data)
    monkeypatch.setattr(llama_cpp, "llama_state_set_data", set_data)


def prefix(seed: int, n: int = 100) -> list[int]:
    return [seed * 1000 + i for i in range(n)]


def test_a_state_is_computed_once_then_loaded_by_a_new_process(tmp_path: Path) -> None:
    store = PrefixStateStore(tmp_path, "model.gguf:1", 4096)
    first = FakeLlm()
    assert store.warm(first, prefix(1), 0) is False  # computed
    assert first.eval_calls == 1 and store.saves == 1
    again = FakeLlm()  # another process: nothing resident
    assert PrefixStateStore(tmp_path, "model.gguf:1", 4096).warm(again, prefix(1), 0) is True
    assert again.evaluated == prefix(1) and again.eval_calls == 0 and again.n_tokens == 100
    assert PrefixStateStore(tmp_path, "model.gguf:1", 8192).warm(FakeLlm(), prefix(1), 0) is False  # another n_ctx


def test_the_callers_reader_computes_a_missing_prefix_and_nothing_is_saved_when_it_stops(tmp_path: Path) -> None:
    store = PrefixStateStore(tmp_path, "m", 4096)
    llm = FakeLlm()
    read: list[list[int]] = []

    def reader(p: list[int]) -> None:
        read.append(p)
        llm.eval(p)

    assert store.warm(llm, prefix(1), 0, reader) is False
    assert read == [prefix(1)] and store.saves == 1

    def stopped(p: list[int]) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.warm(FakeLlm(), prefix(2), 0, stopped)
    assert not store.path_for(prefix(2)).exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "flipped byte"])
def test_a_damaged_file_is_dropped_and_recomputed_never_loaded(tmp_path: Path, damage: str) -> None:
    store = PrefixStateStore(tmp_path, "m", 4096)
    store.warm(FakeLlm(), prefix(1), 0)
    path = store.path_for(prefix(1))
    data = path.read_bytes()
    broken = {
        "truncated": data[: len(data) // 2],
        "garbage": os.urandom(len(data)),
        "empty": b"",
        "flipped byte": data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:],
    }[damage]
    path.write_bytes(broken)
    llm = FakeLlm()
    assert store.warm(llm, prefix(1), 0) is False  # recomputed
    assert llm.evaluated == prefix(1) and store.dropped == 1
    assert path.read_bytes() == data  # and replaced by a whole file
    assert store.warm(FakeLlm(), prefix(1), 0) is True


def test_a_state_another_build_refuses_is_recomputed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = PrefixStateStore(tmp_path, "m", 4096)
    store.warm(FakeLlm(), prefix(1), 0)
    monkeypatch.setattr(llama_cpp, "llama_state_set_data", lambda ctx, buf, n: 0)
    llm = FakeLlm()
    assert store.warm(llm, prefix(1), 0) is False and llm.evaluated == prefix(1)


def test_the_folder_is_bounded_by_size_least_recently_used_first(tmp_path: Path) -> None:
    one = len(np.zeros(100, dtype=np.int32).tobytes()) + 32  # a state file: payload plus header
    store = PrefixStateStore(tmp_path, "m", 4096, max_bytes=3 * one)
    for seed in (1, 2, 3):
        store.warm(FakeLlm(), prefix(seed), 0)
    past = time.time() - 100
    for seed in (1, 2, 3):
        os.utime(store.path_for(prefix(seed)), (past + seed, past + seed))
    assert store.warm(FakeLlm(), prefix(1), 0) is True  # a load is a use: 1 is now the newest
    store.warm(FakeLlm(), prefix(4), 0)
    kept = {seed for seed in (1, 2, 3, 4) if store.path_for(prefix(seed)).exists()}
    assert kept == {1, 3, 4}  # 2 was the least recently used


def test_a_state_over_the_bound_alone_is_still_kept_for_this_process(tmp_path: Path) -> None:
    store = PrefixStateStore(tmp_path, "m", 4096, max_bytes=10)
    store.warm(FakeLlm(), prefix(1), 0)
    store.warm(FakeLlm(), prefix(2), 0)
    assert not store.path_for(prefix(1)).exists() and store.path_for(prefix(2)).exists()


def test_short_or_resident_prefixes_are_left_alone(tmp_path: Path) -> None:
    store = PrefixStateStore(tmp_path, "m", 4096)
    llm = FakeLlm()
    assert store.warm(llm, prefix(1, n=10), 0) is False and llm.eval_calls == 0
    assert store.warm(llm, prefix(1), 100) is False and llm.eval_calls == 0
    assert not list(tmp_path.iterdir())


def test_an_unwritable_cache_only_costs_the_recompute(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    store = PrefixStateStore(blocker / "states", "m", 4096)
    llm = FakeLlm()
    assert store.warm(llm, prefix(1), 0) is False and llm.evaluated == prefix(1) and store.saves == 0


def test_leftovers_of_a_killed_writer_are_cleaned_up(tmp_path: Path) -> None:
    old = tmp_path / "abc.kvstate.tmp999"
    old.write_bytes(b"x" * 10)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    fresh = tmp_path / "def.kvstate.tmp998"  # maybe a writer at work right now
    fresh.write_bytes(b"x")
    PrefixStateStore(tmp_path, "m", 4096).warm(FakeLlm(), prefix(1), 0)
    assert not old.exists() and fresh.exists()
