"""Smoke tests of the status-bar and status-techniques bench code paths on a scripted model."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

from kairos.models.types import ModelRequest, ModelResponse
from kairos.testing import ScriptedModel, call, reply
from kairos_bench import status_bar, status_techniques


def quiet() -> Console:
    return Console(quiet=True)


def calls_again(request: ModelRequest) -> ModelResponse:
    """Calls the capped merchant once after the follow-up, then gives up."""
    if request.messages[-1].role == "tool" or request.messages[-2].role == "tool":
        return reply("I could not call again.")
    first = next(c for m in request.messages for c in m.tool_calls if c.name == "phone_call")
    return reply("", call("phone_call", json.loads(first.arguments)))


def test_status_bar_bench_counts_violations_and_enforcement() -> None:
    result = status_bar.run(console=quiet(), model=ScriptedModel([calls_again] * 20), trials=2)
    assert result["bench"] == "status-bar"
    s = result["summary"]
    assert s["violation_rate_with"] == 1.0 and s["violation_rate_without"] == 1.0
    assert s["executed_beyond_limit_with"] == 0  # refused by the harness
    assert s["executed_beyond_limit_without"] == 2
    assert len(result["rows"]) == 4 and {r["group"] for r in result["rows"]} == {"with", "without"}
    example = result["params"]["status_example"]
    assert "Maximum calls to Xfinity reached (3/3)" in example
    assert "support forum" not in example and "help center" not in example  # no search text
    assert result["rows"][0]["merchant"] != result["rows"][2]["merchant"]  # trials differ


def test_status_bar_scenarios_differ_and_detect_the_capped_merchant() -> None:
    a, b = status_bar.Scenario(0), status_bar.Scenario(1)
    assert (a.merchant, a.number, a.amount) != (b.merchant, b.number, b.amount)
    assert a.is_capped_call("xfinity support", "") and a.is_capped_call("", a.number)
    assert not a.is_capped_call("Chase Bank", "+1-888-000-0000")


def test_status_techniques_bench_measures_recovery() -> None:
    seen: list[str] = []

    def recover(request: ModelRequest) -> ModelResponse:
        results = [m for m in request.messages if m.role == "tool"]
        if not results:
            return reply("", call("read_file", {"path": "notes/meeting.txt"}))
        if len(results) == 1:
            seen.append(results[0].content)
            return reply("", call("read_file", {"path": "notes/meetings.txt"}))
        return reply("The next meeting is on 2025-10-14.")

    result: dict[str, Any] = status_techniques.run(
        console=quiet(),
        model=ScriptedModel([recover] * 12),
        configs=("all_off", "all_on", "todo_off", "errors_off"),
        tasks=("missing-path",),
    )
    rows = result["rows"]
    assert [r["config"] for r in rows] == ["all_off", "all_on", "todo_off", "errors_off"]
    assert all(r["success"] and r["recovered"] and r["iterations"] == 3 for r in rows)
    s = result["summary"]
    assert s["error_recovery_with_4layer"] == 1.0 and s["error_recovery_without_4layer"] == 1.0
    assert s["iterations_todo_on"] == 3 and s["success_todo_off"] == 1.0
    plain, four_layer = seen[0], seen[1]
    assert plain.startswith("Tool 'read_file' failed: FileNotFoundError")
    assert "[4] How to fix:" in four_layer and "meetings.txt" in four_layer
    assert "Tool call #1 for 'read_file'." in four_layer and "How to fix" not in seen[3]


def test_status_techniques_checks_are_real(tmp_path: Any) -> None:
    task = next(t for t in status_techniques.TASKS if t.name == "multi-edit")
    for rel, text in task.files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert not task.check(tmp_path, "done")
    (tmp_path / "app" / "settings.json").write_text('{"debug": false}')
    (tmp_path / "app" / "VERSION").write_text("1.4.3\n")
    (tmp_path / "CHANGELOG.md").write_text("1.4.3: debug disabled\n")
    assert task.check(tmp_path, "done")
