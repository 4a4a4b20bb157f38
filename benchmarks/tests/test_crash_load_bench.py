"""The crash and load benches on a small scale: the real ``kairos serve``, the bench model, the JSON they report."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import kairos_bench.load
from kairos.cli import app
from kairos.models.openai_compat import OpenAICompatModel
from kairos.models.types import Message, ModelRequest, ResponseDone, ToolSpec
from kairos_bench import crash, load
from kairos_bench._fake_openai import EFFECT_RE, DeterministicModel

BASH = ToolSpec("bash", "run a command", {"type": "object", "properties": {"command": {"type": "string"}}})


@pytest.fixture
async def bench_model() -> AsyncIterator[Callable[[str], OpenAICompatModel]]:
    """The kairos OpenAI backend pointed at a bench model server (closed after the test)."""
    made: list[OpenAICompatModel] = []

    def make(base_url: str) -> OpenAICompatModel:
        made.append(OpenAICompatModel("bench", base_url=base_url, api_key="unused", max_retries=0))
        return made[-1]

    yield make
    for model in made:
        await model.aclose()


async def _ask(model: OpenAICompatModel, *messages: Message) -> Message:
    request = ModelRequest("you are a bench agent", "", (BASH,), messages, max_tokens=64)
    done = [e async for e in model.stream(request) if isinstance(e, ResponseDone)]
    assert len(done) == 1
    return done[0].response.message


async def test_bench_model_speaks_what_the_openai_backend_reads(
    bench_model: Callable[[str], OpenAICompatModel],
) -> None:
    with DeterministicModel("effect") as server:
        model = bench_model(server.base_url)
        first = await _ask(model, Message.user("please handle EVT-a1 and EVT-b2"))
        assert [c.name for c in first.tool_calls] == ["bash", "bash"]
        assert [EFFECT_RE.findall(c.arguments) for c in first.tool_calls] == [["a1"], ["b2"]]
        results = [Message.tool(c.id, "(no output)", "bash") for c in first.tool_calls]
        second = await _ask(model, Message.user("please handle EVT-a1 and EVT-b2"), first, *results)
        assert not second.tool_calls and second.content == "handled 0 event(s)"
        assert server.seen() == {"a1", "b2"} and server.requests == 2 and server.bad_requests == 0


async def test_bench_model_answers_and_times_events_in_answer_mode(
    bench_model: Callable[[str], OpenAICompatModel],
) -> None:
    with DeterministicModel("answer") as server:
        model = bench_model(server.base_url)
        reply = await _ask(model, Message.user("build done EVT-L7@1700000000.250000"))
        assert reply.content == "handled 1 event(s)" and not reply.tool_calls
        assert server.sent_at == {"L7": 1700000000.25} and server.latencies_ms()["L7"] > 0
        reply = await _ask(model, Message.user("build done EVT-L7@1700000000.250000"), reply, Message.user("more?"))
        assert reply.content == "handled 0 event(s)"


async def test_bench_model_refuses_a_malformed_body() -> None:
    with DeterministicModel("answer") as server:
        async with httpx.AsyncClient() as client:
            r = await client.post(server.base_url + "/chat/completions", content=b"{not json")
        assert r.status_code == 400 and "bench model" in r.json()["error"]["message"]
        assert server.bad_requests == 1


def test_tiny_crash_run_loses_nothing_and_repeats_nothing() -> None:
    result = crash.run(runs=2, seed=3)
    assert result["bench"] == "crash" and len(result["rows"]) == 2
    summary = result["summary"]
    assert summary["lost_events"] == 0 and summary["duplicated_side_effects"] == 0
    assert summary["missing_effects"] == 0 and summary["runs_with_problems"] == 0, result["rows"]
    for row in result["rows"]:
        assert row["events"] >= 3 and row["restart_s"] > 0 and row["problems"] == []
        assert row["acked_before_kill"] <= row["sent_before_kill"] < row["events"]
    json.dumps(result)


def test_tiny_load_run_reports_its_schema() -> None:
    result = load.run(duration=3, sessions=5, rate=10)
    assert result["bench"] == "load" and result["params"]["sessions"] == 5
    summary = result["summary"]
    assert summary["lost"] == 0 and summary["accepted"] == summary["sent"] > 0, summary
    assert summary["http_errors"] == 0 and summary["sessions"] == 5
    assert summary["dispatch_p99_ms"] >= summary["dispatch_p50_ms"] > 0
    assert summary["events_per_s"] > 0 and summary["rss_mb_max"] > 0
    assert [row["window_s"] for row in result["rows"]] == [[0, 3]]
    json.dumps(result)


@pytest.fixture
def benches(monkeypatch: pytest.MonkeyPatch) -> None:
    """``kairos bench`` sees the crash and load entry points (this checkout's, installed or not)."""
    group = "kairos.benchmarks"
    eps = [metadata.EntryPoint(n, f"kairos_bench:{v}", group) for n, v in (("crash", "CRASH"), ("load", "LOAD"))]
    real = metadata.entry_points

    def entry_points(**kw: Any) -> Any:
        return eps if kw.get("group") == group else real(**kw)

    monkeypatch.setattr(metadata, "entry_points", entry_points)


def test_bench_passes_duration_to_a_bench_that_takes_it(
    benches: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    def fake_run(**kwargs: Any) -> dict[str, Any]:
        seen.update(kwargs)
        return {"bench": "load", "params": {}, "rows": [], "summary": {"lost": 0}}

    monkeypatch.setattr(kairos_bench.load, "run", fake_run)
    out = tmp_path / "load.json"
    result = CliRunner().invoke(app, ["bench", "load", "--duration", "12", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert seen["duration"] == 12 and seen["quick"] is False
    assert json.loads(out.read_text())["summary"] == {"lost": 0}


def test_bench_refuses_duration_for_a_bench_without_one(benches: None) -> None:
    result = CliRunner().invoke(app, ["bench", "crash", "--duration", "5"])
    assert result.exit_code == 1
    assert "does not take --duration" in result.output and "load" in result.output


def test_tiny_crash_run_on_postgresql_and_nats_loses_nothing(scale_deps: None) -> None:
    result = crash.run(runs=1, seed=5, sessions=2, store="postgresql", bus="nats")
    assert result["params"]["store"] == "postgresql (started by the bench)"
    assert result["params"]["bus"].startswith("nats://127.0.0.1:")
    summary = result["summary"]
    assert summary["lost_events"] == 0 and summary["duplicated_side_effects"] == 0, result["rows"]
    assert summary["runs"] == 1 and summary["failed_restarts"] == 0, result["rows"]
    assert result["rows"][0]["events"] >= 3
    json.dumps(result)


def test_tiny_load_run_on_postgresql_and_nats_loses_nothing(scale_deps: None) -> None:
    result = load.run(duration=2, sessions=3, rate=5, store="postgresql", bus="nats")
    assert result["params"]["store"] == "postgresql (started by the bench)"
    summary = result["summary"]
    assert summary["lost"] == 0 and summary["accepted"] == summary["sent"] > 0, summary
    assert summary["http_errors"] == 0 and summary["server_exit_code"] == 0, summary
    json.dumps(result)


def test_bench_passes_store_and_bus(benches: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_run(**kwargs: Any) -> dict[str, Any]:
        seen.update(kwargs)
        return {"bench": "load", "params": {}, "rows": [], "summary": {"lost": 0}}

    monkeypatch.setattr(kairos_bench.load, "run", fake_run)
    result = CliRunner().invoke(app, ["bench", "load", "--store", "postgresql", "--bus", "nats"])
    assert result.exit_code == 0, result.output
    assert seen["store"] == "postgresql" and seen["bus"] == "nats"
