"""The deployment's leader lease on PostgreSQL (issue 26 §3): one holder at a time, taken over when it goes."""

from __future__ import annotations

import asyncio

import pytest

from kairos.runtime.leader import PgLeaderLease, lead

pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[scale]'")


def test_one_of_two_holders_wins_and_the_other_takes_over_when_it_lets_go(postgres_url: str) -> None:
    first, second = PgLeaderLease(postgres_url, "dep"), PgLeaderLease(postgres_url, "dep")
    other = PgLeaderLease(postgres_url, "another-deployment")
    try:
        assert first.try_acquire() and first.held
        assert not second.try_acquire() and not second.held
        assert first.try_acquire()  # still held: the check is idempotent
        assert other.try_acquire()  # another deployment has its own leader
        first.release()
        assert second.try_acquire()
        assert not first.try_acquire()
    finally:
        for lease in (first, second, other):
            lease.release()


def test_a_lost_connection_is_a_lost_lease(postgres_url: str) -> None:
    import psycopg

    first, second = PgLeaderLease(postgres_url, "dep"), PgLeaderLease(postgres_url, "dep")
    try:
        assert first.try_acquire()
        with psycopg.connect(postgres_url, autocommit=True) as admin:  # the server ends its connection
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'kairos leader%'"
            )
        assert not first.try_acquire()  # noticed: its components stop
        assert second.try_acquire()
    finally:
        first.release()
        second.release()


async def test_lead_starts_the_components_only_while_the_lease_is_held(postgres_url: str) -> None:
    first, second = PgLeaderLease(postgres_url, "dep"), PgLeaderLease(postgres_url, "dep")
    started: list[str] = []
    states: dict[str, bool] = {}
    second_started = asyncio.Event()

    def starter(name: str) -> list[asyncio.Task[None]]:
        started.append(name)
        if name == "two":
            second_started.set()
        return [asyncio.create_task(asyncio.sleep(3600))]

    one = asyncio.create_task(lead(first, lambda: starter("one"), 0.05, lambda held: states.__setitem__("one", held)))
    await asyncio.sleep(0.3)
    two = asyncio.create_task(lead(second, lambda: starter("two"), 0.05, lambda held: states.__setitem__("two", held)))
    await asyncio.sleep(0.3)
    assert started == ["one"] and states == {"one": True}
    one.cancel()  # the leader stops: its lease goes with it
    await asyncio.gather(one, return_exceptions=True)
    async with asyncio.timeout(5):
        await second_started.wait()
    assert started == ["one", "two"] and states == {"one": False, "two": True}
    two.cancel()
    await asyncio.gather(two, return_exceptions=True)
