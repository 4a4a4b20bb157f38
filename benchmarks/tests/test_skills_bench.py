"""The ``skills`` bench's plumbing on a scripted model (the real run uses the bundled model)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from kairos.models.types import ModelRequest, ModelResponse
from kairos.testing import ScriptedModel, call, reply
from kairos_bench import skills as bench


def run_script(request: ModelRequest) -> ModelResponse:
    """Copy the script command from the loaded skill, as a model following it would."""
    body = next(m.content for m in reversed(request.messages) if m.role == "tool" and m.name == "load_skill")
    command = re.search(r"`([^`]*make_report\.py FILE[^`]*)`", body)
    assert command is not None, body
    return reply("", call("bash", {"command": command.group(1).replace("FILE", "data/sales.csv")}))


def answer_from_report(region: str) -> Callable[[ModelRequest], ModelResponse]:
    def step(request: ModelRequest) -> ModelResponse:
        out = next(m.content for m in reversed(request.messages) if m.role == "tool")
        line = next(x for x in out.splitlines() if x.startswith(f"| {region} |"))
        revenue = line.split("|")[5].strip()
        return reply(f"The {region} region's total revenue is {revenue}; the report is in report.md.")

    return step


def test_trace_and_order_checks() -> None:
    good = ["catalog", "load_skill:report-writing", "read_skill_file:reference.md", "bash:script", "answer"]
    assert bench.progressive(good)
    assert not bench.progressive(["catalog", "bash:script", "load_skill:report-writing", "answer"])
    assert not bench.progressive(["catalog", "load_skill:report-writing", "bash:script"])  # no answer
    assert not bench.progressive(["catalog", "bash:script", "read_skill_file:x", "answer"])


async def test_skill_and_control_trials_on_a_scripted_model(tmp_path: Path) -> None:
    trials = bench.plan(2, 1)
    model = ScriptedModel()
    for t in trials[:2]:
        model.extend(
            [reply("", call("load_skill", {"name": "report-writing"})), run_script, answer_from_report(t.region)]
        )
    model.extend([reply("", call("bash", {"command": "wc -l notes.txt"})), reply("notes.txt has 7 lines.")])
    rows = await bench.run_all(model, trials, tmp_path, Console(quiet=True))
    skill_rows = rows[:2]
    for row in skill_rows:
        assert row["trace"] == ["catalog", "load_skill:report-writing", "bash:script", "answer"], row
        assert row["report_ok"] and row["answer_ok"] and row["progressive_order"] and row["success"], row
        assert row["prefix_ok"] and row["iterations"] == 3
    assert rows[2]["kind"] == "control" and rows[2]["success"] and not rows[2]["loaded_skill"]
    summary = bench.summarise(rows)
    assert summary["success_rate"] == 1.0 and summary["progressive_order_rate"] == 1.0
    assert summary["false_activation_rate"] == 0.0 and summary["script_run_rate"] == 1.0
    json.dumps({"rows": rows, "summary": summary})  # the CLI writes it as JSON


async def test_a_hand_made_report_does_not_count(tmp_path: Path) -> None:
    (trial,) = bench.plan(1, 0)
    ws, totals = bench.make_workspace(tmp_path, trial)
    total = f"{totals[trial.region]:,.2f}"
    (ws / "report.md").write_text(f"# Report\n\n| {trial.region} | 20 | {total} |\n")
    assert not bench.check_report(ws, trial.region, totals)
    model = ScriptedModel([reply(f"The total is {total}.")])
    (row,) = await bench.run_all(model, [trial], tmp_path / "again", Console(quiet=True))
    assert row["answer_ok"] and not row["report_ok"] and not row["success"]
    assert row["trace"] == ["catalog", "answer"] and not row["progressive_order"]


def test_disclosure_tokens_compares_catalog_with_bodies(tmp_path: Path) -> None:
    tokens = bench.disclosure_tokens(ScriptedModel(), tmp_path)
    assert 0 < tokens["catalog_tokens"] < tokens["all_bodies_tokens"]
    assert tokens["report_body_tokens"] < tokens["all_bodies_tokens"]
