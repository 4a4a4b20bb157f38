"""Disk cache of llama.cpp KV states for the stable system prefix.

The system turn (system prompt + tools) is byte-identical across sessions, so its KV state can
be computed once and reloaded: a new ``kairos run`` process then starts warm (a 1,500-token
prefix costs ~35 s to read on a 2-core CPU, ~0.1 s to load). Files are keyed by the model
file, the context size and the exact prefix tokens; only the newest few are kept.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

MIN_PREFIX_TOKENS = 64
"""Shorter prefixes are cheaper to recompute than to load."""
KEEP_FILES = 8


class PrefixStateStore:
    def __init__(self, directory: Path, model_id: str, n_ctx: int, keep: int = KEEP_FILES) -> None:
        self.directory = directory
        self.model_id = model_id
        self.n_ctx = n_ctx
        self.keep = keep
        self.loads = 0
        self.saves = 0

    def _path(self, prefix: list[int]) -> Path:
        h = hashlib.sha256(f"{self.model_id}|{self.n_ctx}|".encode())
        h.update(np.asarray(prefix, dtype=np.int32).tobytes())
        return self.directory / f"{h.hexdigest()[:32]}.kvstate"

    def warm(
        self, llm: Any, prefix: list[int], common: int, evaluate: Callable[[list[int]], None] | None = None
    ) -> bool:
        """Make ``prefix`` resident in ``llm``'s KV cache: load it from disk, or evaluate and save it.

        ``common`` is how much of ``prefix`` is already resident; nothing happens if all of it is.
        ``evaluate`` makes the prefix resident, reading only what of it is not (the local model's
        reports its progress, and a read stopped half-way goes on from there); without it the
        model is reset and reads all of it. Nothing is saved when it raises. Returns True when the
        state came from disk (those tokens count as cached).
        """
        if len(prefix) < MIN_PREFIX_TOKENS or common >= len(prefix):
            return False
        path = self._path(prefix)
        if path.exists() and self._load(llm, path, prefix):
            return True
        if evaluate is None:
            llm.reset()
            llm.eval(prefix)
        else:
            evaluate(prefix)
        self._save(llm, path)
        return False

    def _load(self, llm: Any, path: Path, prefix: list[int]) -> bool:
        import llama_cpp

        data = path.read_bytes()
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if llama_cpp.llama_state_set_data(llm._ctx.ctx, buf, len(data)) != len(data):
            path.unlink(missing_ok=True)  # written by another build: recompute instead
            llm.reset()
            return False
        llm.input_ids[: len(prefix)] = prefix
        llm.n_tokens = len(prefix)
        llm._requires_eval = True  # logits are not live: generate() replays one token
        os.utime(path)
        self.loads += 1
        return True

    def _save(self, llm: Any, path: Path) -> None:
        import llama_cpp

        size = llama_cpp.llama_state_get_size(llm._ctx.ctx)
        buf = (ctypes.c_uint8 * size)()
        n = llama_cpp.llama_state_get_data(llm._ctx.ctx, buf, size)
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(bytes(buf)[:n])
        os.replace(tmp, path)
        self.saves += 1
        states = sorted(self.directory.glob("*.kvstate"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in states[self.keep :]:
            old.unlink(missing_ok=True)
