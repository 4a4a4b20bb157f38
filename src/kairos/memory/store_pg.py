"""The PostgreSQL :class:`~kairos.memory.records.MemoryStore`: one user memory for every worker of a deployment.

The same rows and promises as :class:`~kairos.memory.store.SQLiteMemoryStore`, in tables of their
own (``user_memories``, ``memory_ingests``, ``memory_ingest_steps``: a ``memories`` table may be
another store's):

- Each write is one transaction. A write that changes a memory first locks its current row
  (``SELECT … FOR UPDATE``), so two processes revising one memory never make the same version: the
  second one finds it superseded and is refused, as it would be on SQLite after the first.
- Full text: a ``tsvector`` column generated from the indexed text (the content plus a card's
  path, value, person …, accents folded as FTS5's ``remove_diacritics`` does) with a GIN index;
  a query is the OR of the same words FTS5 gets (:func:`~kairos.retrieval.text.query_words`),
  ranked by ``ts_rank``.
- Vectors are ``bytea`` and dense search is the same exact cosine in numpy over one user's live
  rows (a user has a few thousand memories: no index to keep in step).
- ``forget`` deletes, then rewrites the table (``VACUUM FULL``): the erased text leaves the
  table's files, not only its visible rows (the server's WAL keeps it until it is recycled).
- An ingest in progress is held by its process (an advisory lock that dies with it): another
  worker's attempt on the same session is refused instead of undoing the first one's rows.
- The embedder is recorded on first use; a process with another embedder is refused (its vectors
  would not compare).
"""

from __future__ import annotations

import json
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from kairos.memory.records import (
    IngestHeldElsewhere,
    MemoryCard,
    MemoryIn,
    MemoryProvenance,
    MemoryStoreError,
    Op,
    searchable,
)
from kairos.memory.store import nearest
from kairos.retrieval.text import query_words
from kairos.storage.postgres import CONNECT_TIMEOUT_S, PgDatabase, fault

T = TypeVar("T")
WHAT = "the memory database"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS user_memories (
    id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL, owner TEXT NOT NULL, kind TEXT NOT NULL, format TEXT NOT NULL,
    category TEXT NOT NULL, content TEXT NOT NULL, data TEXT NOT NULL DEFAULT '{}',
    importance DOUBLE PRECISION NOT NULL, version INTEGER NOT NULL, status TEXT NOT NULL, op TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL, valid_from DOUBLE PRECISION, valid_to DOUBLE PRECISION,
    expires_at DOUBLE PRECISION, provenance TEXT NOT NULL DEFAULT '{}', accesses INTEGER NOT NULL DEFAULT 0,
    replaces BIGINT, vector BYTEA, search TEXT NOT NULL DEFAULT '',
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', search)) STORED,
    UNIQUE (key, version)
);
CREATE INDEX IF NOT EXISTS user_memories_owner ON user_memories (owner, status);
CREATE INDEX IF NOT EXISTS user_memories_tsv ON user_memories USING GIN (tsv);
CREATE TABLE IF NOT EXISTS memory_ingests (
    owner TEXT NOT NULL, session_id TEXT NOT NULL, digest TEXT NOT NULL, messages INTEGER NOT NULL,
    at DOUBLE PRECISION NOT NULL, attempt DOUBLE PRECISION, done DOUBLE PRECISION, seq BIGSERIAL,
    PRIMARY KEY (owner, session_id, digest)
);
CREATE TABLE IF NOT EXISTS memory_ingest_steps (
    owner TEXT NOT NULL, session_id TEXT NOT NULL, digest TEXT NOT NULL, step TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (owner, session_id, digest, step)
);
CREATE TABLE IF NOT EXISTS memory_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
MIGRATIONS: tuple[str, ...] = (_SCHEMA,)
"""The ``memory`` owner's versions in a PostgreSQL database (kairos.storage.postgres)."""
_COLS = (
    "id, key, owner, kind, format, category, content, data, importance, version, status, op, created_at, "
    "valid_from, valid_to, expires_at, provenance, accesses, replaces"
)
_N = len(_COLS.split(", "))
_LIVE = "owner = %s AND status = 'current' AND (expires_at IS NULL OR expires_at > %s)"
_LEDGER = "owner = %s AND session_id = %s AND digest = %s"


def fold(text: str) -> str:
    """``text`` without accents (as FTS5's ``remove_diacritics``): "café" finds "cafe" and back."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _card(row: Sequence[Any]) -> MemoryCard:
    return MemoryCard(
        int(row[0]), row[1], row[2], row[3], row[4], row[5], row[6], json.loads(row[7] or "{}"), float(row[8]),
        row[9], row[10], row[11], row[12], row[13], row[14], row[15], MemoryProvenance.from_json(row[16]), row[17],
        None if row[18] is None else int(row[18]),
    )  # fmt: skip


class PgMemoryStore:
    """Memories in a PostgreSQL database (``postgresql://USER:PASSWORD@HOST:PORT/DB``), see the module docstring.

    Args:
        url: the database (``[storage] store``).
        dim: vector length of the embedder in use.
        embedder: its name, recorded on first use and checked after (None: only ``dim`` is checked).

    Raises:
        StoreError: psycopg is missing, the server cannot be reached (the URL's password masked), or
            the database holds memories of another embedder.
    """

    def __init__(self, url: str, dim: int, embedder: str | None = None, *, max_connections: int = 4) -> None:
        self.url, self.dim = url, dim
        self._db = PgDatabase(url, WHAT, max_size=max_connections)  # first: a missing psycopg gets the install hint
        import psycopg

        self._psycopg = psycopg
        self._claims: dict[tuple[str, str, str], Any] = {}
        self.path = self._db.shown
        """Where it is, as errors name it (the URL without its password)."""
        try:
            self._db.migrate("memory", MIGRATIONS)
            self._check_embedder(embedder)
        except BaseException:
            self._db.close()
            raise

    def _check_embedder(self, name: str | None) -> None:
        wanted = {"dim": str(self.dim), **({"embedder": name} if name else {})}

        def go(conn: Any) -> dict[str, str]:
            for key, value in wanted.items():
                conn.execute(
                    "INSERT INTO memory_settings (name, value) VALUES (%s, %s) ON CONFLICT DO NOTHING", (key, value)
                )
            return {str(r[0]): str(r[1]) for r in conn.execute("SELECT name, value FROM memory_settings")}

        found = self._write(go)
        if any(found.get(k, v) != v for k, v in wanted.items()):
            raise MemoryStoreError(
                f"{WHAT} at {self.path} holds memories of the embedder {found.get('embedder', '?')} "
                f"({found.get('dim')} dimensions), not {name or '?'} ({self.dim}): every process of a deployment "
                "needs the same [knowledge] embedder"
            )

    # ---- plumbing -----------------------------------------------------------------------------

    @contextmanager
    def _faults(self) -> Iterator[None]:
        """Map the driver's errors to the StoreError tree (a lost race on a version: a MemoryStoreError)."""
        try:
            yield
        except self._psycopg.IntegrityError as e:
            raise MemoryStoreError(f"{WHAT} at {self.path} refused a write another process made first: {e}") from e
        except self._psycopg.Error as e:
            raise fault(e, self.url, WHAT) from e

    def _write(self, fn: Callable[[Any], T]) -> T:
        """``fn(conn)`` inside one transaction."""
        with self._faults(), self._db.transaction() as conn:
            return fn(conn)

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._faults():
            return self._db.read(sql, args)

    def _vec(self, vector: npt.ArrayLike) -> bytes:
        vec = np.asarray(vector, dtype=np.float32).reshape(-1)
        if vec.shape[0] != self.dim:
            raise MemoryStoreError(f"a vector of {vec.shape[0]} dimensions for memories of {self.dim}")
        return vec.tobytes()

    @staticmethod
    def _insert(
        conn: Any, owner: str, key: str, version: int, m: MemoryIn, vector: bytes, *, status: str, op: Op,
        replaces: int | None, now: float,
    ) -> int:  # fmt: skip
        row = conn.execute(
            f"INSERT INTO user_memories ({_COLS.removeprefix('id, ')}, vector, search) "
            f"VALUES ({', '.join(['%s'] * (_N + 1))}) RETURNING id",
            (
                key, owner, m.kind, m.format, m.category, m.content, json.dumps(m.data, ensure_ascii=False),
                float(m.importance), version, status, op, now, m.valid_from if m.valid_from is not None else now,
                None, m.expires_at, m.provenance.to_json(), 0, replaces, vector, fold(searchable(m.content, m.data)),
            ),
        ).fetchone()  # fmt: skip
        return int(row[0])

    @staticmethod
    def _live_row(conn: Any, owner: str, memory_id: int) -> MemoryCard:
        """The current row of ``memory_id``, locked until the transaction ends (a racing writer waits, then sees)."""
        row = conn.execute(
            f"SELECT {_COLS} FROM user_memories WHERE id = %s AND owner = %s FOR UPDATE", (memory_id, owner)
        ).fetchone()
        if row is None:
            raise MemoryStoreError(f"no memory {memory_id} for user {owner!r}")
        card = _card(row)
        if card.status != "current":
            raise MemoryStoreError(f"memory {memory_id} is {card.status}, not current; act on the current version")
        return card

    @staticmethod
    def _next_version(conn: Any, key: str) -> int:
        return 1 + int(conn.execute("SELECT max(version) FROM user_memories WHERE key = %s", (key,)).fetchone()[0])

    # ---- writes -------------------------------------------------------------------------------

    def add(self, owner: str, memory: MemoryIn, vector: npt.ArrayLike, *, op: Op = "add") -> MemoryCard:
        """Store a new memory (version 1)."""
        blob, key = self._vec(vector), uuid.uuid4().hex[:16]
        row = self._write(lambda c: self._insert(c, owner, key, 1, memory, blob, status="current", op=op,
                                                 replaces=None, now=time.time()))  # fmt: skip
        return self._must(owner, row)

    def revise(self, owner: str, memory_id: int, memory: MemoryIn, vector: npt.ArrayLike, *, op: Op) -> MemoryCard:
        """A new version of ``memory_id``; the newer ``valid_from`` wins, the other stays in history as superseded."""
        blob = self._vec(vector)

        def go(conn: Any) -> int:
            old = self._live_row(conn, owner, memory_id)
            now = time.time()
            new_from = memory.valid_from if memory.valid_from is not None else now
            version = self._next_version(conn, old.key)
            if old.valid_from is not None and new_from < old.valid_from:  # an earlier session ingested late
                row = self._insert(conn, owner, old.key, version, memory, blob, status="superseded", op=op,
                                   replaces=old.id, now=now)  # fmt: skip
                conn.execute("UPDATE user_memories SET valid_to = %s WHERE id = %s", (old.valid_from, row))
                return old.id
            conn.execute(
                "UPDATE user_memories SET status = 'superseded', valid_to = %s WHERE id = %s", (new_from, old.id)
            )
            return self._insert(conn, owner, old.key, version, memory, blob, status="current", op=op,
                                replaces=old.id, now=now)  # fmt: skip

        return self._must(owner, self._write(go))

    def delete(self, owner: str, memory_id: int, *, provenance: MemoryProvenance) -> MemoryCard:
        """Tombstone ``memory_id``: a ``deleted`` version closes its history and it leaves retrieval."""

        def go(conn: Any) -> int:
            old = self._live_row(conn, owner, memory_id)
            now = time.time()
            version = self._next_version(conn, old.key)
            conn.execute("UPDATE user_memories SET status = 'superseded', valid_to = %s WHERE id = %s", (now, old.id))
            tomb = MemoryIn(old.kind, old.format, old.category, old.content, old.data, old.importance, now, None,
                            provenance)  # fmt: skip
            return self._insert(conn, owner, old.key, version, tomb, b"", status="deleted", op="delete",
                                replaces=old.id, now=now)  # fmt: skip

        return self._must(owner, self._write(go))

    def archive(self, owner: str, memory_ids: Sequence[int], summary: MemoryIn, vector: npt.ArrayLike) -> MemoryCard:
        """One summary memory for ``memory_ids``; they become ``archived`` (kept in history, out of retrieval)."""
        blob = self._vec(vector)

        def go(conn: Any) -> int:
            locked = {i: self._live_row(conn, owner, i) for i in sorted(set(memory_ids))}  # one order: no deadlock
            olds = [locked[i] for i in memory_ids]
            now = time.time()
            merged = MemoryIn(summary.kind, summary.format, summary.category, summary.content,
                              {**summary.data, "merged": [o.id for o in olds]}, summary.importance,
                              summary.valid_from, summary.expires_at, summary.provenance)  # fmt: skip
            row = self._insert(conn, owner, uuid.uuid4().hex[:16], 1, merged, blob, status="current", op="compress",
                               replaces=None, now=now)  # fmt: skip
            for old in olds:
                conn.execute(
                    "UPDATE user_memories SET status = 'archived', valid_to = %s, data = %s WHERE id = %s",
                    (now, json.dumps({**old.data, "merged_into": row}, ensure_ascii=False), old.id),
                )
            return row

        return self._must(owner, self._write(go))

    def forget(self, owner: str, memory_id: int | None = None) -> int:
        """Erase rows (their text, index entries and vectors): one memory's every version, or all of ``owner``'s."""

        def go(conn: Any) -> int:
            if memory_id is None:
                # an unfinished ingest would bring an old session's memories back when it is saved later
                conn.execute("DELETE FROM memory_ingests WHERE owner = %s AND done IS NULL", (owner,))
                conn.execute("DELETE FROM memory_ingest_steps WHERE owner = %s", (owner,))
                return int(conn.execute("DELETE FROM user_memories WHERE owner = %s", (owner,)).rowcount)
            row = conn.execute(
                "SELECT key FROM user_memories WHERE id = %s AND owner = %s", (memory_id, owner)
            ).fetchone()
            if row is None:
                raise MemoryStoreError(f"no memory {memory_id} for user {owner!r}")
            return int(conn.execute("DELETE FROM user_memories WHERE key = %s", (row[0],)).rowcount)

        n = self._write(go)
        if n:  # a DELETE only hides rows; the rewrite takes their bytes out of the table's and the index's files
            with self._faults(), self._db.connection() as conn:
                conn.execute("VACUUM FULL user_memories")
        return n

    def touch(self, ids: Sequence[int]) -> None:
        """Count one access for each memory (importance grows with use)."""
        if ids:
            self._write(lambda c: c.execute(
                "UPDATE user_memories SET accesses = accesses + 1 WHERE id = ANY(%s)", (sorted(set(ids)),)
            ))  # fmt: skip

    # ---- the ingest ledger --------------------------------------------------------------------

    def expect_ingest(self, owner: str, session_id: str, digest: str, messages: int, at: float) -> bool:
        """Record that a session (``digest`` of its messages) is to be ingested; False when it already was."""

        def go(conn: Any) -> bool:
            conn.execute(
                "INSERT INTO memory_ingests (owner, session_id, digest, messages, at) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (owner, session_id, digest, messages, at),
            )
            row = conn.execute(f"SELECT done FROM memory_ingests WHERE {_LEDGER}", (owner, session_id, digest))
            return bool(row.fetchone()[0] is None)

        return self._write(go)

    def _claim(self, key: tuple[str, str, str]) -> None:
        """Hold an ingest until it ends (an advisory lock on a connection of its own, dropped if this process dies).

        Workers share the ledger: without it a second worker's attempt would undo the first one's rows mid-way.
        """
        if key in self._claims:
            return
        psycopg = self._psycopg
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as e:
            raise fault(e, self.url, WHAT) from e
        try:
            lock = "SELECT pg_try_advisory_lock(hashtextextended('kairos.memory.ingest:' || %s, 0))"
            got = conn.execute(lock, ("\x1f".join(key),)).fetchone()[0]
        except psycopg.Error as e:
            conn.close()
            raise fault(e, self.url, WHAT) from e
        if not got:
            conn.close()
            raise IngestHeldElsewhere(f"the memory of session {key[1]} is being saved by another process")
        self._claims[key] = conn

    def _unclaim(self, key: tuple[str, str, str]) -> None:
        conn = self._claims.pop(key, None)
        if conn is not None:
            conn.close()

    def begin_ingest(self, owner: str, session_id: str, digest: str) -> int:
        """Start an attempt; an earlier attempt that never finished is rolled back first (returns its rows undone).

        Raises:
            MemoryStoreError: another process is ingesting this session now.
        """
        self._claim((owner, session_id, digest))

        def go(conn: Any) -> int:
            key = (owner, session_id, digest)
            row = conn.execute(f"SELECT attempt FROM memory_ingests WHERE {_LEDGER} FOR UPDATE", key).fetchone()
            undone = self._undo(conn, owner, session_id, row[0]) if row and row[0] is not None else 0
            conn.execute(f"UPDATE memory_ingests SET attempt = %s WHERE {_LEDGER}", (time.time(), *key))
            return undone

        return self._write(go)

    @staticmethod
    def _undo(conn: Any, owner: str, session_id: str, since: float) -> int:
        """Remove what an interrupted attempt wrote: its rows go, what they replaced is current again."""
        rows = conn.execute(
            "SELECT id, replaces FROM user_memories WHERE owner = %s AND created_at >= %s "
            "AND provenance::jsonb ->> 'session_id' = %s ORDER BY id DESC",
            (owner, since, session_id),
        ).fetchall()
        gone = {r[0] for r in rows}
        for row_id, replaces in rows:
            if replaces is not None and replaces not in gone:
                conn.execute(
                    "UPDATE user_memories SET status = 'current', valid_to = NULL WHERE id = %s "
                    "AND status = 'superseded'",
                    (replaces,),
                )
            conn.execute("DELETE FROM user_memories WHERE id = %s", (row_id,))
        return len(rows)

    def end_ingest(self, owner: str, session_id: str, digest: str) -> None:
        """The attempt finished: the session is not ingested again, and its kept steps go."""

        def go(conn: Any) -> None:
            key = (owner, session_id, digest)
            conn.execute(f"UPDATE memory_ingests SET done = %s WHERE {_LEDGER}", (time.time(), *key))
            conn.execute(f"DELETE FROM memory_ingest_steps WHERE {_LEDGER}", key)

        self._write(go)
        self._unclaim((owner, session_id, digest))

    def ingested(self, owner: str, session_id: str) -> list[tuple[str, int]]:
        """(digest, messages) of the ingests of a session that finished, the longest first."""
        rows = self._read(
            "SELECT digest, messages FROM memory_ingests WHERE owner = %s AND session_id = %s AND done IS NOT NULL "
            "ORDER BY messages DESC",
            (owner, session_id),
        )
        return [(str(r[0]), int(r[1])) for r in rows]

    def step(self, owner: str, session_id: str, digest: str, step: str) -> str | None:
        """What an ingest kept of one of its steps (a model's answer), or None."""
        rows = self._read(
            f"SELECT value FROM memory_ingest_steps WHERE {_LEDGER} AND step = %s", (owner, session_id, digest, step)
        )
        return str(rows[0][0]) if rows else None

    def keep_step(self, owner: str, session_id: str, digest: str, step: str, value: str) -> None:
        """Keep a step's result until the ingest ends: an attempt cut short resumes after it."""
        self._write(lambda c: c.execute(
            "INSERT INTO memory_ingest_steps (owner, session_id, digest, step, value) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (owner, session_id, digest, step) DO UPDATE SET value = excluded.value",
            (owner, session_id, digest, step, value),
        ))  # fmt: skip

    def unfinished_ingests(self, owner: str) -> list[tuple[str, str, int, float]]:
        """(session id, digest, messages, at) of the ingests expected or started and never finished, oldest first."""
        rows = self._read(
            "SELECT session_id, digest, messages, at FROM memory_ingests WHERE owner = %s AND done IS NULL "
            "ORDER BY at, seq",
            (owner,),
        )
        return [(str(r[0]), str(r[1]), int(r[2]), float(r[3])) for r in rows]

    # ---- reads --------------------------------------------------------------------------------

    def _must(self, owner: str, memory_id: int) -> MemoryCard:
        card = self.get(owner, memory_id)
        assert card is not None
        return card

    def get(self, owner: str, memory_id: int) -> MemoryCard | None:
        """One row of ``owner`` by id (any status)."""
        rows = self._read(f"SELECT {_COLS} FROM user_memories WHERE id = %s AND owner = %s", (memory_id, owner))
        return _card(rows[0]) if rows else None

    def current(self, owner: str, limit: int = 1000) -> list[MemoryCard]:
        """Live memories of ``owner``, most important first."""
        rows = self._read(
            f"SELECT {_COLS} FROM user_memories WHERE {_LIVE} ORDER BY importance DESC, id DESC LIMIT %s",
            (owner, time.time(), limit),
        )
        return [_card(r) for r in rows]

    def count(self, owner: str) -> int:
        """How many live memories ``owner`` has."""
        return int(self._read(f"SELECT count(*) FROM user_memories WHERE {_LIVE}", (owner, time.time()))[0][0])

    def history(self, owner: str, key: str | None = None) -> list[MemoryCard]:
        """Every version, oldest first (one memory's when ``key`` is given)."""
        where, args = ("owner = %s AND key = %s", (owner, key)) if key else ("owner = %s", (owner,))
        cards = [_card(r) for r in self._read(f"SELECT {_COLS} FROM user_memories WHERE {where}", args)]
        return sorted(cards, key=lambda c: (c.created_at, c.id))

    def search_bm25(self, owner: str, query: str, k: int) -> list[tuple[MemoryCard, float]]:
        """Full text over the owner's live memories: any of the query's words, ranked by ``ts_rank``."""
        words = query_words(fold(query))
        if not words or k <= 0:
            return []
        match = " || ".join(["plainto_tsquery('english', %s)"] * len(words))
        rows = self._read(
            f"SELECT {_COLS}, ts_rank(tsv, q) AS s FROM user_memories, (SELECT {match}) AS q(q) "
            f"WHERE tsv @@ q AND {_LIVE} ORDER BY s DESC, id LIMIT %s",
            (*words, owner, time.time(), k),
        )
        return [(_card(r[:_N]), float(r[_N])) for r in rows]

    def vectors(self, owner: str) -> tuple[list[MemoryCard], Any]:
        """Live memories of ``owner`` and an (n, dim) array of their vectors."""
        rows = self._read(f"SELECT {_COLS}, vector FROM user_memories WHERE {_LIVE} ORDER BY id", (owner, time.time()))
        if not rows:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        vecs = np.frombuffer(b"".join(bytes(r[_N]) for r in rows), dtype=np.float32).reshape(len(rows), self.dim)
        return [_card(r[:_N]) for r in rows], vecs

    def search_dense(self, owner: str, vector: npt.ArrayLike, k: int) -> list[tuple[MemoryCard, float]]:
        """Exact cosine top ``k`` (vectors are unit length) among the owner's live memories."""
        return nearest(*self.vectors(owner), vector, k)

    def check(self) -> dict[str, int]:
        """Rows and full-text entries, which must agree (for tests and diagnostics)."""
        rows, fts = self._read("SELECT count(*), count(tsv) FROM user_memories")[0]
        return {"rows": int(rows), "fts_rows": int(fts)}

    def close(self) -> None:
        """Close the pool and give up the ingests held (idempotent)."""
        for key in list(self._claims):
            self._unclaim(key)
        self._db.close()


__all__ = ["MIGRATIONS", "PgMemoryStore", "fold"]
