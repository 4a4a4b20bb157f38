"""The ``fast-slow`` bench's plumbing and scoring on scripted doubles (the real run uses the bundled models)."""

from __future__ import annotations

import io
from datetime import date

import pytest
from rich.console import Console

from kairos.testing import ScriptedModel, reply
from kairos_bench import FAST_SLOW
from kairos_bench import fast_slow as bench

QUIET = Console(file=io.StringIO())
DAY = date(2026, 12, 5)


def case(case_id: str) -> bench.Case:
    return next(c for c in bench.cases(DAY) if c.id == case_id)


def test_the_scripted_run_writes_rows_and_summary_per_mode() -> None:
    out = bench.run(console=QUIET, no_model=True, today=DAY)
    assert set(out) == {"bench", "params", "rows", "summary"} and out["bench"] == "fast-slow"
    assert out["params"]["scripted"] and out["params"]["questions"] == 12
    assert len(out["rows"]) == 12 * 3
    s = out["summary"]
    for key in ("first_response_p50_ms", "final_accuracy", "contradiction_rate"):
        assert set(s[key]) == {"single", "plan1", "plan2"}
    # the doubles are right once they checked: every mode ends right; only Plan 1 says X then not-X
    assert s["final_accuracy"] == {"single": 1.0, "plan1": 1.0, "plan2": 1.0}
    assert s["contradiction_rate"]["plan2"] == 0.0 and s["contradiction_rate"]["single"] == 0.0
    assert s["contradiction_rate"]["plan1"] > 0.5
    easy = [r for r in out["rows"] if r["id"] == "easy-capital"]
    assert all(r["correct"] and not r["contradiction"] for r in easy)
    plan2_easy = next(r for r in easy if r["mode"] == "plan2")
    assert plan2_easy["said"] == ["Paris."] and plan2_easy["silent_replies"] == 1  # NO_UPDATE was not said


def test_limit_modes_and_the_registration() -> None:
    out = bench.run(console=QUIET, model="scripted", modes="plan2", limit=1, today=DAY)
    assert [r["category"] for r in out["rows"]] == ["arithmetic", "lookup", "date", "easy"]
    assert {r["mode"] for r in out["rows"]} == {"plan2"}
    with pytest.raises(ValueError, match="unknown modes"):
        bench.run(console=QUIET, no_model=True, modes="plan3")
    assert FAST_SLOW.module == "fast_slow" and "no_model" in FAST_SLOW.options and FAST_SLOW.takes_limit


def test_a_given_model_object_is_used_for_both_sides() -> None:
    model = ScriptedModel([reply("Paris.")] * 4)
    out = bench.run(console=QUIET, model=model, modes="single", limit=1, today=DAY)
    easy = next(r for r in out["rows"] if r["id"] == "easy-capital")
    assert easy["said"] == ["Paris."] and out["params"]["shared_model"]


def test_holds_needs_the_number_to_stand_alone() -> None:
    c = case("sum-div")
    assert bench.holds("It is 1,929.", c) and bench.holds("123456 / 64 = 1929", c)
    assert not bench.holds("It is 19290.", c) and not bench.holds("It is 1929.5", c)
    assert bench.holds("Today is December 5th, 2026.", case("date-today"))
    assert bench.holds("It's 2026-12-05.", case("date-today")) and not bench.holds("June 14", case("date-today"))


def test_contradiction_is_x_then_not_x_without_an_acknowledgement() -> None:
    c = case("sum-mul")
    assert bench.contradiction(["It is 1,400,000.", "It is 1,411,381."], c)
    assert not bench.contradiction(["It is 1,400,000.", "Correction: I said 1,400,000; it is 1,411,381."], c)
    assert not bench.contradiction(["Let me check.", "It is 1,411,381."], c)
    assert bench.contradiction(["It is 1,411,381.", "It is 1,400,000."], c)
    assert not bench.contradiction(["It is 1,411,381."], c)


def test_the_tools() -> None:
    assert bench.calculate_expression("4817 x 293") == "1411381" and bench.calculate_expression("123456/64") == "1929"
    assert bench.calculate_expression("7^9") == "40353607"
    with pytest.raises(ValueError):
        bench.calculate_expression("__import__('os')")
    facts = {"Falcon plan price": "$37", "Eagle plan price": "$59"}
    assert bench.lookup_fact("falcon plan", facts) == "Falcon plan price: $37"
    assert "nothing found" in bench.lookup_fact("weather", facts)
    assert bench.lookup_fact("plans and prices", facts) == "Falcon plan price: $37\nEagle plan price: $59"
