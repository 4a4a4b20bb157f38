"""A task's record: the ``tasks_tasks`` table in the runtime's database and the row it reads as.

Apart from :mod:`kairos.runtime.integrations.tasks` (the component that runs tasks) so that the schema
and the row type can be read without the process handling.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from kairos.storage import Migration

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks_tasks (
    id TEXT PRIMARY KEY, session TEXT NOT NULL, kind TEXT NOT NULL, title TEXT NOT NULL,
    command TEXT NOT NULL DEFAULT '', pattern TEXT NOT NULL DEFAULT '', effect_key TEXT,
    pid INTEGER, pgid INTEGER, pid_start TEXT NOT NULL DEFAULT '', status TEXT NOT NULL,
    exit_code INTEGER, started REAL NOT NULL, ended REAL, output TEXT NOT NULL DEFAULT '',
    progress TEXT NOT NULL DEFAULT '', note TEXT NOT NULL DEFAULT '',
    log_offset INTEGER NOT NULL DEFAULT 0, matches INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS tasks_tasks_session ON tasks_tasks (session, started);
CREATE UNIQUE INDEX IF NOT EXISTS tasks_tasks_effect ON tasks_tasks (effect_key) WHERE effect_key IS NOT NULL;
"""
MIGRATIONS: tuple[Migration, ...] = (
    SCHEMA,
    "ALTER TABLE tasks_tasks ADD COLUMN owner TEXT NOT NULL DEFAULT ''",  # 2: the runtime process that runs it
    "ALTER TABLE tasks_tasks ADD COLUMN shared_tail TEXT NOT NULL DEFAULT ''",  # 3: its output's end, for other hosts
    "ALTER TABLE tasks_tasks ADD COLUMN cancel_asked REAL",  # 4: another worker asked its owner to cancel it
)
"""The ``tasks`` tables' versions in ``runtime.db``; 1 is the schema from before versions (kairos.storage)."""
COLUMNS = "id, session, kind, title, command, pattern, pid, status, exit_code, started, ended, output, progress, note"
PERCENT = re.compile(r"(\d{1,3}(?:\.\d+)?)\s*%")
ENDED = ("done", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """One task as stored: ``status`` is running, done, failed or cancelled."""

    id: str
    session: str
    kind: str
    """``command``, ``monitor`` or ``coroutine``."""
    title: str
    command: str
    pattern: str
    pid: int | None
    status: str
    exit_code: int | None
    started: float
    ended: float | None
    output: str
    """The log file ('' for a coroutine)."""
    progress: str
    note: str

    @property
    def percent(self) -> float | None:
        """The progress as a number, when the task printed a percentage."""
        m = PERCENT.fullmatch(self.progress.strip())
        return float(m.group(1)) if m else None

    def line(self, now: float | None = None) -> str:
        """``t-1a2b (build): running for 12 s, progress 42%``."""
        end = self.ended if self.ended is not None else (now or time.time())
        state = f"{self.status} for {end - self.started:.0f} s" if self.status == "running" else self.status
        if self.status != "running":
            state += f" after {end - self.started:.0f} s"
        if self.exit_code is not None:
            state += f", exit code {self.exit_code}"
        if self.progress:
            state += f", progress {self.progress}"
        if self.note:
            state += f" ({self.note})"
        return f"{self.id} ({self.title}): {state}"
