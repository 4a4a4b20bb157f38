"""Partial results of a long bench kept in a JSON-lines file, so a killed run resumes where it stopped.

The first line is the fingerprint of what the results depend on (data, model, prompts, code); a file
written under another fingerprint is refused rather than mixed in. Each later line is one record with
a ``key``. A torn last line (the process died mid-write) is dropped on reading.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kairos.errors import ConfigError


class Checkpoint:
    """Records so far, keyed by ``record["key"]``; ``path`` None keeps them in memory only."""

    def __init__(self, path: Path | None, fingerprint: dict[str, Any], *, what: str = "the same setup") -> None:
        self.path = path
        self.done: dict[str, dict[str, Any]] = {}
        if path is None:
            return
        if path.exists():
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            head = _json_line(lines[0]) if lines else None
            if head is not None and head.get("fingerprint") != fingerprint:
                raise ConfigError(
                    f"checkpoint {path} holds results of another setup ({head.get('fingerprint')}, now {fingerprint}); "
                    f"delete it to start over, or rerun with {what}"
                )
            records = (_json_line(line) for line in lines[1:])
            self.done = {r["key"]: r for r in records if r is not None and "key" in r}
        if not self.done:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"fingerprint": fingerprint}) + "\n", encoding="utf-8")

    def add(self, record: dict[str, Any]) -> None:
        """Keep ``record`` (flushed at once: a crash loses at most the record being written)."""
        self.done[record["key"]] = record
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")


def _json_line(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def source_digest(package: str = "kairos") -> str:
    """A short hash of an installed package's Python sources: results of other code are not resumed."""
    import importlib

    root = Path(importlib.import_module(package).__file__ or "").parent
    digest = hashlib.sha256()
    for file in sorted(root.rglob("*.py")):
        digest.update(file.relative_to(root).as_posix().encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:12]
