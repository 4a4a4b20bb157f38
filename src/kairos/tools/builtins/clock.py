"""The ``current_time`` tool.

Tests and evaluations can freeze time by putting a zero-argument callable that returns an aware
:class:`~datetime.datetime` under :data:`CLOCK_RESOURCE`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from kairos.tools.base import Resource, ToolContext, ToolResult
from kairos.tools.function import tool

CLOCK_RESOURCE: Resource[Callable[[], datetime]] = Resource("clock")
"""An optional ``() -> datetime`` clock (tests and benches fix the time with it)."""


def system_now() -> datetime:
    """The current time in UTC (the default clock when ``ToolContext`` has none)."""
    return datetime.now(UTC)


@cache
def _zones_by_lower() -> dict[str, str]:
    return {z.lower(): z for z in available_timezones()}


def _find_zone(name: str) -> tzinfo | None:
    key = name.strip()
    if key.upper() in ("UTC", "Z"):
        return UTC
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        pass
    real = _zones_by_lower().get(key.lower())  # the model wrote "europe/berlin"
    if real is None:  # the model wrote a city: "Tokyo", "new york" -> the one zone named after it
        by_city = _by_city(key)
        real = by_city[0] if len(by_city) == 1 else None
    return ZoneInfo(real) if real else None


def _by_city(name: str) -> list[str]:
    key = "/" + name.strip().lower().replace(" ", "_")
    return sorted(z for low, z in _zones_by_lower().items() if low.endswith(key) and not low.startswith("etc/"))


def _suggestions(name: str) -> list[str]:
    lowered = _zones_by_lower()
    key = name.strip().lower().replace(" ", "_")
    close = [lowered[m] for m in difflib.get_close_matches(key, list(lowered), n=3, cutoff=0.7)]
    return list(dict.fromkeys(_by_city(name) + close))[:3]


@tool(read_only=True)
def current_time(timezone: str = "UTC", *, ctx: ToolContext) -> ToolResult:
    """Get the current date and time (ISO 8601), weekday and UTC offset in a time zone.
    Use it whenever you need today's date or the time; do not guess it.

    Args:
        timezone: IANA time zone name, e.g. "UTC", "Europe/Berlin", "America/Vancouver" (a city alone such as
            "Tokyo" works when one zone is named after it).
    """
    zone = _find_zone(timezone)
    if zone is None:
        hint = ""
        if found := _suggestions(timezone):
            hint = " Did you mean " + " or ".join(repr(z) for z in found) + "?"
        return ToolResult(
            f"Unknown time zone {timezone!r}.{hint} Use an IANA name such as 'Europe/Berlin', "
            "'America/Vancouver', 'Asia/Tokyo' or 'UTC'.",
            is_error=True,
        )
    clock = ctx.get(CLOCK_RESOURCE) or system_now
    now = clock()
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    local = now.astimezone(zone).replace(microsecond=0)
    z = local.strftime("%z") or "+0000"
    offset = f"{z[:3]}:{z[3:5]}"
    label = str(zone) if isinstance(zone, ZoneInfo) else "UTC"
    abbrev = local.tzname() or ""
    extra = f"{abbrev}, " if abbrev and abbrev not in ("UTC", label) and abbrev[0] not in "+-" else ""
    return ToolResult(f"{local.isoformat()} ({local:%A}) in {label}, {extra}UTC offset {offset}")
