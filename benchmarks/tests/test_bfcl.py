"""The ``bfcl`` bench's scoring, parsing and data plumbing on hand-made cases (no model runs here)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kairos.testing import ScriptedModel, call, reply
from kairos_bench import bfcl
from kairos_bench._bfcl_score import CATEGORIES, parse_calls, score, standardize

AREA = {
    "name": "geometry.area",
    "description": "Area of a shape.",
    "parameters": {
        "type": "dict",
        "properties": {
            "shape": {"type": "string", "description": "circle or square"},
            "size": {"type": "float", "description": "radius or side"},
            "unit": {"type": "string", "description": "unit, default cm"},
            "tags": {"type": "array", "items": {"type": "integer"}, "description": "ids"},
            "opts": {"type": "dict", "properties": {"round": {"type": "boolean"}}, "description": "options"},
        },
        "required": ["shape", "size"],
    },
}
WEATHER = {
    "name": "weather",
    "description": "Weather in a city.",
    "parameters": {"type": "dict", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
AREA_ANSWER: dict[str, Any] = {
    "geometry.area": {"shape": ["circle"], "size": [2.0], "unit": ["cm", ""], "tags": [[1, 2], ""], "opts": [""]}
}


def area(**args: Any) -> tuple[str, dict[str, Any]]:
    return ("geometry.area", args)


@pytest.mark.parametrize(
    ("calls", "ok"),
    [
        ([area(shape="circle", size=2.0)], True),
        ([area(shape="Circle ", size=2)], True),  # case and spaces ignored; an int is a float
        ([area(shape="circle", size=2.0, unit="CM", tags=[1, 2])], True),
        ([area(shape="circle")], False),  # a required parameter missing
        ([area(shape="square", size=2.0)], False),  # a wrong value
        ([area(shape="circle", size="2")], False),  # a wrong type
        ([area(shape="circle", size=2.0, colour="red")], False),  # a parameter the function lacks
        ([area(shape="circle", size=2.0, tags=[2, 1])], False),  # list order matters
        ([area(shape="circle", size=2.0, opts={"round": True})], False),  # not among the answers
        ([("geometry_area", {"shape": "circle", "size": 2.0})], False),  # a renamed function
        ([area(shape="circle", size=2.0), area(shape="circle", size=2.0)], False),  # an extra call
        ([], False),  # no call
    ],
)
def test_simple_scoring(calls: list[tuple[str, dict[str, Any]]], ok: bool) -> None:
    verdict = score("simple", [AREA], calls, [AREA_ANSWER])
    assert verdict.ok is ok, verdict.reason
    assert ok or verdict.reason


def test_optional_parameter_left_out_only_when_the_answer_allows_it() -> None:
    answer = {"geometry.area": {"shape": ["circle"], "size": [2.0], "unit": ["cm"]}}
    assert not score("simple", [AREA], [area(shape="circle", size=2.0)], [answer]).ok
    assert score("simple", [AREA], [area(shape="circle", size=2.0, unit="cm")], [answer]).ok


def test_multiple_picks_the_right_function() -> None:
    answers = [{"weather": {"city": ["Paris"]}}]
    assert score("multiple", [AREA, WEATHER], [("weather", {"city": "paris"})], answers).ok
    assert not score("multiple", [AREA, WEATHER], [area(shape="circle", size=2.0)], answers).ok


def test_parallel_is_order_free_and_counts_calls() -> None:
    answers = [{"weather": {"city": ["Paris"]}}, {"weather": {"city": ["Rome"]}}]
    rome, paris = ("weather", {"city": "Rome"}), ("weather", {"city": "Paris"})
    assert score("parallel", [WEATHER], [rome, paris], answers).ok
    assert not score("parallel", [WEATHER], [paris], answers).ok  # one call short
    assert not score("parallel", [WEATHER], [paris, paris], answers).ok  # a call matched twice
    assert not score("parallel", [WEATHER], [rome, paris, paris], answers).ok  # an extra call
    mixed = [{"weather": {"city": ["Rome"]}}, AREA_ANSWER]
    assert score("parallel_multiple", [AREA, WEATHER], [area(shape="circle", size=2.0), rome], mixed).ok


def test_irrelevance_is_correct_only_without_a_call() -> None:
    assert score("irrelevance", [WEATHER], [], None).ok
    verdict = score("irrelevance", [WEATHER], [("weather", {"city": "x"})], None)
    assert not verdict.ok and "weather" in verdict.reason


def test_standardize_is_bfcls() -> None:
    assert standardize("April 1, 2024") == standardize("april 1 2024") == "april12024"
    assert standardize("New-York_City") == "newyorkcity"


def test_parse_calls_generously() -> None:
    tagged = (
        '<tool_call>\n{"name": "weather", "arguments": {"city": "Rome"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "weather", "arguments": "{\\"city\\": \\"Paris\\"}"}\n</tool_call>'
    )
    assert parse_calls(tagged) == [("weather", {"city": "Rome"}), ("weather", {"city": "Paris"})]
    fenced = 'Sure:\n```json\n{\n  "name": "weather",\n  "parameters": {"city": "Oslo"}\n}\n```\nDone.'
    assert parse_calls(fenced) == [("weather", {"city": "Oslo"})]
    listed = '[{"name": "a", "arguments": {}}, {"function": {"name": "b", "arguments": {"x": 1}}}]'
    assert parse_calls(listed) == [("a", {}), ("b", {"x": 1})]
    assert parse_calls("I cannot help with that; no tool fits {not json}.") == []
    assert parse_calls('<tool_call>{"name": "weather", "arguments": {"city": ') == []  # cut off


def test_json_schema_translates_bfcl_types() -> None:
    spec = bfcl.tool_specs([AREA])[0]
    props = spec.parameters["properties"]
    assert spec.name == "geometry.area" and spec.parameters["type"] == "object"
    assert props["size"]["type"] == "number" and props["tags"] == {
        "type": "array",
        "items": {"type": "integer"},
        "description": "ids",
    }
    assert props["opts"]["properties"]["round"]["type"] == "boolean"
    assert spec.parameters["required"] == ["shape", "size"]


def test_summary_lift_in_points() -> None:
    rows = [
        {"category": c, "way": w, "accuracy": a}
        for c, k, p in [("simple", 1.0, 0.9), ("multiple", 0.8, 0.8), ("parallel", 0.6, 0.0)]
        for w, a in (("kairos", k), ("plain", p))
    ]
    summary = bfcl.summarise(rows, ("simple", "multiple", "parallel"))
    assert summary["lift_overall"] == pytest.approx(100 * (0.1 + 0.0 + 0.6) / 3, abs=0.1)
    assert summary["no_category_below_plain"] is True and summary["parallel_plain"] == 0.0
    rows[0]["accuracy"] = 0.5  # simple: kairos below plain
    assert bfcl.summarise(rows, ("simple", "multiple", "parallel"))["no_category_below_plain"] is False
    rows += [{"category": c, "way": "kairos_gate", "accuracy": 1.0} for c in ("simple", "multiple", "parallel")]
    gated = bfcl.summarise(rows, ("simple", "multiple", "parallel"))
    assert gated["no_category_below_plain_gate"] is True and gated["simple_kairos_gate"] == 1.0
    assert gated["lift_overall_gate"] == pytest.approx(100 * (0.1 + 0.2 + 1.0) / 3, abs=0.1)


def test_the_gated_way_drops_the_calls_below_the_threshold() -> None:
    case = bfcl.Case("irrelevance_0", "irrelevance", [{"role": "user", "content": "hi"}], [WEATHER], None)
    console = Console(quiet=True)
    ways = {"kairos": lambda c: ([("weather", {"city": "Rome"})], "{}")}
    for p_call, ok in ((0.2, True), (0.9, False)):
        results = bfcl.evaluate(case, ways, console, gate=lambda c, p=p_call: p, threshold=0.5)  # type: ignore[misc]
        assert [r["way"] for r in results] == ["kairos", "kairos_gate"]
        assert results[0]["ok"] is False and results[1]["ok"] is ok and results[1]["p_call"] == p_call


def test_the_threshold_is_set_by_the_relevant_side() -> None:
    relevant = [(False, 0.5 + i / 200) for i in range(100)]  # 0.500 .. 0.995
    irrelevant = [(True, p) for p in (0.3, 0.45, 0.503, 0.6, 0.99)]
    threshold, blocked, lost = bfcl.best_threshold(relevant + irrelevant)
    assert threshold == 0.505 and lost == 0.01 and blocked == 0.6  # one relevant case (1 %) lost
    assert bfcl.best_threshold(relevant + irrelevant, max_loss=0.0) == (0.5, 0.4, 0.0)
    with pytest.raises(ValueError, match="both"):
        bfcl.best_threshold([(False, 0.5)])


async def test_kairos_way_reads_the_replys_calls() -> None:
    case = bfcl.Case(
        "t",
        "parallel",
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        [WEATHER],
        None,
    )
    model = ScriptedModel(
        [reply("", call("weather", {"city": "Rome"}), call("weather", {"city": "Paris"})), reply("no tool fits")]
    )
    calls, _ = await bfcl.kairos_way(model, case)
    assert calls == [("weather", {"city": "Rome"}), ("weather", {"city": "Paris"})]
    request = model.requests[0]
    assert request.system_static == "Be brief." and [m.role for m in request.messages] == ["user"]
    assert [t.name for t in request.tools] == ["weather"]
    assert (await bfcl.kairos_way(model, case))[0] == []


def test_cases_from_a_data_folder(tmp_path: Path) -> None:
    (tmp_path / "possible_answer").mkdir()
    rows = [
        {"id": f"parallel_{i}", "question": [[{"role": "user", "content": f"q{i}"}]], "function": [WEATHER]}
        for i in range(4)
    ]
    (tmp_path / "BFCL_v4_parallel.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    answers = [{"id": f"parallel_{i}", "ground_truth": [{"weather": {"city": ["x"]}}]} for i in range(4)]
    (tmp_path / "possible_answer" / "BFCL_v4_parallel.json").write_text("\n".join(json.dumps(a) for a in answers))
    cases = bfcl.load_cases("parallel", 2, tmp_path)
    assert [c.id for c in cases] == ["parallel_0", "parallel_1"]
    assert [c.id for c in bfcl.load_cases("parallel", 2, tmp_path, offset=2)] == ["parallel_2", "parallel_3"]
    assert cases[1].messages == [{"role": "user", "content": "q1"}] and cases[1].answers == answers[1]["ground_truth"]


def first(option: Any) -> Any:
    """A value from a possible answer: a dict's entries are lists of options themselves."""
    if isinstance(option, dict):
        return {k: v[0] for k, v in option.items() if v and v[0] != ""}
    if isinstance(option, list) and option and all(isinstance(o, dict) for o in option):
        return [first(o) for o in option]
    return option


@pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None, reason="bfcl-eval is not installed (make does it)")
def test_the_wheels_data_loads_and_every_answer_scores_itself() -> None:
    """Each category loads from the wheel, and a reply made of the first possible values is correct."""
    for category in CATEGORIES:
        cases = bfcl.load_cases(category, 30)
        assert len(cases) == 30
        for case in cases:
            if case.answers is None:
                assert category == "irrelevance"
                continue
            props = {f["name"]: f["parameters"]["properties"] for f in case.functions}
            calls = [  # (an answer may name a parameter its function lacks: parallel_multiple_26)
                (name, {k: first(v[0]) for k, v in params.items() if v and v[0] != "" and k in props[name]})
                for answer in case.answers
                for name, params in answer.items()
            ]
            verdict = score(category, case.functions, calls[::-1], case.answers)
            assert verdict.ok, (case.id, verdict.reason)


def test_rounds_run_case_k_of_every_category_and_stop_at_the_duration() -> None:
    weather = {"weather": {"city": ["Rome"]}}
    rounds = [
        [
            bfcl.Case(f"simple_{k}", "simple", [], [WEATHER], [weather]),
            bfcl.Case(f"irrelevance_{k}", "irrelevance", [], [WEATHER], None),
        ]
        for k in range(3)
    ]

    def always_call(case: bfcl.Case) -> tuple[list[tuple[str, dict[str, Any]]], str]:
        return [("weather", {"city": "rome"})], "raw"

    def never_call(case: bfcl.Case) -> tuple[list[tuple[str, dict[str, Any]]], str]:
        return [], "no tool fits"

    saved: list[int] = []
    ways: dict[str, bfcl.Way] = {"kairos": always_call, "plain": never_call}
    results, done = bfcl.run_rounds(rounds, ways, Console(quiet=True), None, lambda r: saved.append(len(r)))
    assert done == 3 and saved == [4, 8, 12]
    assert [r["id"] for r in results[:4]] == ["simple_0", "simple_0", "irrelevance_0", "irrelevance_0"]
    out = bfcl.report(results, done, "m", ("simple", "irrelevance"))
    assert out["summary"]["simple_kairos"] == 1.0 and out["summary"]["simple_plain"] == 0.0
    assert out["summary"]["irrelevance_kairos"] == 0.0 and out["summary"]["irrelevance_plain"] == 1.0
    assert out["summary"]["lift_overall"] == 0.0 and out["summary"]["no_category_below_plain"] is False
    assert out["summary"]["limit"] == 3 and {r["n"] for r in out["rows"]} == {3}
    assert len(out["failures"]) == 6
    _, done = bfcl.run_rounds(rounds, ways, Console(quiet=True), duration=0.0)
    assert done == 1  # the first round always runs; later ones only within the duration
