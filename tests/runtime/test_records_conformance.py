"""The runtime's records (:class:`~kairos.runtime.db.RecordDB`): the same behaviour on SQLite and PostgreSQL.

Each component's SQL is written once for both backends; these tests run it on both, with two
connections standing for two workers of one deployment where the records are shared.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import pytest

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.errors import SchemaTooNewError
from kairos.runtime import Calendar, Outbox, Runtime, runtime, session_names
from kairos.runtime.db import RecordDB
from kairos.runtime.integrations import calendar, mail, outbox, tasks, timers, watch
from kairos.runtime.integrations.tasks import TaskManager
from kairos.testing import ScriptedModel
from tests.runtime.records_backends import Records, records_fixture  # noqa: F401 (the fixture)

OWNERS = {
    "runtime": runtime._MIGRATIONS, "named_sessions": session_names.MIGRATIONS, "calendar": calendar.MIGRATIONS,
    "mail": mail.MIGRATIONS, "outbox": outbox.MIGRATIONS, "tasks": tasks.MIGRATIONS, "timers": timers.MIGRATIONS,
    "watch": watch.MIGRATIONS,
}  # fmt: skip
TYPES = """
CREATE TABLE IF NOT EXISTS t_items (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT UNIQUE, n INTEGER NOT NULL DEFAULT 0, x REAL, b BLOB, s TEXT
);
"""


def _runtime(tmp_path: Path, db: RecordDB, components: list[object] | None = None) -> Runtime:
    store = SessionStore(tmp_path, tmp_path / ".kairos")
    return Runtime(Agent(ScriptedModel()), store, db=db, components=components or [])  # type: ignore[arg-type]


def test_every_components_tables_migrate_on_both_backends_once_and_twice(records: Records) -> None:
    first, second = records.open(), records.open()
    for owner, migrations in OWNERS.items():
        first.ensure(owner, migrations)
        second.ensure(owner, migrations)  # a second worker finds them migrated
    versions = dict(first.read("SELECT owner, version FROM schema_versions"))
    assert {o: versions[o] for o in OWNERS} == {o: len(m) for o, m in OWNERS.items()}


def test_values_keep_their_types_and_placeholders_are_portable(records: Records) -> None:
    db = records.open()
    db.ensure("t", (TYPES,))
    big = 2**40  # past PostgreSQL's INTEGER: the columns are BIGINT there
    assert (
        db.write("INSERT INTO t_items (key, n, x, b, s) VALUES (?, ?, ?, ?, ?)", ("a", big, 0.5, b"\x00\xff", "50% ?"))
        == 1
    )
    rows = db.read("SELECT seq, n, x, b, s FROM t_items WHERE key = ? AND s LIKE '50% ?'", ("a",))
    assert rows == [(1, big, 0.5, b"\x00\xff", "50% ?")]
    back = db.read(
        "INSERT INTO t_items (key) VALUES (?) ON CONFLICT (key) DO UPDATE SET n = t_items.n + 1 RETURNING n", ("a",)
    )
    assert back == [(big + 1,)]
    assert db.write("INSERT INTO t_items (key) VALUES (?) ON CONFLICT DO NOTHING", ("a",)) == 0  # a duplicate
    assert db.write("UPDATE t_items SET s = ? WHERE key IN (?, ?)", ("'quoted'", "a", "zz")) == 1
    assert db.read("SELECT s FROM t_items WHERE key = 'a'") == [("'quoted'",)]
    assert db.read("SELECT COUNT(*) FROM t_items WHERE s IS NULL") == [(0,)]


def test_write_many_is_all_or_nothing(records: Records) -> None:
    db = records.open()
    db.ensure("t", (TYPES,))
    db.write_many("INSERT INTO t_items (key, n) VALUES (?, ?)", [("a", 1), ("b", 2)])
    with pytest.raises(Exception):  # noqa: B017 (each backend's IntegrityError)
        db.write_many("INSERT INTO t_items (key, n) VALUES (?, ?)", [("c", 3), ("a", 4)])
    assert db.read("SELECT key, n FROM t_items ORDER BY key") == [("a", 1), ("b", 2)]
    assert records.open().read("SELECT COUNT(*) FROM t_items") == [(2,)]  # committed, seen by another worker


def test_a_schema_from_a_newer_release_is_refused_and_left_as_it_is(records: Records) -> None:
    db = records.open()
    db.ensure("t", (TYPES,))
    db.write("UPDATE schema_versions SET version = 7 WHERE owner = 't'")
    with pytest.raises(SchemaTooNewError) as e:
        records.open().ensure("t", (TYPES,))
    assert e.value.found == 7 and e.value.known == 1
    assert db.read("SELECT version FROM schema_versions WHERE owner = 't'") == [(7,)]


def test_racing_workers_claim_one_idempotency_key_once(records: Records) -> None:
    """Eight connections insert the same task effect key at once: exactly one wins."""
    dbs = [records.open() for _ in range(8)]
    for db in dbs:
        db.ensure("tasks", tasks.MIGRATIONS)
    barrier, won = threading.Barrier(len(dbs)), []

    def claim(db: RecordDB, n: int) -> None:
        barrier.wait()
        won.append(db.write(
            "INSERT INTO tasks_tasks (id, session, kind, title, status, started, effect_key) "
            "VALUES (?, 's', 'command', 'x', 'running', 0, 'call-1') ON CONFLICT DO NOTHING", (f"t-{n}",),
        ))  # fmt: skip

    threads = [threading.Thread(target=claim, args=(db, n)) for n, db in enumerate(dbs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [0] * 7 + [1]
    assert dbs[0].read("SELECT COUNT(*) FROM tasks_tasks WHERE effect_key = 'call-1'") == [(1,)]


def test_a_calendar_key_adds_one_entry_whoever_delivers_it(records: Records) -> None:
    first, second = Calendar(records.open()), Calendar(records.open())
    entry, added = first.add("dentist", "2026-12-07T09:00", "2026-12-07T10:00", key="call-1")
    again, added_again = second.add("dentist", "2026-12-07T09:00", "2026-12-07T10:00", key="call-1")
    assert added and not added_again and again == entry
    assert [e.title for e in second.overlapping("2026-12-07T00:00", "2026-12-08T00:00")] == ["dentist"]


async def test_a_named_session_is_one_session_for_every_worker_even_when_both_create(
    records: Records, tmp_path: Path
) -> None:
    async with _runtime(tmp_path / "a", records.open()) as a, _runtime(tmp_path / "b", records.open()) as b:
        b.store = a.store  # one session store, as the deployment's workers share it
        made = b.create_session

        def late_create(title: str = "", meta: object = None, history: object = ()) -> str:
            a.named_session("openai", "alice", "alice")  # the other worker gets there first, meanwhile
            return made(title)

        b.create_session = late_create  # type: ignore[method-assign,assignment]
        sid = b.named_session("openai", "alice", "alice")
        assert sid == a.named_session("openai", "alice", "alice")
        assert a.db.read("SELECT session FROM named_sessions WHERE name = 'alice'") == [(sid,)]
        assert b.default_session() == a.default_session()


async def test_the_outbox_keeps_messages_per_user_and_marks_them_read(records: Records, tmp_path: Path) -> None:
    box = Outbox(default_user="alice")
    async with _runtime(tmp_path, records.open(), [box]) as rt:
        await box.wait_ready()
        sid = rt.create_session()
        one = box.notify(sid, "the build is done (100%)")
        box.notify(sid, "and the tests")
        assert [m["text"] for m in box.list()] == ["the build is done (100%)", "and the tests"]
        assert box.list(user="bob") == []
        assert box.mark_read([one["id"]], user="alice") == 1
        assert box.mark_read([one["id"]], user="alice") == 0
        assert [m["text"] for m in box.list(unread_only=True)] == ["and the tests"]


async def test_a_tasks_effect_key_starts_one_command_across_workers(records: Records, tmp_path: Path) -> None:
    first, second = TaskManager(poll_s=0.05), TaskManager(poll_s=0.05)
    async with _runtime(tmp_path / "a", records.open(), [first]) as a, \
            _runtime(tmp_path / "b", records.open(), [second]) as b:  # fmt: skip
        await first.ready()
        await second.ready()
        sid = a.create_session()
        env = {"PATH": "/usr/bin:/bin"}
        one, two = await asyncio.gather(
            first.start_command(sid, "echo once >> ran.txt", cwd=tmp_path, env=env, effect_key="call-1"),
            second.start_command(sid, "echo once >> ran.txt", cwd=tmp_path, env=env, effect_key="call-1"),
        )
        assert one.id == two.id
        assert first.start_command is not None and len(first.tasks_of(sid)) == 1
        started = await first.start_command(sid, "echo once >> ran.txt", cwd=tmp_path, env=env, effect_key="call-1")
        assert started.id == one.id  # a duplicate delivery on the same worker
        async with asyncio.timeout(20):
            while (first.get(one.id) or one).status == "running":  # noqa: ASYNC110 (polls the row)
                await asyncio.sleep(0.05)
        assert b.db is not a.db
    assert (tmp_path / "ran.txt").read_text() == "once\n"


async def test_a_worker_never_judges_a_task_another_process_owns(records: Records, tmp_path: Path) -> None:
    """A task of another host, or of a live process here, stays as it is; a gone owner's is taken over."""
    db = records.open()
    db.ensure("tasks", tasks.MIGRATIONS)
    row = (
        "INSERT INTO tasks_tasks (id, session, kind, title, status, started, pid, pid_start, owner) "
        "VALUES (?, 's', 'command', 'x', 'running', 0, ?, '', ?)"
    )
    import os

    here = socket.gethostname()
    db.write(row, ("t-remote", os.getpid(), "another-host.example/1/1"))
    db.write(row, ("t-live", os.getpid(), f"{here}/{os.getpid()}/"))  # this test process: alive
    db.write(row, ("t-gone", 2**22 + 7, f"{here}/{2**22 + 7}/1"))  # no such pid: its worker died
    manager = TaskManager(poll_s=0.05)
    async with _runtime(tmp_path, records.open(), [manager]) as rt:
        await manager.ready()
        states = dict(rt.db.read("SELECT id, status FROM tasks_tasks"))
        owners = dict(rt.db.read("SELECT id, owner FROM tasks_tasks"))
    assert states["t-remote"] == "running" and owners["t-remote"] == "another-host.example/1/1"
    assert states["t-live"] == "running"
    assert states["t-gone"] == "failed" and owners["t-gone"].startswith(f"{here}/")


async def test_timers_and_watches_survive_a_restart_on_another_connection_and_a_timer_fires_once(
    records: Records, tmp_path: Path
) -> None:
    from datetime import UTC, datetime, timedelta

    from kairos.runtime import FileWatch, SqliteBus, Timers
    from kairos.testing.clock import ManualClock

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    clock = ManualClock(t0)
    first, watcher = Timers(now=clock.now, sleep=clock.sleep), FileWatch()
    (tmp_path / "src").mkdir()
    async with _runtime(tmp_path, records.open(), [first, watcher]) as rt:
        await first.wait_ready()
        sid = rt.create_session()
        timer = first.add(sid, "call back", after_s=60)
        watched = watcher.add(sid, tmp_path / "src", tmp_path)
    later = ManualClock(t0 + timedelta(hours=1))
    second, watcher2 = Timers(now=later.now, sleep=later.sleep), FileWatch()
    async with _runtime(tmp_path, records.open(), [second, watcher2]) as rt:
        await second.wait_ready()
        assert isinstance(rt.bus, SqliteBus)
        async with asyncio.timeout(20):
            while second.list(sid):  # noqa: ASYNC110 (a once-timer is deleted when it fired)
                await asyncio.sleep(0.02)
        fires = [e for e in rt.bus.history(sid, 0) if e.type == "event.accepted" and e.data["type"] == "timer.trigger"]
        assert [f.data["source"]["timer_id"] for f in fires] == [timer.id]
        assert [w.id for w in watcher2.list(sid)] == [watched.id]


async def test_another_worker_sees_a_tasks_output_and_cancels_it_through_the_records(
    records: Records, tmp_path: Path
) -> None:
    """The session's turn may run on another worker than its task: task_status and cancel_task work there."""
    owner, other = TaskManager(poll_s=0.05), TaskManager(poll_s=0.05, kill_grace_s=1)
    async with _runtime(tmp_path / "a", records.open(), [owner]) as a, \
            _runtime(tmp_path / "b", records.open(), [other]) as b:  # fmt: skip
        await owner.ready()
        await other.ready()
        sid = a.create_session()
        cmd = "i=0; while true; do i=$((i+1)); echo line-$i; sleep 0.1; done"
        task = await owner.start_command(sid, cmd, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})

        def shared() -> str:
            return str(b.db.read("SELECT shared_tail FROM tasks_tasks WHERE id = ?", (task.id,))[0][0])

        async with asyncio.timeout(20):
            while "line-3" not in shared():  # noqa: ASYNC110 (the owner copies its output's end to the row)
                await asyncio.sleep(0.05)
        stopped = await other.cancel(task.id)
        assert stopped.status == "cancelled"
        assert owner.get(task.id) == stopped  # one record, stopped by its owner
        log = Path(task.output)
        await asyncio.to_thread(log.rename, log.with_suffix(".moved"))  # as on another host: no log here
        assert other.tail(task.id) == shared() and "line-" in shared()
