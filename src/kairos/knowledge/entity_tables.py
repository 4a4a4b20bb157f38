"""The entity graph's tables beside the chunks, on either knowledge store, and how a document's triples are written.

One schema and one set of statements for SQLite and PostgreSQL: the graph's tables reference the
store's chunks table (``store.CHUNKS``: ``chunks`` in ``knowledge.db``, ``kb_chunks`` in PostgreSQL)
with ``ON DELETE CASCADE``, so removing a source removes its triples on both. The DDL is SQLite's;
the PostgreSQL store maps its types (:func:`~kairos.storage.pg_sql.pg_ddl`: ``AUTOINCREMENT`` ids
become identity columns) and its ``?`` placeholders (:func:`~kairos.storage.pg_sql.pg_sql`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kairos.knowledge.records import KnowledgeStore
from kairos.storage import Migration

_SCHEMA = """
CREATE TABLE IF NOT EXISTS graph_entities (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE, label TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS graph_chunks (
    chunk_id INTEGER PRIMARY KEY REFERENCES {chunks}(id) ON DELETE CASCADE, triples INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS graph_triples (
    id INTEGER PRIMARY KEY AUTOINCREMENT, chunk_id INTEGER NOT NULL REFERENCES {chunks}(id) ON DELETE CASCADE,
    subject INTEGER NOT NULL REFERENCES graph_entities(id), relation TEXT NOT NULL,
    object INTEGER NOT NULL REFERENCES graph_entities(id)
);
CREATE INDEX IF NOT EXISTS graph_triples_subject ON graph_triples (subject);
CREATE INDEX IF NOT EXISTS graph_triples_object ON graph_triples (object);
CREATE INDEX IF NOT EXISTS graph_triples_chunk ON graph_triples (chunk_id);
"""


def migrations(chunks: str) -> tuple[Migration, ...]:
    """The ``graph`` owner's versions beside the chunks table ``chunks`` (SQLite DDL; the PostgreSQL store maps it).

    1 is the schema from before versions (kairos.storage). Its ids became ``AUTOINCREMENT`` (identity columns
    in PostgreSQL) without a new version: tables made with plain ``INTEGER PRIMARY KEY`` ids take the same
    statements.
    """
    return (_SCHEMA.format(chunks=chunks),)


MIGRATIONS: tuple[Migration, ...] = migrations("chunks")
"""The ``graph`` owner's versions in ``knowledge.db``."""


def ensure_schema(store: KnowledgeStore) -> None:
    """Bring the graph tables beside the store's chunks to their version (idempotent)."""
    store.ensure("graph", migrations(store.CHUNKS))


Row = tuple[str, str, str, str, str]
"""A triple as stored: subject key, subject label, relation, object key, object label."""
_PER_STATEMENT = 400
"""Rows per multi-row statement (SQLite allows 999 parameters in old builds)."""


def _parts(items: Sequence[Any]) -> list[Sequence[Any]]:
    return [items[i : i + _PER_STATEMENT] for i in range(0, len(items), _PER_STATEMENT)]


def write_triples(store: KnowledgeStore, kept: list[tuple[int, list[Row]]]) -> int:
    """Store the chunks' triples in one transaction; returns how many were stored.

    A chunk another writer put in the graph meanwhile keeps that writer's triples. Entities are inserted
    in name order (``ON CONFLICT DO NOTHING``) before their ids are read: writers sharing names wait on
    each other in one order, never in a cycle.
    """
    kept = sorted(kept, key=lambda item: item[0])
    with store.write() as db:
        fresh: set[int] = set()
        for part in _parts(kept):
            marks = ",".join("(?, ?)" for _ in part)
            args = [v for chunk_id, rows in part for v in (chunk_id, len(rows))]
            inserted = db.execute(
                f"INSERT INTO graph_chunks (chunk_id, triples) VALUES {marks} ON CONFLICT (chunk_id) DO NOTHING "
                "RETURNING chunk_id",
                args,
            ).fetchall()
            fresh.update(int(r[0]) for r in inserted)
        triples = [(c, t) for c, rows in kept if c in fresh for t in rows]
        labels: dict[str, str] = {}
        for _, (sk, s, _, ok, o) in triples:
            labels.setdefault(sk, s)
            labels.setdefault(ok, o)
        names = sorted(labels)
        ids: dict[str, int] = {}
        for part in _parts(names):
            db.execute(
                f"INSERT INTO graph_entities (name, label) VALUES {','.join('(?, ?)' for _ in part)} "
                "ON CONFLICT (name) DO NOTHING",
                [v for name in part for v in (name, labels[name])],
            )
        for part in _parts(names):
            rows = db.execute(f"SELECT name, id FROM graph_entities WHERE name IN ({','.join('?' * len(part))})", part)
            ids.update((str(r[0]), int(r[1])) for r in rows)
        db.executemany(
            "INSERT INTO graph_triples (chunk_id, subject, relation, object) VALUES (?, ?, ?, ?)",
            [(c, ids[sk], rel, ids[ok]) for c, (sk, _, rel, ok, _) in triples],
        )
    return len(triples)


__all__ = ["MIGRATIONS", "Row", "ensure_schema", "migrations", "write_triples"]
