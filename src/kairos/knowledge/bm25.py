"""The knowledge store's full-text BM25: a tantivy index kept as a cache of the chunk rows.

Why tantivy: on 100,000 LoCoMo turns SQLite FTS5 answered 17 queries a second through the store,
``bm25s`` 261 and tantivy (Rust, block-max WAND top-k) 974 through the store (2,300 alone), with
incremental adds and deletes that ``bm25s`` lacks (``bench-results/bm25-speed.json``; LoCoMo BM25
recall@10 0.705 against FTS5's 0.710, recall@5 and MRR slightly higher). The price is the insert: a
tantivy commit fsyncs its files, 50-90 ms per document on this machine against FTS5's 0.2 ms.

SQLite stays the source of truth: this index is rebuilt from the ``chunks`` table whenever it is
missing, unreadable or of another generation, exactly like the HNSW index beside it.

Crash safety: the store writes here while its SQLite write transaction is still open, so writers of
several processes take turns. The stamp file naming the generation the index matches is removed
before the tantivy commit and written (with the transaction's new generation) before the SQLite
commit. A writer changes the index incrementally only when the stamp names the generation its
transaction started from; otherwise (a process died between the two commits, or mid-write) it
rebuilds from the rows, and so does an open that finds the stamp disagreeing with the database.
Search results are always joined back to the table: a chunk not in the table is never returned.

Tokens: tantivy's simple tokenizer (Unicode letters and digits), lower-cased, ASCII-folded and
stemmed with Snowball English — close to FTS5's ``porter unicode61 remove_diacritics 2`` but not
identical (Porter 2 rather than Porter 1). BM25 is tantivy's: k1 = 1.2, b = 0.75 like FTS5, but
Lucene's idf ``ln(1 + (N - n + 0.5) / (n + 0.5))`` and document lengths rounded to one byte.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

import tantivy
from rich.progress import Progress

TOKENIZER = "kairos_en"
_ROWS = "SELECT c.id, c.text, c.owner, c.source, d.kind FROM chunks c JOIN documents d ON d.id = c.doc_id"
_HEAP = 32_000_000  # bytes of tantivy's indexing arena (it wants at least 15 MB per thread)


def _analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("id", stored=False, indexed=True, fast=True)
    builder.add_text_field("text", stored=False, tokenizer_name=TOKENIZER, index_option="freq")
    builder.add_text_field("owner", stored=False, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("source", stored=False, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("kind", stored=False, tokenizer_name="raw", index_option="basic")
    return builder.build()


NO_OWNER = "\x00"
"""What the ``owner`` field holds for a chunk without an owner (raw fields cannot be null)."""


class TantivyBM25:
    """A tantivy index in ``folder`` plus ``<folder name>.json`` beside it, the stamp naming its generation."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.stamp = folder.parent / f"{folder.name}.json"
        self.schema = _schema()
        self.analyzer = _analyzer()
        self.index = self._open()

    # ---- files ------------------------------------------------------------------------------

    def _open(self) -> tantivy.Index:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            index = tantivy.Index(self.schema, path=str(self.folder), reuse=True)
        except (OSError, ValueError, RuntimeError):  # corrupt files or another schema: start empty
            shutil.rmtree(self.folder, ignore_errors=True)
            self.stamp.unlink(missing_ok=True)
            self.folder.mkdir(parents=True, exist_ok=True)
            index = tantivy.Index(self.schema, path=str(self.folder), reuse=False)
        index.register_tokenizer(TOKENIZER, self.analyzer)
        index.config_reader(reload_policy="manual")
        return index

    def stamped_gen(self) -> int | None:
        """The generation the stamp names; None when there is none or it is unreadable."""
        try:
            gen = json.loads(self.stamp.read_text(encoding="utf-8")).get("gen")
        except (OSError, ValueError, AttributeError):
            return None
        return gen if isinstance(gen, int) else None

    def invalidate(self) -> None:
        """Remove the stamp: from here until :meth:`mark` the index matches no generation."""
        self.stamp.unlink(missing_ok=True)

    def mark(self, gen: int) -> None:
        """Write the stamp: the committed index matches generation ``gen`` of the database."""
        tmp = self.stamp.with_suffix(".tmp")
        tmp.write_text(json.dumps({"gen": gen}), encoding="utf-8")
        tmp.replace(self.stamp)

    def num_docs(self) -> int:
        """Documents in the last reloaded view (deleted ones excluded)."""
        return int(self.index.searcher().num_docs)

    def size_bytes(self) -> int:
        """Bytes of the index files on disk."""
        return sum(f.stat().st_size for f in self.folder.iterdir() if f.is_file()) if self.folder.is_dir() else 0

    def reload(self) -> None:
        """See the latest commit (another process's, too)."""
        self.index.reload()

    def matches(self, gen: int, rows: int) -> bool:
        """Whether the committed index is the one of generation ``gen`` with ``rows`` chunks."""
        try:
            self.reload()
            return self.stamped_gen() == gen and self.num_docs() == rows
        except (OSError, ValueError, RuntimeError):
            return False

    # ---- writes -----------------------------------------------------------------------------

    def _document(self, row: Sequence[object]) -> tantivy.Document:
        chunk_id, text, owner, source, kind = row
        return tantivy.Document(
            id=int(str(chunk_id)), text=str(text), owner=NO_OWNER if owner is None else str(owner),
            source=str(source), kind=str(kind),
        )  # fmt: skip

    def apply(self, add: Iterable[Sequence[object]] = (), delete: Iterable[int] = ()) -> None:
        """Add and delete chunks in one tantivy commit (the caller invalidated the stamp first)."""
        writer = self.index.writer(heap_size=_HEAP, num_threads=1)
        try:
            for chunk_id in delete:
                writer.delete_documents_by_term("id", chunk_id)
            for row in add:
                writer.add_document(self._document(row))
            writer.commit()
        except BaseException:
            writer.rollback()
            raise
        finally:
            writer.wait_merging_threads()  # frees the writer lock; merges small segments
        self.reload()

    def write(
        self, db: sqlite3.Connection, gen: int, add: Sequence[int] = (), delete: Sequence[int] = (), *,
        rebuild: bool = False, show_progress: bool = False,
    ) -> None:  # fmt: skip
        """Inside ``db``'s write transaction: bring the index to generation ``gen`` and stamp it.

        Incremental (``add`` and ``delete`` chunk ids) only when the stamp names ``gen - 1``;
        otherwise (or with ``rebuild``) every chunk row is indexed again.
        """
        if rebuild or self.stamped_gen() != gen - 1:
            total = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
            self.rebuild(db.execute(f"{_ROWS} ORDER BY c.id"), total, show_progress=show_progress)
        else:
            self.invalidate()
            added: list[Sequence[object]] = []
            for start in range(0, len(add), 500):
                part = add[start : start + 500]
                added.extend(db.execute(f"{_ROWS} WHERE c.id IN ({','.join('?' * len(part))})", part).fetchall())
            self.apply(added, delete)
        self.mark(gen)

    def rebuild(self, rows: Iterable[Sequence[object]], total: int, *, show_progress: bool = False) -> None:
        """Replace the whole index by ``rows`` (a progress bar when asked for); the caller stamps it."""
        self.invalidate()
        writer = self.index.writer(heap_size=_HEAP, num_threads=1)
        try:
            writer.delete_all_documents()
            with Progress(disable=not show_progress, transient=True) as progress:
                task = progress.add_task("indexing text", total=total)
                for n, row in enumerate(rows, start=1):
                    writer.add_document(self._document(row))
                    if n % 2048 == 0:
                        progress.advance(task, 2048)
            writer.commit()
        except BaseException:
            writer.rollback()
            raise
        finally:
            writer.wait_merging_threads()
        self.reload()

    # ---- reads ------------------------------------------------------------------------------

    def terms(self, words: Iterable[str]) -> list[str]:
        """The index terms of ``words`` (analysed like the text), without repeats."""
        return list(dict.fromkeys(t for w in words for t in self.analyzer.analyze(w)))

    def query(
        self, terms: Sequence[str], owner: str | None, sources: Sequence[str], kind: str | None,
        exclude_kinds: Sequence[str],
    ) -> tantivy.Query:  # fmt: skip
        """An OR of ``terms`` restricted to the filters that never change after a chunk is written."""
        occur, term = tantivy.Occur, tantivy.Query.term_query
        text = tantivy.Query.boolean_query([(occur.Should, term(self.schema, "text", t)) for t in terms])
        parts = [(occur.Must, text)]
        if owner is not None:
            parts.append((occur.Must, term(self.schema, "owner", owner)))
        if sources:
            parts.append((occur.Must, tantivy.Query.term_set_query(self.schema, "source", list(sources))))
        if kind:
            parts.append((occur.Must, term(self.schema, "kind", kind)))
        if exclude_kinds:
            parts.append((occur.MustNot, tantivy.Query.term_set_query(self.schema, "kind", list(exclude_kinds))))
        return parts[0][1] if len(parts) == 1 else tantivy.Query.boolean_query(parts)

    def search(self, query: tantivy.Query, limit: int) -> list[tuple[int, float]]:
        """The top ``limit`` ``(chunk id, score)`` pairs, best first."""
        searcher = self.index.searcher()
        hits = searcher.search(query, limit, count=False).hits
        if not hits:
            return []
        ids = searcher.fast_field_values("id", [address for _, address in hits])
        return [(int(i or 0), float(score)) for (score, _), i in zip(hits, ids, strict=True)]
