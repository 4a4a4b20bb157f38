"""Issue 24 §5: a binary file renamed ``.md`` is skipped with a clear error; ``kb add`` says where its time went.

The newcomer's folder held a binary renamed ``.md``, indexed as 88 chunks of garbage, and 29 documents took
432 s with nothing said about why. Now the binary is one error line while the rest is stored, the summary
line names each stage's seconds, chunks of many files are embedded together, and an edited file re-embeds
only what changed.
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from typer.testing import CliRunner

from kairos.cli import app
from kairos.knowledge import EmbeddingError, HashEmbedder, KnowledgeBase
from kairos.knowledge.ingest import EMBED_BATCH
from kairos.knowledge.stages import LABELS, STAGES

if TYPE_CHECKING:
    from kairos.retrieval.embeddings import Vectors

runner = CliRunner()
GUIDE = "# Deploys\n\nDeploys run every Friday at noon, after the release notes are approved by the team lead.\n"


class CountingEmbedder(HashEmbedder):
    """The hashing double, recording the size of every passage batch (and refusing texts that say "poison")."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        if any("poison" in t for t in texts):
            raise EmbeddingError("the endpoint answered 400: input rejected")
        self.batches.append(len(texts))
        return super().embed_passages(texts)


def test_a_binary_renamed_md_is_skipped_with_a_clear_error_and_the_others_are_stored(tmp_path: Path) -> None:
    docs, ws = tmp_path / "docs", tmp_path / "ws"
    docs.mkdir()
    ws.mkdir()
    (docs / "guide.md").write_text(GUIDE)
    (docs / "notes.txt").write_text("The walrus meeting moved to Tuesday.\n")
    (docs / "page.html").write_text("<html><body><article><p>" + "The pelican budget was approved. " * 10 + "</p>"
                                    "</article></body></html>")  # fmt: skip
    (docs / "firmware.md").write_bytes(Path(sys.executable).read_bytes()[:300_000])  # a real program
    (docs / "photos.md").write_bytes(gzip.compress(GUIDE.encode() * 100))  # an archive
    result = runner.invoke(app, ["kb", "add", str(docs), "-w", str(ws), "--embedder", "hash"])
    out = " ".join(result.output.split())  # rich wraps long lines
    assert result.exit_code == 1
    for name in ("firmware.md", "photos.md"):
        assert f"error: {(docs / name).resolve()}: skipped: binary content, not text" in out
    assert "3 of 5 files stored" in out
    assert "time: 3 chunks from 3 new or changed files, searchable by text in" in out
    shown = [label for stage, label in LABELS.items() if stage != "contexts"]  # that one: --contextual only
    assert all(f"{label} " in out for label in shown) and " other " in out  # every stage, even 0.0 s
    assert LABELS["contexts"] not in out
    kb = KnowledgeBase.open(ws / ".kairos", HashEmbedder())
    try:
        stored = {Path(d.source).name for d in kb.list_documents()}
        assert stored == {"guide.md", "notes.txt", "page.html"}
        assert kb.store.check() == {"chunks": 3, "bm25_docs": 3, "vectors": 3, "orphan_chunks": 0}
    finally:
        kb.close()


def test_chunks_of_many_files_are_embedded_together_and_every_stage_is_timed(tmp_path: Path) -> None:
    for i in range(40):
        (tmp_path / f"note{i:02d}.md").write_text(f"# Note {i}\n\nThe otter number {i} likes river number {i}.\n")
    embedder = CountingEmbedder()
    kb = KnowledgeBase.open(tmp_path / ".kairos", embedder)
    try:
        report = kb.ingest([tmp_path])
    finally:
        kb.close()
    assert [r.status for r in report.results] == ["added"] * 40 and report.chunks == report.embedded == 40
    assert embedder.batches == [EMBED_BATCH, 40 - EMBED_BATCH]  # not 40 calls of one chunk each
    assert set(report.seconds) == set(STAGES) and report.seconds["extract"] > 0 and report.seconds["bm25"] > 0
    assert sum(report.seconds.values()) <= report.elapsed_s
    assert report.summary().startswith("40 chunks from 40 new or changed files, searchable by text in ")


def test_an_edited_file_re_embeds_only_the_chunks_that_changed(tmp_path: Path) -> None:
    sections = [f"## Part {n}\n\n" + f"Paragraph about the {n} topic, which is long enough to stand alone. " * 15
                for n in ("first", "second", "third")]  # fmt: skip
    doc = tmp_path / "handbook.md"
    doc.write_text("\n\n".join(sections))
    embedder = CountingEmbedder()
    kb = KnowledgeBase.open(tmp_path / ".kairos", embedder)
    try:
        first = kb.ingest([doc])
        assert first.embedded == first.chunks == 3
        doc.write_text("\n\n".join([sections[0], sections[1].replace("second", "2nd"), sections[2]]))
        second = kb.ingest([doc])
        assert second.results[0].status == "updated" and second.chunks == 3 and second.embedded == 1
        assert "2 unchanged chunks kept their vectors" in second.summary()
        current = kb.store.find_current(second.results[0].source)
        assert current is not None
        for hit, vector in kb.store.chunks_with_vectors(current.id):  # the kept vectors are the right ones
            assert (vector == HashEmbedder().embed_passages([hit.text])[0]).all()
        assert kb.search("third topic", 1, "dense").hits[0].chunk.version == 2
    finally:
        kb.close()


def test_a_refused_embedding_costs_only_its_own_chunk(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\nA fine document about badgers.\n")
    (tmp_path / "b.md").write_text("# B\n\nThis one carries poison the endpoint refuses.\n")
    (tmp_path / "c.md").write_text("# C\n\nAnother fine document, about herons.\n")
    kb = KnowledgeBase.open(tmp_path / ".kairos", CountingEmbedder())
    try:
        report = kb.ingest([tmp_path])
    finally:
        kb.close()
    assert [r.status for r in report.results] == ["added"] * 3  # b.md too: text search finds it
    assert report.embedded == 2 and report.without_vectors == 1
    assert "the endpoint answered 400" in report.embed_error and "1 chunk without a vector yet" in report.summary()
