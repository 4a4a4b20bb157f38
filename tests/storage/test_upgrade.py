"""Files written by the release before the storage layer open, migrate, and keep their data.

The fixtures (``fixtures/*.sql``) were written by that release's own code and dumped with its exact
schema; see ``fixtures/README.md``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from kairos.context.store_sqlite import SqliteTrajectoryStore
from kairos.knowledge import HashEmbedder, KnowledgeBase, entity_graph
from kairos.knowledge import store as knowledge_store
from kairos.knowledge.contextual import ContextCache
from kairos.memory.records import MemoryIn
from kairos.memory.store import MIGRATIONS as MEMORY_MIGRATIONS
from kairos.memory.store import SQLiteMemoryStore
from kairos.runtime.bus import SqliteBus
from kairos.runtime.db import RuntimeDB
from kairos.runtime.integrations import calendar, mail, outbox, tasks, timers, watch
from kairos.storage import schema_version

FIXTURES = Path(__file__).parent / "fixtures"
SESSION = "fixture00001"


def _load(fixture: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript((FIXTURES / fixture).read_text())
    db.close()
    return path


def _versions(path: Path) -> dict[str, int]:
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT owner, version FROM schema_versions").fetchall())
    finally:
        db.close()


def _tables(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        db.close()


def test_a_session_database_keeps_its_sessions(tmp_path: Path) -> None:
    path = _load("kairos.sql", tmp_path / "kairos.db")
    for _ in range(2):  # the second opening finds the versions and does nothing
        store = SqliteTrajectoryStore(path)
        try:
            assert [(s.id, s.title, s.messages) for s in store.list_sessions()] == [(SESSION, "upgrade fixture", 2)]
            assert store.session_meta(SESSION) == {"origin": "fixture"}
            assert [m.content for m in store.load_messages(SESSION)] == ["hello from the old release", "hi, still here"]
            assert [e.record for e in store.pending_events(SESSION)] == [{"text": "an event waiting"}]
            assert store.frozen(SESSION, "summary:1") == "a frozen summary"
        finally:
            store.close()
    assert _versions(path) == {"sessions": 2}
    store = SqliteTrajectoryStore(path)  # and it is writable as before: a new message, an idempotent event
    try:
        store.append_messages(SESSION, 2, [store.load_messages(SESSION)[0]])
        assert store.post_events([(SESSION, "webhook", {"n": 1}, "k1")])[0] is not None
        assert store.post_events([(SESSION, "webhook", {"n": 1}, "k1")]) == [None]
    finally:
        store.close()


def test_a_runtime_database_keeps_every_components_rows(tmp_path: Path) -> None:
    path = _load("runtime.sql", tmp_path / "runtime.db")
    db = RuntimeDB(path)
    try:
        bus = SqliteBus(db)  # ensures the bus's tables
        assert [(e.session, e.type) for e in bus.history(None, 0)] == [(SESSION, "session_created")]
        for owner, migrations in [("calendar", calendar.MIGRATIONS), ("mail", mail.MIGRATIONS),
                                  ("outbox", outbox.MIGRATIONS), ("tasks", tasks.MIGRATIONS),
                                  ("timers", timers.MIGRATIONS), ("watch", watch.MIGRATIONS)]:  # fmt: skip
            db.ensure(owner, migrations)
        assert db.read("SELECT message, next_due > created FROM timers_timers") == [("stretch", 1)]
        assert db.read("SELECT text FROM outbox_messages WHERE \"user\" = 'alice'") == [("the build is done",)]
        assert db.read("SELECT title FROM calendar_events") == [("dentist",)]
        assert db.read("SELECT title, status FROM tasks_tasks") == [("make test", "done")]
        assert db.read("SELECT path FROM watch_watches") == [("src",)]
        assert db.read("SELECT message_id FROM mail_sent WHERE key = 'key1'") == [("<m1@x>",)]
    finally:
        db.close()
    latest = {m.__name__.rsplit(".", 1)[1]: len(m.MIGRATIONS) for m in (calendar, mail, outbox, tasks, timers, watch)}
    assert _versions(path) == {"bus": 1, **latest}  # each migrated on to its newest version, rows kept


async def test_named_sessions_move_off_the_openai_endpoints_old_table(tmp_path: Path) -> None:
    from kairos.agent import Agent
    from kairos.context.session import SessionStore
    from kairos.runtime import Runtime
    from kairos.testing import ScriptedModel

    state = tmp_path / ".kairos"
    _load("kairos.sql", state / "kairos.db")
    path = _load("runtime.sql", state / "runtime.db")
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path, state)) as rt:
        assert rt.named_session("openai", "alice", "openai user alice") == SESSION
        rows = rt.db.read("SELECT name, session FROM named_sessions WHERE namespace = 'openai' ORDER BY name")
        assert rows == [("alice", SESSION), ("bob", "fixture00002")]  # bob's came from the old table
    assert "server_openai_users" not in _tables(path)
    assert _versions(path)["named_sessions"] == 2 and _versions(path)["runtime"] == 2


def test_a_knowledge_and_memory_database_keeps_documents_memories_and_graph(tmp_path: Path) -> None:
    emb = HashEmbedder()
    path = _load("knowledge.sql", tmp_path / knowledge_store.DB_NAME)
    kb = KnowledgeBase.open(tmp_path, emb)  # its indexes are missing: rebuilt from the rows
    try:
        assert [h.chunk.source for h in kb.search("llama barn", k=3).hits] == ["notes.txt"]
        assert kb.stats()["memories"] == 1
        entity_graph.ensure_schema(kb.store)
    finally:
        kb.close()
    memory = SQLiteMemoryStore(tmp_path, emb.dim)
    try:
        assert [c.content for c in memory.current("alice")] == ["alice prefers green tea"]
        assert [c.content for c, _ in memory.search_bm25("alice", "green tea", 3)] == ["alice prefers green tea"]
        vector = emb.embed_passages(["alice prefers green tea"])[0]
        assert memory.search_dense("alice", vector, 1)[0][1] > 0.99
    finally:
        memory.close()
    assert _versions(path) == {"knowledge": 2, "graph": 1, "memory": len(MEMORY_MIGRATIONS)}
    assert "memories" in _tables(path)  # the memory store's table, never the knowledge store's to drop


def test_a_knowledge_only_database_loses_its_empty_placeholder_and_takes_memories(tmp_path: Path) -> None:
    emb = HashEmbedder()
    path = _load("knowledge-only.sql", tmp_path / knowledge_store.DB_NAME)
    assert "memories" in _tables(path)
    KnowledgeBase.open(tmp_path, emb).close()
    assert "memories" not in _tables(path)  # the knowledge store's placeholder, empty
    memory = SQLiteMemoryStore(tmp_path, emb.dim)
    try:
        card = memory.add("bob", MemoryIn("semantic", "note", "preference", "bob likes rain"), np.ones(emb.dim))
        assert [c.id for c in memory.current("bob")] == [card.id]
    finally:
        memory.close()
    kb = KnowledgeBase.open(tmp_path, emb)
    try:
        assert [h.chunk.source for h in kb.search("llama", k=3).hits] == ["notes.txt"] and kb.stats()["memories"] == 1
    finally:
        kb.close()


def test_a_model_cache_keeps_its_contexts(tmp_path: Path) -> None:
    path = _load("knowledge-cache.sql", tmp_path / "knowledge-cache.db")
    cache = ContextCache(path)
    try:
        assert cache.get("m1", "doc", "chunk") == "a cached context" and len(cache) == 1
    finally:
        cache.close()
    db = sqlite3.connect(path)
    try:
        assert schema_version(db, "contexts") == 1
    finally:
        db.close()
