"""How catalog tools are declared (a compact table) and the generic, deterministic backend behind them.

Each tool is one :class:`ToolDef`: a name, a description that says when to use it and what it
cannot do, parameters in a one-line-per-parameter mini language, and the fields its result has.
:func:`build_tool` turns a definition into a :class:`~kairos.tools.schema.SchemaTool` whose
arguments are checked with JSON Schema and whose handler returns seeded fake data: the same
arguments always give the same result, and nothing touches the network or the disk.

Parameter lines: ``name:type! description`` (required), ``name:type=default description``
(optional, with a default) or ``name:type description`` (optional). Types: ``str``, ``int``,
``num``, ``bool``, ``date`` (``YYYY-MM-DD``), ``list`` (array of strings) and ``enum(a,b,c)``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from kairos.tools.base import ToolContext
from kairos.tools.schema import SchemaTool

_PARAM = re.compile(r"^(?P<name>\w+):(?P<type>enum\([^)]*\)|\w+)(?P<flag>!|=[^ ]*)?\s+(?P<desc>.+)$")
_TYPES: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "num": {"type": "number"},
    "bool": {"type": "boolean"},
    "date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
    "list": {"type": "array", "items": {"type": "string"}},
}
BASE_DATE = date(2026, 1, 5)
"""Dates in fake data count from here (a fixed day: results never depend on the clock)."""


@dataclass(frozen=True, slots=True)
class Domain:
    """A group of tools served together (one MCP server), with a description used to find it."""

    name: str
    description: str
    tools: tuple[ToolDef, ...]


@dataclass(frozen=True, slots=True)
class ToolDef:
    """One catalog tool as data (see the module docstring for ``params``)."""

    name: str
    description: str
    params: tuple[str, ...] = ()
    returns: tuple[str, ...] = ()
    many: bool = False
    """It returns a paginated list of items (each with ``returns`` fields) rather than one record."""
    effect: bool = False
    """It changes something (sends, books, buys, writes): a side-effecting tool."""


def parse_params(lines: tuple[str, ...]) -> dict[str, Any]:
    """The JSON Schema of a tool's parameter lines.

    Raises:
        ValueError: a line does not follow the mini language (a bug in the table, found at import in tests).
    """
    props: dict[str, Any] = {}
    required: list[str] = []
    for line in lines:
        m = _PARAM.match(line)
        if m is None:
            raise ValueError(f"bad parameter line {line!r}")
        kind, flag = m["type"], m["flag"] or ""
        if kind.startswith("enum("):
            schema: dict[str, Any] = {"type": "string", "enum": [v.strip() for v in kind[5:-1].split(",")]}
        elif kind in _TYPES:
            schema = dict(_TYPES[kind])
        else:
            raise ValueError(f"unknown type {kind!r} in {line!r}")
        schema["description"] = m["desc"]
        if flag == "!":
            required.append(m["name"])
        elif flag.startswith("="):
            schema["default"] = _default(schema, flag[1:])
        props[m["name"]] = schema
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    return out


def _default(schema: dict[str, Any], raw: str) -> Any:
    kind = schema["type"]
    if kind == "integer":
        return int(raw)
    if kind == "number":
        return float(raw)
    if kind == "boolean":
        return raw == "true"
    return "" if raw in ("''", '""') else raw


def _seed(name: str, arguments: dict[str, Any]) -> int:
    digest = hashlib.sha256(f"{name}\0{json.dumps(arguments, sort_keys=True)}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def fake_value(fieldname: str, rng: random.Random, arguments: dict[str, Any]) -> Any:
    """A plausible value for a result field, chosen by its name (deterministic for ``rng``)."""
    f = fieldname.lower()
    if f in arguments:
        return arguments[f]
    if f.endswith("_id") or f == "id":
        return f"{f.removesuffix('_id') or 'id'}-{rng.randrange(16**6):06x}"
    if f.endswith(("date", "_at", "_on", "time", "start", "end", "due")):
        return (BASE_DATE + timedelta(days=rng.randrange(0, 120))).isoformat()
    if f.endswith(("_pct", "rate", "ratio", "score", "probability")):
        return round(rng.uniform(-5, 5) if f.endswith("_pct") else rng.uniform(0, 1), 3)
    if any(k in f for k in ("price", "amount", "cost", "total", "balance", "value", "fare", "salary")):
        return round(rng.uniform(5, 2000), 2)
    if any(k in f for k in ("count", "number", "volume", "stars", "minutes", "steps", "calories", "size", "seats")):
        return rng.randrange(1, 5000)
    if any(k in f for k in ("temp", "celsius")):
        return round(rng.uniform(-10, 35), 1)
    if any(k in f for k in ("lat", "lon", "km", "distance", "duration", "hours", "elevation")):
        return round(rng.uniform(0, 90), 4)
    if f.startswith(("is_", "has_")) or f in ("available", "ok", "open", "passed"):
        return rng.random() < 0.7
    if f in ("currency",):
        return rng.choice(["USD", "EUR", "GBP", "JPY"])
    if f in ("status", "state"):
        return rng.choice(["ok", "pending", "active", "done"])
    if f in ("url", "link", "download_url"):
        return f"https://example.invalid/{rng.randrange(16**8):08x}"
    if f in ("tags", "authors", "genres", "attendees", "labels"):
        return [f"{f[:-1]}-{rng.randrange(100)}" for _ in range(rng.randrange(1, 4))]
    return f"{f.replace('_', ' ')} {rng.randrange(1000)}"


def make_result(d: ToolDef, arguments: dict[str, Any]) -> dict[str, Any]:
    """The deterministic result of calling ``d`` with (already validated) ``arguments``."""
    rng = random.Random(_seed(d.name, arguments))
    out: dict[str, Any] = {"tool": d.name, "arguments": arguments, "backend": "local deterministic fake data"}
    if d.effect:
        out["status"] = "done"
        out["confirmation_id"] = f"conf-{rng.randrange(16**8):08x}"
    if d.many:
        limit = arguments.get("limit", 5)
        limit = max(1, min(int(limit), 20)) if isinstance(limit, int) else 5
        page = arguments.get("page", 1)
        total = rng.randrange(limit, limit * 4 + 1)
        out["items"] = [{f: fake_value(f, rng, arguments) for f in d.returns} for _ in range(limit)]
        out["page"] = page
        out["total"] = total
        out["next_page"] = page + 1 if page * limit < total else None
    else:
        out.update({f: fake_value(f, rng, arguments) for f in d.returns})
    return out


def build_tool(d: ToolDef) -> SchemaTool:
    """``d`` as a kairos tool (JSON Schema validated, seeded fake backend)."""

    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return make_result(d, arguments)

    return SchemaTool(
        name=d.name,
        description=d.description,
        parameters=parse_params(d.params),
        handler=handler,
        timeout_s=10.0,
        read_only=not d.effect,
        side_effects=d.effect,
    )
