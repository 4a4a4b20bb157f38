"""The embedded :class:`MemoryStore`: the ``memories`` table of the workspace's ``knowledge.db``.

Memories share the knowledge base's database (one file to back up, one to erase) with their own
FTS5 table and their vectors in a column. A user has at most a few thousand live memories, so
dense search is an exact cosine over that user's rows (no index to keep in step). Each write is
one ``BEGIN IMMEDIATE`` transaction over the rows, the full-text entries and the vectors.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kairos.errors import StoreError
from kairos.knowledge.records import fts_query
from kairos.knowledge.store import DB_NAME
from kairos.memory.records import (
    MemoryCard,
    MemoryIn,
    MemoryProvenance,
    MemoryStore,
    MemoryStoreError,
    Op,
    searchable,
)
from kairos.paths import ensure_state_dir
from kairos.storage import Migration, connect, migrate, statements
from kairos.storage.config import chosen_store

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL, owner TEXT NOT NULL, kind TEXT NOT NULL, format TEXT NOT NULL,
    category TEXT NOT NULL, content TEXT NOT NULL, data TEXT NOT NULL DEFAULT '{}', importance REAL NOT NULL,
    version INTEGER NOT NULL, status TEXT NOT NULL, op TEXT NOT NULL, created_at REAL NOT NULL,
    valid_from REAL, valid_to REAL, expires_at REAL, provenance TEXT NOT NULL DEFAULT '{}',
    accesses INTEGER NOT NULL DEFAULT 0, replaces INTEGER, vector BLOB,
    UNIQUE (key, version)
);
CREATE INDEX IF NOT EXISTS memories_owner ON memories (owner, status);
CREATE INDEX IF NOT EXISTS memories_key ON memories (key, version);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5 (content, tokenize = 'porter unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS session_ingests (
    owner TEXT NOT NULL, session_id TEXT NOT NULL, digest TEXT NOT NULL, messages INTEGER NOT NULL,
    at REAL NOT NULL, attempt REAL, done REAL, PRIMARY KEY (owner, session_id, digest)
);
CREATE TABLE IF NOT EXISTS ingest_steps (
    owner TEXT NOT NULL, session_id TEXT NOT NULL, digest TEXT NOT NULL, step TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (owner, session_id, digest, step)
);
"""


def _first_version(db: sqlite3.Connection) -> None:
    """Version 1: the schema from before versions, in place of the placeholder ``memories`` of older releases.

    That placeholder (the knowledge store's, without a ``key`` column) is dropped while it is empty;
    with rows in it, the file is refused rather than guessed at.
    """
    columns = [row[1] for row in db.execute("PRAGMA table_info(memories)")]
    if columns and "key" not in columns:
        if db.execute("SELECT count(*) FROM memories").fetchone()[0]:
            raise MemoryStoreError(f"{_db_path(db)} holds memories in an unknown layout; move it away to start again")
        db.execute("DROP TABLE memories")
    for statement in statements(_SCHEMA):
        db.execute(statement)


def _db_path(db: sqlite3.Connection) -> str:
    """The file of a connection, for messages."""
    row = db.execute("PRAGMA database_list").fetchone()
    return str(row[2]) if row else "the memory database"


MIGRATIONS: tuple[Migration, ...] = (_first_version,)
"""The ``memory`` owner's versions in ``knowledge.db`` (kairos.storage.migrations)."""
_COLS = (
    "id, key, owner, kind, format, category, content, data, importance, version, status, op, created_at, "
    "valid_from, valid_to, expires_at, provenance, accesses, replaces"
)
_LIVE = "owner = ? AND status = 'current' AND (expires_at IS NULL OR expires_at > ?)"
_LIVE_M = "m.owner = ? AND m.status = 'current' AND (m.expires_at IS NULL OR m.expires_at > ?)"


def _card(row: Sequence[Any]) -> MemoryCard:
    return MemoryCard(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], json.loads(row[7] or "{}"), float(row[8]), row[9],
        row[10], row[11], row[12], row[13], row[14], row[15], MemoryProvenance.from_json(row[16]), row[17], row[18],
    )  # fmt: skip


def nearest(
    cards: list[MemoryCard], vecs: npt.NDArray[np.float32], vector: npt.ArrayLike, k: int
) -> list[tuple[MemoryCard, float]]:
    """The ``k`` cards whose (unit) vectors have the highest cosine with ``vector``, best first (ties: row order)."""
    if not cards or k <= 0:
        return []
    sims = vecs @ np.asarray(vector, dtype=np.float32).reshape(-1)
    order = np.argsort(-sims, kind="stable")[:k]
    return [(cards[i], float(sims[i])) for i in order]


class SQLiteMemoryStore:
    """Memories in ``<state_dir>/knowledge.db`` (see the module docstring).

    Args:
        state_dir: the workspace's state dir.
        dim: vector length of the embedder in use (the knowledge base checks the embedder's identity).
    """

    def __init__(self, state_dir: Path, dim: int) -> None:
        ensure_state_dir(state_dir)
        self.path = state_dir / DB_NAME
        self.dim = dim
        self._lock = threading.RLock()
        # every error about the file, now or in any later query, names it; secure_delete overwrites forgotten
        # content instead of leaving it in free pages (kairos.storage)
        self._db = connect(self.path, "the memory database")
        try:
            migrate(self._db, "memory", MIGRATIONS)
        except StoreError:
            self._db.close()
            raise

    # ---- writes -----------------------------------------------------------------------------

    def _vec(self, vector: npt.ArrayLike) -> bytes:
        vec = np.asarray(vector, dtype=np.float32).reshape(-1)
        if vec.shape[0] != self.dim:
            raise MemoryStoreError(f"a vector of {vec.shape[0]} dimensions for memories of {self.dim}")
        return vec.tobytes()

    def _insert(
        self, owner: str, key: str, version: int, m: MemoryIn, vector: bytes, *, status: str, op: Op,
        replaces: int | None, now: float,
    ) -> int:  # fmt: skip
        cur = self._db.execute(
            f"INSERT INTO memories ({_COLS}, vector) VALUES (NULL, {', '.join('?' * 13)}, NULL, ?, ?, 0, ?, ?)",
            (
                key, owner, m.kind, m.format, m.category, m.content, json.dumps(m.data, ensure_ascii=False),
                float(m.importance), version, status, op, now, m.valid_from if m.valid_from is not None else now,
                m.expires_at, m.provenance.to_json(), replaces, vector,
            ),
        )  # fmt: skip
        row_id = int(cur.lastrowid or 0)
        text = searchable(m.content, m.data)
        self._db.execute("INSERT INTO memories_fts (rowid, content) VALUES (?, ?)", (row_id, text))
        return row_id

    def _write(self, fn: Any) -> Any:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                out = fn()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return out

    def _live_row(self, owner: str, memory_id: int) -> MemoryCard:
        card = self.get(owner, memory_id)
        if card is None:
            raise MemoryStoreError(f"no memory {memory_id} for user {owner!r}")
        if card.status != "current":
            raise MemoryStoreError(f"memory {memory_id} is {card.status}, not current; act on the current version")
        return card

    def add(self, owner: str, memory: MemoryIn, vector: npt.ArrayLike, *, op: Op = "add") -> MemoryCard:
        """Store a new memory (version 1)."""
        blob = self._vec(vector)
        key = uuid.uuid4().hex[:16]
        row = self._write(
            lambda: self._insert(owner, key, 1, memory, blob, status="current", op=op, replaces=None, now=time.time())
        )
        return self._must(owner, row)

    def revise(self, owner: str, memory_id: int, memory: MemoryIn, vector: npt.ArrayLike, *, op: Op) -> MemoryCard:
        """A new version of ``memory_id``; the newer ``valid_from`` wins, the other stays in history as superseded."""
        blob = self._vec(vector)

        def go() -> int:
            old = self._live_row(owner, memory_id)
            now = time.time()
            new_from = memory.valid_from if memory.valid_from is not None else now
            older_news = old.valid_from is not None and new_from < old.valid_from  # an earlier session ingested late
            version = 1 + self._db.execute("SELECT max(version) FROM memories WHERE key = ?", (old.key,)).fetchone()[0]
            if older_news:
                row = self._insert(owner, old.key, version, memory, blob, status="superseded", op=op,
                                   replaces=old.id, now=now)  # fmt: skip
                self._db.execute("UPDATE memories SET valid_to = ? WHERE id = ?", (old.valid_from, row))
                return old.id
            self._db.execute("UPDATE memories SET status = 'superseded', valid_to = ? WHERE id = ?", (new_from, old.id))
            return self._insert(
                owner, old.key, version, memory, blob, status="current", op=op, replaces=old.id, now=now
            )

        return self._must(owner, self._write(go))

    def delete(self, owner: str, memory_id: int, *, provenance: MemoryProvenance) -> MemoryCard:
        """Tombstone ``memory_id``: a ``deleted`` version closes its history and it leaves retrieval."""

        def go() -> int:
            old = self._live_row(owner, memory_id)
            now = time.time()
            version = 1 + self._db.execute("SELECT max(version) FROM memories WHERE key = ?", (old.key,)).fetchone()[0]
            self._db.execute("UPDATE memories SET status = 'superseded', valid_to = ? WHERE id = ?", (now, old.id))
            tomb = MemoryIn(old.kind, old.format, old.category, old.content, old.data, old.importance, now, None,
                            provenance)  # fmt: skip
            return self._insert(owner, old.key, version, tomb, b"", status="deleted", op="delete", replaces=old.id,
                                now=now)  # fmt: skip

        return self._must(owner, self._write(go))

    def archive(self, owner: str, memory_ids: Sequence[int], summary: MemoryIn, vector: npt.ArrayLike) -> MemoryCard:
        """One summary memory for ``memory_ids``; they become ``archived`` (kept in history, out of retrieval)."""
        blob = self._vec(vector)

        def go() -> int:
            olds = [self._live_row(owner, i) for i in memory_ids]
            now = time.time()
            row = self._insert(owner, uuid.uuid4().hex[:16], 1, summary, blob, status="current", op="compress",
                               replaces=None, now=now)  # fmt: skip
            for old in olds:
                data = {**old.data, "merged_into": row}
                self._db.execute(
                    "UPDATE memories SET status = 'archived', valid_to = ?, data = ? WHERE id = ?",
                    (now, json.dumps(data, ensure_ascii=False), old.id),
                )
            self._db.execute(
                "UPDATE memories SET data = json_set(data, '$.merged', json(?)) WHERE id = ?",
                (json.dumps([o.id for o in olds]), row),
            )
            return row

        return self._must(owner, self._write(go))

    def forget(self, owner: str, memory_id: int | None = None) -> int:
        """Erase rows, full-text entries and vectors: one memory's every version, or all of ``owner``'s."""

        def go() -> int:
            if memory_id is None:
                ids = [r[0] for r in self._db.execute("SELECT id FROM memories WHERE owner = ?", (owner,))]
                # an unfinished ingest would bring an old session's memories back when it is saved later
                self._db.execute("DELETE FROM session_ingests WHERE owner = ? AND done IS NULL", (owner,))
                self._db.execute("DELETE FROM ingest_steps WHERE owner = ?", (owner,))
            else:
                card = self.get(owner, memory_id)
                if card is None:
                    raise MemoryStoreError(f"no memory {memory_id} for user {owner!r}")
                ids = [r[0] for r in self._db.execute("SELECT id FROM memories WHERE key = ?", (card.key,))]
            self._db.executemany("DELETE FROM memories_fts WHERE rowid = ?", [(i,) for i in ids])
            self._db.executemany("DELETE FROM memories WHERE id = ?", [(i,) for i in ids])
            return len(ids)

        n: int = self._write(go)
        with self._lock:  # merge the full-text segments (drops deleted terms) and empty the WAL of old pages
            self._db.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return n

    def touch(self, ids: Sequence[int]) -> None:
        """Count one access for each memory (importance grows with use)."""
        if ids:
            self._write(
                lambda: self._db.executemany(
                    "UPDATE memories SET accesses = accesses + 1 WHERE id = ?", [(i,) for i in ids]
                )
            )

    # ---- the ingest ledger: a session's ingest survives Ctrl-C, SIGTERM and kill -9 -------------

    def expect_ingest(self, owner: str, session_id: str, digest: str, messages: int, at: float) -> bool:
        """Record that a session (``digest`` of its messages) is to be ingested; False when it already was."""

        def go() -> bool:
            self._db.execute(
                "INSERT OR IGNORE INTO session_ingests (owner, session_id, digest, messages, at) "
                "VALUES (?, ?, ?, ?, ?)",
                (owner, session_id, digest, messages, at),
            )
            row = self._db.execute(
                "SELECT done FROM session_ingests WHERE owner = ? AND session_id = ? AND digest = ?",
                (owner, session_id, digest),
            ).fetchone()
            return row[0] is None

        return bool(self._write(go))

    def begin_ingest(self, owner: str, session_id: str, digest: str) -> int:
        """Start an attempt; an earlier attempt that never finished is rolled back first (returns its rows undone)."""

        def go() -> int:
            row = self._db.execute(
                "SELECT attempt FROM session_ingests WHERE owner = ? AND session_id = ? AND digest = ?",
                (owner, session_id, digest),
            ).fetchone()
            undone = self._undo(owner, session_id, row[0]) if row and row[0] is not None else 0
            self._db.execute(
                "UPDATE session_ingests SET attempt = ? WHERE owner = ? AND session_id = ? AND digest = ?",
                (time.time(), owner, session_id, digest),
            )
            return undone

        return int(self._write(go))

    def end_ingest(self, owner: str, session_id: str, digest: str) -> None:
        """The attempt finished: the session is not ingested again, and its kept steps go."""
        key = (owner, session_id, digest)

        def go() -> None:
            sql = "UPDATE session_ingests SET done = ? WHERE owner = ? AND session_id = ? AND digest = ?"
            self._db.execute(sql, (time.time(), *key))
            self._db.execute("DELETE FROM ingest_steps WHERE owner = ? AND session_id = ? AND digest = ?", key)

        self._write(go)

    def ingested(self, owner: str, session_id: str) -> list[tuple[str, int]]:
        """(digest, messages) of the ingests of a session that finished, the longest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT digest, messages FROM session_ingests WHERE owner = ? AND session_id = ? AND done IS NOT NULL "
                "ORDER BY messages DESC",
                (owner, session_id),
            ).fetchall()
        return [(str(r[0]), int(r[1])) for r in rows]

    def step(self, owner: str, session_id: str, digest: str, step: str) -> str | None:
        """What an ingest kept of one of its steps (a model's answer), or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM ingest_steps WHERE owner = ? AND session_id = ? AND digest = ? AND step = ?",
                (owner, session_id, digest, step),
            ).fetchone()
        return str(row[0]) if row else None

    def keep_step(self, owner: str, session_id: str, digest: str, step: str, value: str) -> None:
        """Keep a step's result until the ingest ends: an attempt cut short resumes after it."""
        self._write(lambda: self._db.execute(
            "INSERT OR REPLACE INTO ingest_steps (owner, session_id, digest, step, value) VALUES (?, ?, ?, ?, ?)",
            (owner, session_id, digest, step, value),
        ))  # fmt: skip

    def unfinished_ingests(self, owner: str) -> list[tuple[str, str, int, float]]:
        """(session id, digest, messages, at) of the ingests expected or started and never finished, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT session_id, digest, messages, at FROM session_ingests WHERE owner = ? AND done IS NULL "
                "ORDER BY at, rowid",
                (owner,),
            ).fetchall()
        return [(str(r[0]), str(r[1]), int(r[2]), float(r[3])) for r in rows]

    def _undo(self, owner: str, session_id: str, since: float) -> int:
        """Remove what an interrupted attempt wrote (inside a transaction): its rows go, what they replaced is back."""
        rows = self._db.execute(
            "SELECT id, replaces FROM memories WHERE owner = ? AND created_at >= ? "
            "AND json_extract(provenance, '$.session_id') = ? ORDER BY id DESC",
            (owner, since, session_id),
        ).fetchall()
        gone = {r[0] for r in rows}
        for row_id, replaces in rows:
            if replaces is not None and replaces not in gone:
                self._db.execute(
                    "UPDATE memories SET status = 'current', valid_to = NULL WHERE id = ? AND status = 'superseded'",
                    (replaces,),
                )
            self._db.execute("DELETE FROM memories_fts WHERE rowid = ?", (row_id,))
            self._db.execute("DELETE FROM memories WHERE id = ?", (row_id,))
        return len(rows)

    # ---- reads ------------------------------------------------------------------------------

    def _must(self, owner: str, memory_id: int) -> MemoryCard:
        card = self.get(owner, memory_id)
        assert card is not None
        return card

    def get(self, owner: str, memory_id: int) -> MemoryCard | None:
        """One row of ``owner`` by id (any status)."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLS} FROM memories WHERE id = ? AND owner = ?", (memory_id, owner)
            ).fetchone()
            return _card(row) if row else None

    def current(self, owner: str, limit: int = 1000) -> list[MemoryCard]:
        """Live memories of ``owner``, most important first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLS} FROM memories WHERE {_LIVE} ORDER BY importance DESC, id DESC LIMIT ?",
                (owner, time.time(), limit),
            ).fetchall()
            return [_card(r) for r in rows]

    def count(self, owner: str) -> int:
        """How many live memories ``owner`` has."""
        with self._lock:
            return int(
                self._db.execute(f"SELECT count(*) FROM memories WHERE {_LIVE}", (owner, time.time())).fetchone()[0]
            )

    def history(self, owner: str, key: str | None = None) -> list[MemoryCard]:
        """Every version, oldest first (one memory's when ``key`` is given)."""
        with self._lock:
            where, args = ("owner = ? AND key = ?", (owner, key)) if key else ("owner = ?", (owner,))
            rows = self._db.execute(f"SELECT {_COLS} FROM memories WHERE {where} ORDER BY key, version", args)
            cards = [_card(r) for r in rows.fetchall()]
            return sorted(cards, key=lambda c: (c.created_at, c.id))

    def search_bm25(self, owner: str, query: str, k: int) -> list[tuple[MemoryCard, float]]:
        """FTS5 BM25 over the owner's live memories (the filter is part of the query); score = -bm25."""
        match = fts_query(query)
        if match is None or k <= 0:
            return []
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join('m.' + c for c in _COLS.split(', '))}, bm25(memories_fts) AS s FROM memories_fts "
                f"JOIN memories m ON m.id = memories_fts.rowid WHERE memories_fts MATCH ? AND "
                f"{_LIVE_M}"
                " ORDER BY s LIMIT ?",
                (match, owner, time.time(), k),
            ).fetchall()
            return [(_card(r[:19]), -float(r[19])) for r in rows]

    def vectors(self, owner: str) -> tuple[list[MemoryCard], Any]:
        """Live memories of ``owner`` and an (n, dim) array of their vectors."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLS}, vector FROM memories WHERE {_LIVE} ORDER BY id", (owner, time.time())
            ).fetchall()
        cards = [_card(r[:19]) for r in rows]
        if not rows:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        vecs = np.frombuffer(b"".join(r[19] for r in rows), dtype=np.float32).reshape(len(rows), self.dim)
        return cards, vecs

    def search_dense(self, owner: str, vector: npt.ArrayLike, k: int) -> list[tuple[MemoryCard, float]]:
        """Exact cosine top ``k`` (vectors are unit length) among the owner's live memories."""
        return nearest(*self.vectors(owner), vector, k)

    def check(self) -> dict[str, int]:
        """Rows and full-text entries, which must agree (for tests and diagnostics)."""
        with self._lock:
            rows = self._db.execute("SELECT count(*) FROM memories").fetchone()[0]
            fts = self._db.execute("SELECT count(*) FROM memories_fts").fetchone()[0]
            return {"rows": rows, "fts_rows": fts}

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()


def open_memory_store(state_dir: Path, dim: int, embedder: str | None = None, url: str = "embedded") -> MemoryStore:
    """The memory store ``url`` (``[storage] store``) names: ``knowledge.db`` in ``state_dir``, or PostgreSQL.

    With PostgreSQL every worker of a deployment shares one user memory
    (:class:`~kairos.memory.store_pg.PgMemoryStore`).

    Raises:
        ConfigError: ``url`` names no store (shown with its password masked).
        StoreError: the store cannot be used.
    """
    kind = chosen_store(url)
    if kind == "postgresql":
        from kairos.memory.store_pg import PgMemoryStore

        return PgMemoryStore(url, dim, embedder)
    return SQLiteMemoryStore(state_dir, dim)


__all__ = ["SQLiteMemoryStore", "open_memory_store"]
