from __future__ import annotations

import io
from pathlib import Path

import docx

from kairos.knowledge import FileResult, KnowledgeBase
from kairos.knowledge.base import fuse
from kairos.knowledge.store import ChunkHit
from tests.tools.toolsets.conftest import make_pdf


def _by_name(results: list[FileResult]) -> dict[str, FileResult]:
    return {Path(r.source).name: r for r in results}


def _docx(text: str) -> bytes:
    d = docx.Document()
    d.add_heading("Handbook", 1)
    d.add_paragraph(text)
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def test_every_supported_format_is_ingested_and_searchable(kb: KnowledgeBase, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "guide.md").write_text("# Guide\n\nThe zebra protocol uses port 7070.\n")
    (docs / "notes.txt").write_text("Remember the walrus meeting on Tuesday.")
    (docs / "page.html").write_text(
        "<html><head><title>T</title></head><body><article><p>The pelican budget was approved by the board "
        "after a long discussion about costs and benefits of the new pelican programme.</p></article></body></html>"
    )
    (docs / "sub" / "report.pdf").write_bytes(make_pdf(["Quarterly report", "The narwhal sales doubled."]))
    (docs / "sub" / "hand.docx").write_bytes(_docx("Employees get a flamingo allowance."))
    (docs / ".hidden.md").write_text("never indexed")
    results = _by_name(kb.add_paths([docs]))
    assert {n: r.status for n, r in results.items()} == {
        "guide.md": "added", "notes.txt": "added", "page.html": "added", "report.pdf": "added", "hand.docx": "added"
    }  # fmt: skip
    for word, name in [("zebra", "guide.md"), ("walrus", "notes.txt"), ("pelican", "page.html"),
                       ("narwhal", "report.pdf"), ("flamingo", "hand.docx")]:  # fmt: skip
        hits = kb.search(word, 1, "bm25").hits
        assert Path(hits[0].chunk.source).name == name, word
    assert kb.stats()["documents"] == 5


def test_bad_files_get_clear_errors_and_the_batch_continues(kb: KnowledgeBase, tmp_path: Path) -> None:
    kb.max_bytes = 10_000
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.md").write_text("  \n\n  ")
    (tmp_path / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "huge.txt").write_text("x " * 20_000)
    (tmp_path / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0 legacy word")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e recipe".encode("latin-1"))
    (tmp_path / "good.txt").write_text("a perfectly fine document about otters")
    names = ["empty.txt", "blank.md", "garbage.bin", "huge.txt", "old.doc", "broken.pdf", "latin1.txt", "good.txt"]
    results = _by_name(kb.add_paths([tmp_path / n for n in names] + [tmp_path / "missing.md"]))
    assert "empty document" in results["empty.txt"].message
    assert "empty document" in results["blank.md"].message
    assert "binary or unknown file type" in results["garbage.bin"].message
    assert "too large" in results["huge.txt"].message
    assert "convert it to DOCX" in results["old.doc"].message
    assert "cannot read it as PDF" in results["broken.pdf"].message
    assert results["missing.md"].message == "no such file or folder"
    assert results["latin1.txt"].status == "added" and "not UTF-8" in results["latin1.txt"].notes[0]
    assert results["good.txt"].status == "added"
    assert kb.store.check() == {"chunks": 2, "bm25_docs": 2, "vectors": 2, "orphan_chunks": 0}


def test_re_adding_a_file_is_a_no_op_until_it_changes(kb: KnowledgeBase, tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_text("# A\n\nfirst text")
    assert kb.add_paths([f])[0].status == "added"
    assert kb.add_paths([f])[0].status == "unchanged"
    f.write_text("# A\n\nsecond text")
    r = kb.add_paths([f])[0]
    assert (r.status, r.version) == ("updated", 2)
    assert kb.stats()["document_versions"] == 2 and kb.stats()["documents"] == 1


def _chunk(i: int, score: float = 0.0) -> ChunkHit:
    return ChunkHit(i, i, f"s{i}", 1, 0, f"t{i}", score, {})


def test_fuse_ranks_by_both_scores_and_keeps_each_rank() -> None:
    # BM25 is sure of 1 and lukewarm on 2; dense puts 2 just ahead of 3: 2 is the best compromise
    lexical = [_chunk(1, 9.0), _chunk(2, 5.0), _chunk(4, 1.0)]
    dense = [_chunk(2, 0.90), _chunk(3, 0.89), _chunk(1, 0.70)]
    fused = fuse(lexical, dense)
    assert [h.chunk.chunk_id for h in fused] == [2, 1, 3, 4]
    assert (fused[0].bm25_rank, fused[0].dense_rank) == (2, 1)
    assert (fused[2].bm25_rank, fused[2].dense_rank) == (None, 2)
    assert fuse([], []) == []


def test_hybrid_finds_what_either_retriever_finds(kb: KnowledgeBase) -> None:
    kb.add_text("a.txt", "error code XJ-9 means the disk is full")
    kb.add_text("b.txt", "unrelated text about gardening and tomatoes")
    hits = kb.search("XJ-9", 2, "hybrid").hits
    assert hits[0].chunk.source == "a.txt" and hits[0].bm25_rank == 1
    assert kb.search("   ", 5).hits == [] and kb.search("x", 0).hits == []
