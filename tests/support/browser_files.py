"""What a browser session leaves in the state dir after an observation (kairos.browser.paths), for the UI's tests."""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from pathlib import Path
from typing import Any

from kairos.browser.paths import page_path, screen_path


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A complete PNG of one colour (no image library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def observe(
    state_dir: Path,
    session_id: str,
    url: str,
    title: str,
    image: bytes,
    elements: list[dict[str, Any]] | None = None,
    at: float | None = None,
) -> None:
    """Write a screenshot and its page record as the browser session does (each replaced whole)."""
    record = {"url": url, "title": title, "at": time.time() if at is None else at, "elements": elements or []}
    for path, data in ((screen_path(state_dir, session_id), image), (page_path(state_dir, session_id), None)):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data if data is not None else json.dumps(record).encode())
        os.replace(tmp, path)
