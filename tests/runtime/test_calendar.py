"""The calendar service: conflicts, idempotent adds, bad input as clear tool errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.runtime import RUNTIME_RESOURCE, Runtime, RuntimeHandle
from kairos.runtime.db import RuntimeDB
from kairos.runtime.integrations.calendar import Calendar, CalendarError, add_calendar_event, check_calendar, parse_time
from kairos.runtime.integrations.mail import IDEMPOTENCY_RESOURCE
from kairos.testing import ScriptedModel
from kairos.tools.base import ToolContext


def test_overlaps_are_found_across_time_zones(tmp_path: Path) -> None:
    cal = Calendar(RuntimeDB(tmp_path / "runtime.db"))
    cal.add("Standup", "2026-12-01T09:00", "2026-12-01T09:15")
    assert [e.title for e in cal.overlapping("2026-12-01T10:05+01:00", "2026-12-01T10:30+01:00")] == ["Standup"]
    assert cal.overlapping("2026-12-01T09:15", "2026-12-01T10:00") == []  # touching is not overlapping
    assert parse_time("2026-12-01T09:00") == "2026-12-01T09:00:00+00:00"
    with pytest.raises(CalendarError, match="must be after"):
        cal.overlapping("2026-12-01T10:00", "2026-12-01T09:00")


async def test_the_tools_check_add_once_and_explain_bad_input(tmp_path: Path) -> None:
    async with Runtime(Agent(ScriptedModel([])), SessionStore(tmp_path)) as rt:
        ctx = ToolContext(tmp_path, resources={RUNTIME_RESOURCE: RuntimeHandle(rt, "s"), IDEMPOTENCY_RESOURCE: "k"})
        args = {"start": "2026-12-02T14:00", "end": "2026-12-02T15:00"}
        assert (await check_calendar.call(args, ctx)).content.startswith("free")
        first = await add_calendar_event.call({"title": "Q1 planning", **args}, ctx)
        again = await add_calendar_event.call({"title": "Q1 planning", **args}, ctx)
        assert first.content.startswith("added") and again.content.startswith("already added")
        found = await check_calendar.call(args, ctx)
        assert found.content.startswith("conflicts") and found.content.count("Q1 planning") == 1
        bad = await check_calendar.call({"start": "tomorrow", "end": "later"}, ctx)
        assert bad.is_error and "ISO 8601" in bad.content
    missing = await check_calendar.call(args, ToolContext(tmp_path))
    assert missing.is_error and "needs the runtime" in missing.content
