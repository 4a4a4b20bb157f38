"""The tool catalog: 120+ tools in 15 domains, schema-checked arguments, deterministic structured results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from kairos.catalog import ToolDef, catalog_domains, catalog_tools, catalog_toolsets, domain_of, parse_params
from kairos.tools.base import InvalidArguments, ToolContext
from kairos.tools.builtins import default_tools


def test_the_catalog_has_120_plus_unique_tools_in_15_domains() -> None:
    tools = catalog_tools()
    names = [t.name for t in tools]
    assert len(tools) >= 120
    assert len(set(names)) == len(names)
    assert len(catalog_domains()) >= 15
    assert not set(names) & {t.name for t in default_tools()}  # never shadows a built-in tool


def test_every_tool_has_a_real_description_and_a_valid_schema() -> None:
    for t in catalog_tools():
        spec = t.spec
        assert len(spec.description) >= 40, spec.name
        Draft202012Validator.check_schema(spec.parameters)
        for name, prop in spec.parameters["properties"].items():
            assert prop.get("description"), f"{spec.name}.{name} has no description"


def test_toolsets_are_one_factory_per_domain() -> None:
    sets = catalog_toolsets()
    assert set(sets) == {f"catalog-{d.name}" for d in catalog_domains()}
    weather = sets["catalog-weather"]()
    assert "get_weather_forecast" in {t.name for t in weather}
    assert all(domain_of(t.name) == "weather" for t in weather)
    with pytest.raises(KeyError, match="no catalog domain"):
        catalog_tools("nope")


def by_name(name: str):  # type: ignore[no-untyped-def]
    return next(t for t in catalog_tools() if t.name == name)


async def test_results_are_structured_deterministic_and_paginated(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path)
    quote = by_name("get_stock_quote")
    a = json.loads((await quote.call({"symbol": "AAPL"}, ctx)).content)
    b = json.loads((await quote.call({"symbol": "AAPL"}, ctx)).content)
    c = json.loads((await quote.call({"symbol": "MSFT"}, ctx)).content)
    assert a == b and a != c
    assert a["arguments"] == {"symbol": "AAPL"} and isinstance(a["price"], float)
    page = json.loads((await by_name("search_web").call({"query": "x", "limit": 2, "page": 1}, ctx)).content)
    assert len(page["items"]) == 2 and page["page"] == 1 and "next_page" in page and page["total"] >= 2
    booked = json.loads((await by_name("book_flight").call({"flight_id": "f-1"}, ctx)).content)
    assert booked["status"] == "done" and booked["confirmation_id"].startswith("conf-")
    assert by_name("book_flight").side_effects and by_name("get_stock_quote").read_only


@pytest.mark.parametrize(
    ("name", "args", "why"),
    [
        ("get_stock_quote", {}, "'symbol' is a required property"),
        ("get_stock_quote", {"symbol": 5}, "is not of type 'string'"),
        ("get_stock_quote", {"symbol": "A", "extra": 1}, "Additional properties"),
        ("place_stock_order", {"symbol": "A", "side": "hold", "quantity": 1}, "is not one of"),
        ("create_calendar_event", {"title": "x", "date": "tomorrow", "start_time": "10:00"}, "does not match"),
    ],
)
def test_bad_arguments_are_clear_errors(name: str, args: dict[str, object], why: str) -> None:
    with pytest.raises(InvalidArguments, match="Expected JSON schema") as e:
        by_name(name).validate(args)
    assert why in str(e.value)


def test_a_bad_parameter_line_is_refused() -> None:
    with pytest.raises(ValueError, match="bad parameter line"):
        parse_params(("no type here",))
    with pytest.raises(ValueError, match="unknown type"):
        parse_params(("x:float! a number",))
    schema = parse_params(("a:int=3 count", "b:str='' text", "c:enum(x,y)! pick"))
    assert schema["properties"]["a"]["default"] == 3 and schema["properties"]["b"]["default"] == ""
    assert schema["required"] == ["c"]
    assert ToolDef("t", "d").params == ()
