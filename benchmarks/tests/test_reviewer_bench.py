"""The ``reviewer`` bench's logic on scripted judges (the real run uses the bundled model)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

from kairos.models.types import ModelRequest, ModelResponse
from kairos.testing import ScriptedModel, call, reply
from kairos_bench import reviewer


def quiet() -> Console:
    return Console(quiet=True)


def judge_by(words: tuple[str, ...]) -> Any:
    """A judge that rejects a call whose text has any of ``words`` (and approves everything else)."""

    def step(request: ModelRequest) -> ModelResponse:
        text = request.messages[-1].content
        bad = any(w in text for w in words)
        args = {"approved": not bad, "risk": "high" if bad else "low", "reason": "scripted"}
        return reply("", call("verdict", args))

    return step


def test_the_data_set_is_labelled_and_large_enough() -> None:
    calls = reviewer.load_calls()
    assert sum(c["risky"] for c in calls) >= 20 and sum(not c["risky"] for c in calls) >= 20
    assert len({c["id"] for c in calls}) == len(calls)
    for c in calls:
        assert c["task"] and c["tool"] and isinstance(c["arguments"], dict) and c["category"]


def test_rates_follow_the_judges_verdicts() -> None:
    # rejects "rm -rf" (risky and benign ones alike) and nothing else
    model = ScriptedModel([judge_by(("rm -rf",))] * 200)
    out = reviewer.run(console=quiet(), llm=model)
    rows, s = out["rows"], out["summary"]
    calls = reviewer.load_calls()
    assert s["calls"] == len(calls) == len(rows) and s["risky"] == 24 and s["benign"] == 24
    for judge in ("sidecar", "reviewer"):
        expect_fp = sum("rm -rf" in json.dumps(c["arguments"]) for c in calls if not c["risky"])
        expect_fn = sum("rm -rf" not in json.dumps(c["arguments"]) for c in calls if c["risky"])
        assert (s[judge]["fp"], s[judge]["fn"]) == (expect_fp, expect_fn)
        assert s[judge]["fp_rate"] == round(expect_fp / 24, 3) and s[judge]["failed_closed"] == 0
    flagged_by_rules = [r["id"] for r in rows if r["rules"]["flagged"]]
    assert all(r["risky"] for r in rows if r["rules"]["flagged"]) and "risky-01" in flagged_by_rules
    assert s["rules"]["fp"] == 0 and 0 < s["rules"]["fn"] < 24
    # the sidecar saw name and arguments only; the reviewer also the request
    side, rev = model.requests[0].messages[-1].content, model.requests[len(calls)].messages[-1].content
    assert "Clean up the build output." not in side and "Clean up the build output." in rev


def test_a_failing_model_rejects_everything_and_says_so() -> None:
    out = reviewer.run(console=quiet(), quick=True, llm=ScriptedModel([RuntimeError("down")] * 40))
    s = out["summary"]
    assert s["calls"] == 10 and out["params"]["quick"] is True
    for judge in ("sidecar", "reviewer"):
        assert (s[judge]["fp_rate"], s[judge]["fn_rate"], s[judge]["failed_closed"]) == (1.0, 0.0, 10)


def test_the_bench_is_registered() -> None:
    import kairos_bench

    assert kairos_bench.REVIEWER.module == "reviewer"
