"""The ``current_time`` tool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kairos.tools.base import ToolContext, ToolResult
from kairos.tools.builtins.clock import CLOCK_RESOURCE, current_time

FROZEN = datetime(2024, 3, 31, 0, 30, 15, 123456, tzinfo=UTC)  # a Sunday; Berlin switched to CEST at 01:00 UTC


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[ToolContext]:
    c = ToolContext(workspace=tmp_path, resources={CLOCK_RESOURCE: lambda: FROZEN})
    yield c
    await c.aclose()


async def now(ctx: ToolContext, **args: Any) -> ToolResult:
    result: ToolResult = await current_time.call(args, ctx)
    return result


async def test_defaults_to_utc(ctx: ToolContext) -> None:
    r = await now(ctx)
    assert not r.is_error
    assert r.content == "2024-03-31T00:30:15+00:00 (Sunday) in UTC, UTC offset +00:00"


async def test_named_zone_gives_local_time_weekday_and_offset(ctx: ToolContext) -> None:
    r = await now(ctx, timezone="Europe/Berlin")
    assert r.content == "2024-03-31T01:30:15+01:00 (Sunday) in Europe/Berlin, CET, UTC offset +01:00"
    r = await now(ctx, timezone="America/Vancouver")
    assert r.content == "2024-03-30T17:30:15-07:00 (Saturday) in America/Vancouver, PDT, UTC offset -07:00"


async def test_zone_names_are_matched_case_insensitively(ctx: ToolContext) -> None:
    r = await now(ctx, timezone="asia/tokyo")
    assert r.content.startswith("2024-03-31T09:30:15+09:00 (Sunday) in Asia/Tokyo")


async def test_unknown_zone_is_an_error_with_examples(ctx: ToolContext) -> None:
    r = await now(ctx, timezone="Mars/Olympus")
    assert r.is_error
    assert "Unknown time zone 'Mars/Olympus'" in r.content
    assert "Europe/Berlin" in r.content and "America/Vancouver" in r.content


@pytest.mark.parametrize("bad", ["", "../etc/passwd", "/etc/localtime", "Europe"])
async def test_malformed_zone_keys_are_errors_not_exceptions(ctx: ToolContext, bad: str) -> None:
    assert (await now(ctx, timezone=bad)).is_error


async def test_a_bare_city_resolves_to_the_one_zone_named_after_it(ctx: ToolContext) -> None:
    r = await now(ctx, timezone="vancouver")
    assert not r.is_error and r.content.endswith("in America/Vancouver, PDT, UTC offset -07:00")
    assert (await now(ctx, timezone="New York")).content.startswith("2024-03-30T20:30:15-04:00")


async def test_an_ambiguous_city_gets_suggestions(ctx: ToolContext) -> None:
    r = await now(ctx, timezone="Louisville")  # America/Louisville and America/Kentucky/Louisville
    assert r.is_error
    assert "Did you mean 'America/Kentucky/Louisville' or 'America/Louisville'" in r.content


async def test_naive_clock_is_taken_as_utc(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path, resources={CLOCK_RESOURCE: lambda: datetime(2025, 1, 1, 12)})
    assert (await now(ctx)).content.startswith("2025-01-01T12:00:00+00:00 (Wednesday)")


async def test_without_an_injected_clock_it_reads_the_system_clock(tmp_path: Path) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    r = await now(ToolContext(workspace=tmp_path))
    shown = datetime.fromisoformat(r.content.split(" ", 1)[0])
    assert before <= shown <= datetime.now(UTC)


def test_schema_exposes_only_the_timezone() -> None:
    params = current_time.spec.parameters
    assert list(params["properties"]) == ["timezone"]
    assert params["properties"]["timezone"]["default"] == "UTC"
    assert "required" not in params
