"""Disk cache of llama.cpp KV states for the stable system prefix.

The system turn (system prompt + tools) is byte-identical across sessions and across workspaces with the
same settings, so its KV state can be computed once and reloaded: a new ``kairos run`` process then starts
warm (a 2,300-token prefix costs ~25 s to read on a 2-core CPU, ~0.1 s to load). ``kairos models
assemble`` computes the default agent's state at install time.

Files are keyed by the model file, the context size and the exact prefix tokens. The folder is bounded
by size, least recently used first (a load counts as a use), so a test run or twenty other workspaces
do not push out the state every ``kairos run`` needs. A file is written whole (temporary name, then
renamed) and carries its length and CRC-32: a truncated or corrupt file is dropped and recomputed,
never handed to llama.cpp.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

MIN_PREFIX_TOKENS = 64
"""Shorter prefixes are cheaper to recompute than to load."""
DEFAULT_MAX_BYTES = 2 * 1024**3
"""The folder's default size bound (``[local] prefix_cache_mb``)."""
_MAGIC = b"KAIROS-KV1\n"
_HEADER = struct.Struct("<QI")  # payload length, CRC-32 of the payload
_STALE_TMP_S = 3600


def state_dir(default: Path) -> Path:
    """``$KAIROS_PREFIX_CACHE_DIR`` (tests and benches keep their own), else ``default``."""
    env = os.environ.get("KAIROS_PREFIX_CACHE_DIR")
    return Path(env).expanduser() if env else default


class PrefixStateStore:
    """The KV states of system prefixes in one folder, bounded by size.

    Args:
        directory: where the state files live.
        model_id: the model file's identity (name and size): states of another model never load.
        n_ctx: the context size the states were computed with.
        max_bytes: the folder's size bound; the least recently used files go first.
    """

    def __init__(self, directory: Path, model_id: str, n_ctx: int, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory = directory
        self.model_id = model_id
        self.n_ctx = n_ctx
        self.max_bytes = max_bytes
        self.loads = 0
        self.saves = 0
        self.dropped = 0
        """Files found corrupt, truncated or unloadable (each was removed and recomputed)."""

    def path_for(self, prefix: list[int]) -> Path:
        """The file that holds (or would hold) the state of ``prefix``."""
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
        path = self.path_for(prefix)
        if self._load(llm, path, prefix):
            return True
        if evaluate is None:
            llm.reset()
            llm.eval(prefix)
        else:
            evaluate(prefix)
        self._save(llm, path)
        return False

    def _read(self, path: Path) -> bytes | None:
        """The payload of ``path`` if it is whole; a damaged file is removed."""
        try:
            data = path.read_bytes()
        except OSError:  # absent, or removed by another process's eviction a moment ago
            return None
        head = len(_MAGIC) + _HEADER.size
        if len(data) >= head and data.startswith(_MAGIC):
            length, crc = _HEADER.unpack_from(data, len(_MAGIC))
            payload = memoryview(data)[head:]
            if len(payload) == length and zlib.crc32(payload) == crc:
                return bytes(payload)
        self._drop(path)
        return None

    def _load(self, llm: Any, path: Path, prefix: list[int]) -> bool:
        import llama_cpp

        data = self._read(path)
        if data is None:
            return False
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if llama_cpp.llama_state_set_data(llm._ctx.ctx, buf, len(data)) != len(data):
            self._drop(path)  # written by another llama.cpp build: recompute instead
            llm.reset()
            return False
        llm.input_ids[: len(prefix)] = prefix
        llm.n_tokens = len(prefix)
        llm._requires_eval = True  # logits are not live: generate() replays one token
        try:
            os.utime(path)  # a use: least recently used goes first
        except OSError:
            pass
        self.loads += 1
        return True

    def _drop(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self.dropped += 1

    def _save(self, llm: Any, path: Path) -> None:
        import llama_cpp

        size = llama_cpp.llama_state_get_size(llm._ctx.ctx)
        buf = (ctypes.c_uint8 * size)()
        n = llama_cpp.llama_state_get_data(llm._ctx.ctx, buf, size)
        payload = memoryview(buf)[:n]
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(_MAGIC + _HEADER.pack(n, zlib.crc32(payload)))
                f.write(payload)
            os.replace(tmp, path)
        except OSError:  # a full disk or a read-only cache: the next process computes it again
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            return
        self.saves += 1
        self.evict(keep=path)

    def evict(self, keep: Path | None = None) -> int:
        """Remove the least recently used files until the folder fits ``max_bytes``; returns how many went.

        ``keep`` (the state just written) stays even if it alone is over the bound.
        """
        files = []
        for tmp in self.directory.glob("*.kvstate.tmp*"):  # left by a process killed while writing
            try:
                if time.time() - tmp.stat().st_mtime > _STALE_TMP_S:
                    tmp.unlink(missing_ok=True)
            except OSError:
                pass
        for p in self.directory.glob("*.kvstate"):
            try:
                st = p.stat()
            except OSError:
                continue
            files.append((st.st_mtime, st.st_size, p))
        total = sum(size for _, size, _ in files)
        removed = 0
        for _, size, p in sorted(files, key=lambda f: f[0]):
            if total <= self.max_bytes:
                break
            if p == keep:
                continue
            p.unlink(missing_ok=True)
            total -= size
            removed += 1
        return removed
