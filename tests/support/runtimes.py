"""A runtime that is not the deployment's leader, beside one that is (two workers on one store, in one process)."""

from __future__ import annotations

from pathlib import Path

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.runtime import Component, Runtime, RuntimeDB, SqliteBus
from kairos.testing import ScriptedModel, reply


class NeverLeader:
    """A leader lease another process holds: the runtime never runs the leader's components."""

    def try_acquire(self) -> bool:
        return False

    def release(self) -> None:
        pass


def follower(workspace: Path, component: Component) -> Runtime:
    """A runtime on ``workspace``'s store that never leads: ``component`` is found by its tools, never run.

    Its bus is its own (``follower-bus.db``): two SQLite buses on one table would reuse each other's
    cursors, where NATS gives every publisher its own sequence.
    """
    return Runtime(
        Agent(ScriptedModel([reply("ok")] * 20)), SessionStore(workspace), components=[component],
        leader=NeverLeader(), leader_retry_s=3600, bus=SqliteBus(RuntimeDB(workspace / "follower-bus.db")),
    )  # fmt: skip
