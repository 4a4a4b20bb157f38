"""The tantivy full-text index is a cache of the chunk rows: rebuilt when missing, corrupt or stale; never ahead."""

from __future__ import annotations

import shutil
import sqlite3
import textwrap
from pathlib import Path

import pytest

from kairos.knowledge import Filters, HashEmbedder, KnowledgeBase
from kairos.knowledge.bm25 import TantivyBM25
from kairos.knowledge.store import BM25_NAME, DB_NAME
from tests.support.crash import kill_9_at


def _sources(kb: KnowledgeBase, query: str, k: int = 10, filters: Filters | None = None) -> list[str]:
    return [h.source for h in kb.store.search_bm25(query, k, filters or Filters())]


def _consistent(kb: KnowledgeBase) -> bool:
    check = kb.store.check()
    return check["chunks"] == check["bm25_docs"] == check["vectors"] and check["orphan_chunks"] == 0


@pytest.mark.parametrize("damage", ["missing", "corrupt", "unstamped", "stale", "stale-after-delete"])
def test_a_damaged_or_stale_full_text_index_is_rebuilt_from_the_rows(tmp_path: Path, damage: str) -> None:
    emb = HashEmbedder()
    folder, stamp = tmp_path / BM25_NAME, tmp_path / f"{BM25_NAME}.json"
    kb = KnowledgeBase.open(tmp_path, emb)
    kb.add_text("a.txt", "alpha beta gamma")
    kb.add_text("gone.txt", "obsolete zeppelin manual")
    kb.close()
    shutil.copytree(folder, tmp_path / "old-index")
    shutil.copy(stamp, tmp_path / "old-stamp.json")
    kb = KnowledgeBase.open(tmp_path, emb)
    kb.add_text("b.txt", "delta epsilon")
    kb.remove("gone.txt")
    kb.close()
    if damage == "missing":
        shutil.rmtree(folder)
    elif damage == "corrupt":
        for f in folder.iterdir():
            if f.is_file():
                f.write_bytes(b"\x00garbage" * 10)
    elif damage == "unstamped":
        stamp.unlink()
    else:  # an index saved two generations ago (copied back with its own stamp): it misses b, still has gone
        shutil.rmtree(folder)
        shutil.copytree(tmp_path / "old-index", folder)
        shutil.copy(tmp_path / "old-stamp.json", stamp)
    kb = KnowledgeBase.open(tmp_path, emb)
    try:
        assert _consistent(kb) and kb.store.check()["chunks"] == 2
        assert _sources(kb, "alpha gamma") == ["a.txt"]
        assert _sources(kb, "delta epsilon") == ["b.txt"]
        assert _sources(kb, "zeppelin manual") == []
        kb.add_text("c.txt", "zeta eta")  # the rebuilt index takes incremental writes again
        assert _sources(kb, "zeta") == ["c.txt"] and _consistent(kb) and kb.store.stats()["bm25_bytes"] > 0
    finally:
        kb.close()


def test_an_index_of_the_old_fts5_layout_is_migrated(tmp_path: Path) -> None:
    emb = HashEmbedder()
    KnowledgeBase.open(tmp_path, emb).close()
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.execute("CREATE VIRTUAL TABLE chunks_fts USING fts5 (text)")  # what earlier versions kept
    db.execute("DROP TABLE schema_versions")  # ... and they kept no schema versions
    db.commit()
    db.close()
    shutil.rmtree(tmp_path / BM25_NAME)
    kb = KnowledgeBase.open(tmp_path, emb)
    try:
        kb.add_text("a.txt", "alpha beta")
        assert _sources(kb, "alpha") == ["a.txt"]
        tables = {r[0] for r in kb.store._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "chunks_fts" not in tables
    finally:
        kb.close()


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from kairos.knowledge import HashEmbedder, KnowledgeBase
    from kairos.knowledge.bm25 import TantivyBM25

    stamp = TantivyBM25.mark

    def mark_then_stall(self, gen):
        stamp(self, gen)  # tantivy has committed the new chunks; SQLite has not
        print("between commits", flush=True)
        time.sleep(600)

    TantivyBM25.mark = mark_then_stall
    kb = KnowledgeBase.open(Path(sys.argv[1]), HashEmbedder())
    kb.add_text("big.txt", "phantom chunk that never reached the table")
    print("finished", flush=True)
    """
)


def test_a_process_killed_between_the_tantivy_and_the_sqlite_commit_leaves_search_agreeing(tmp_path: Path) -> None:
    state = tmp_path / ".kairos"
    emb = HashEmbedder()
    kb = KnowledgeBase.open(state, emb)
    kb.add_text("small.txt", "a small document that was there before")
    other = KnowledgeBase.open(state, emb)  # a store that stays open across the crash (a running agent)
    kill_9_at(CHILD, "between commits", str(state))
    try:
        assert _sources(other, "phantom chunk") == []  # the open store notices the index is ahead
        other.add_text("next.txt", "the next ingest after the crash")  # and writes on a rebuilt index
        assert _consistent(other) and other.store.check()["chunks"] == 2
        kb.close()
        kb = KnowledgeBase.open(state, emb)
        assert _sources(kb, "phantom chunk") == [] and kb.store.get_document("big.txt") is None
        assert _sources(kb, "next ingest") == ["next.txt"] and _consistent(kb)
    finally:
        other.close()
        kb.close()


def test_filters_checked_in_sql_widen_the_fetch_until_k_pass(kb: KnowledgeBase) -> None:
    for i in range(60):  # 60 superseded versions outscore every current one
        kb.add_text(f"notes/{i}.md", "rocket rocket rocket launch")
        kb.add_text(f"notes/{i}.md", f"rocket launch moved {i}")
    kb.add_text("zed/only.md", "one rocket")
    current = kb.store.search_bm25("rocket launch", 5)
    assert len(current) == 5 and all(h.version == 2 and h.current for h in current)
    assert _sources(kb, "rocket", 1, Filters(source_prefix="zed/")) == ["zed/only.md"]
    history = kb.store.search_bm25("rocket launch", 200, Filters(all_versions=True))
    assert len(history) == 121 and history[0].version == 1  # every match (zed too), best first
    assert [h.score for h in history] == sorted((h.score for h in history), reverse=True)


def test_owner_kind_and_source_filters_are_part_of_the_tantivy_query(kb: KnowledgeBase) -> None:
    for i in range(50):
        kb.add_text(f"bob/{i}.txt", "rocket rocket rocket launch", owner="bob")
    kb.add_text("alice/a.txt", "rocket", owner="alice")
    kb.add_text("page.md", "rocket notes in markdown", kind="markdown")
    assert _sources(kb, "rocket", 1, Filters(owner="alice")) == ["alice/a.txt"]
    assert _sources(kb, "rocket", 1, Filters(kind="markdown")) == ["page.md"]
    assert len(_sources(kb, "rocket", 100, Filters(exclude_kinds=("text",)))) == 1
    assert _sources(kb, "rocket", 5, Filters(sources=("bob/7.txt", "alice/a.txt"))) == ["bob/7.txt", "alice/a.txt"]
    assert _sources(kb, "rocket", 5, Filters(owner="nobody")) == []


def test_a_second_store_sees_the_first_ones_writes_and_deletes(tmp_path: Path) -> None:
    emb = HashEmbedder()
    a, b = KnowledgeBase.open(tmp_path, emb), KnowledgeBase.open(tmp_path, emb)
    try:
        a.add_text("a.txt", "alpha beta gamma")
        assert _sources(b, "alpha") == ["a.txt"]
        b.add_text("b.txt", "alpha submarine")
        assert sorted(_sources(a, "alpha")) == ["a.txt", "b.txt"]
        a.remove("b.txt")
        assert _sources(b, "submarine") == [] and _consistent(b)
    finally:
        a.close()
        b.close()


def test_index_files_damaged_while_open_are_rebuilt_on_the_next_search(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb.add_text("a.txt", "alpha beta gamma")
    search, failures = TantivyBM25.search, [ValueError("tantivy: a segment file is truncated")]

    def damaged_once(self: TantivyBM25, query: object, limit: int) -> list[tuple[int, float]]:
        if failures:
            raise failures.pop()
        return search(self, query, limit)  # type: ignore[arg-type]

    monkeypatch.setattr(TantivyBM25, "search", damaged_once)
    assert _sources(kb, "alpha") == ["a.txt"] and failures == [] and _consistent(kb)
