"""The runtime's records on each backend, for the conformance suite: ``sqlite`` and ``postgresql``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kairos.runtime.db import RecordDB, open_records


@dataclass
class Records:
    """Opens connections to one backend's records (each one a "worker"); closes them all at the end."""

    name: str
    target: str
    """``embedded`` or the PostgreSQL URL (:func:`open_records`)."""
    state_dir: Path
    opened: list[RecordDB] = field(default_factory=list)

    def open(self) -> RecordDB:
        db = open_records(self.target, self.state_dir)
        self.opened.append(db)
        return db


@pytest.fixture(name="records", params=["sqlite", "postgresql"])
def records_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Records]:
    target = "embedded" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    records = Records(request.param, target, tmp_path / ".kairos")
    try:
        yield records
    finally:
        for db in records.opened:
            db.close()
