from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kairos.errors import ConfigError
from kairos.knowledge import HashEmbedder
from kairos.models.types import ModelRequest, ModelResponse
from kairos.testing import ScriptedModel, call, reply
from kairos_bench import LOCOMO_RETRIEVAL
from kairos_bench.locomo_retrieval import DEFAULT_DATA, load_turns, norm_id, parse_when, run, sample_questions

CONV: dict[str, Any] = {
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a greyhound called Comet."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely! I started pottery classes."},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "Look", "blip_caption": "a photo of a lighthouse"},
        ],
        "session_2_date_time": "9:00 am on 1 June, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "My pottery bowl cracked in the kiln."}],
    },
    "qa": [
        {"question": "What is the name of Ann's greyhound?", "answer": "Comet", "evidence": ["D1:1"], "category": 4},
        {"question": "What happened to the pottery bowl in the kiln?", "evidence": ["D2:01", "D1:2"], "category": 1},
        {"question": "Adversarial", "adversarial_answer": "x", "evidence": ["D1:1"], "category": 5},
        {"question": "No evidence", "answer": "x", "evidence": [], "category": 2},
    ],
}


def test_helpers() -> None:
    assert norm_id("D30:05") == "D30:5" and norm_id("D:11:26") == "D11:26" and norm_id("odd") == "odd"
    assert parse_when("1:56 pm on 8 May, 2023") is not None and parse_when("someday") is None
    turns = load_turns(CONV["conversation"])
    assert [t.turn_id for t in turns] == ["D1:1", "D1:2", "D1:3", "D2:1"]
    assert turns[2].text == "Look [shares a photo: a photo of a lighthouse]"
    assert turns[3].when == "9:00 am on 1 June, 2023"


def test_run_on_a_small_folder(tmp_path: Path) -> None:
    (tmp_path / "conv-x.json").write_text(json.dumps(CONV))
    result = run(Console(quiet=True), data=tmp_path, embedder=HashEmbedder(), scale_chunks=40)
    assert result["bench"] == "locomo-retrieval"
    assert result["params"]["questions"] == 2 and result["params"]["questions_without_evidence"] == 1
    rows = {r["mode"]: r for r in result["rows"] if r.get("split", "all") == "all"}
    assert set(rows) == {"bm25", "dense", "hybrid", "hybrid+contextual", "hybrid+rerank", "hybrid+tree", "hybrid+graph"}
    assert "not run" in rows["hybrid+tree"]["status"] and "not run" in rows["hybrid+graph"]["status"]
    assert "not run" in rows["hybrid+rerank"]["status"]
    asked = run(Console(quiet=True), data=tmp_path, embedder=HashEmbedder(), modes="bm25", scale_chunks=0)
    skipped = {r["mode"]: r["status"] for r in asked["rows"] if "status" in r}
    assert skipped["dense"] == "not run: ask for it with --modes"  # a model-free mode needs no model
    assert "needs the chat model" in skipped["hybrid+tree"]
    # conv-x is not a development conversation: it is reported as held out
    assert {(r["mode"], r["split"]) for r in result["rows"] if "split" in r} == {
        (m, s) for m in ("bm25", "dense", "hybrid") for s in ("all", "held_out")
    } | {("hybrid", "latency-at-scale")}
    assert result["summary"]["recall10_bm25_held_out"] == result["summary"]["recall10_bm25"]
    # four turns, k up to 20: every evidence turn is retrieved in every mode
    assert rows["bm25"]["recall@5"] == 1.0 and rows["hybrid"]["recall@20"] == 1.0
    bm25_top = rows["bm25"]["mrr"]
    assert 0.5 <= bm25_top <= 1.0
    summary = result["summary"]
    assert summary["recall10_best"] == max(summary[f"recall10_{m}"] for m in ("bm25", "dense", "hybrid"))
    assert summary["recall10_gain_over_bm25"] == pytest.approx(summary["recall10_best"] - summary["recall10_bm25"])
    # the default mode is hybrid: its recall, gain and median query time are the targets
    assert summary["recall10_default"] == summary["recall10_hybrid"]
    assert summary["gain_default_over_bm25"] == pytest.approx(summary["recall10_hybrid"] - summary["recall10_bm25"])
    scale = next(r for r in result["rows"] if r.get("split") == "latency-at-scale")
    assert (scale["mode"], scale["chunks"], scale["queries"]) == ("hybrid", 40, 2)  # 10 copies of the 4 turns
    assert summary["query_ms_p50_default"] == scale["latency_p50_ms"] > 0
    assert summary["query_ms_p50_default_chunks"] == 40


def test_llm_modes_with_a_scripted_model(tmp_path: Path) -> None:
    (tmp_path / "conv-26.json").write_text(json.dumps(CONV))  # a development conversation's name
    (tmp_path / "conv-x.json").write_text(json.dumps(CONV))

    def step(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1].content
        if "<passage>" in last:  # the reranker: only the kiln turn is relevant
            return reply("", call("relevance", {"relevant": "kiln" in last.split("<passage>")[1]}))
        return reply("Bo and Ann catch up about their pets and pottery.")  # a context

    model = ScriptedModel([step] * 200)
    cache = tmp_path / "cache" / "contexts.db"
    modes = "hybrid,hybrid+rerank,hybrid+contextual"
    result = run(
        Console(quiet=True),
        data=tmp_path,
        embedder=HashEmbedder(),
        modes=modes,
        llm=model,
        context_cache=cache,
        scale_chunks=0,
    )
    rows = {(r["mode"], r["split"]): r for r in result["rows"] if "split" in r}
    assert {m for m, _ in rows} == {"hybrid", "hybrid+rerank", "hybrid+contextual"}
    assert rows[("hybrid+rerank", "dev")]["questions"] == 2 and rows[("hybrid+rerank", "held_out")]["questions"] == 2
    generation = rows[("hybrid+contextual", "context-generation")]
    assert generation["generated"] == 4 and generation["from_cache"] == 4  # conv-x repeats conv-26's turns
    cost = rows[("hybrid+rerank", "rerank-cost")]  # and its questions: their verdicts come from the cache
    assert (cost["verdicts_judged"], cost["verdicts_from_cache"], cost["depth"]) == (8, 8, 20)
    assert result["params"]["reranker"] == "llm-yes-no:scripted" and result["params"]["modes"] == [
        "hybrid", "hybrid+rerank", "hybrid+contextual"
    ]  # fmt: skip
    assert "recall10_hybrid+rerank_dev" in result["summary"] and "recall10_bm25" not in result["summary"]
    # the judge puts the kiln turn first for every query: the kiln question's evidence ranks 1, the
    # greyhound question's (D1:1) ranks 2, behind it; hybrid alone puts both evidence turns first
    assert rows[("hybrid+rerank", "all")]["mrr"] == 0.75 and rows[("hybrid", "all")]["mrr"] == 1.0
    # a rerun takes every context and every verdict from the disk cache, with the same ranking
    idle = ScriptedModel([])
    again = run(Console(quiet=True), data=tmp_path, embedder=HashEmbedder(), modes="hybrid+rerank,hybrid+contextual",
                llm=idle, context_cache=cache)  # fmt: skip
    again_rows = {(r["mode"], r["split"]): r for r in again["rows"] if "split" in r}
    regen = again_rows[("hybrid+contextual", "context-generation")]
    assert regen["generated"] == 0 and regen["from_cache"] == 8 and idle.requests == []
    assert again_rows[("hybrid+rerank", "rerank-cost")]["verdicts_judged"] == 0
    assert again_rows[("hybrid+rerank", "all")]["mrr"] == 0.75


def test_tree_and_graph_modes_with_a_scripted_model(tmp_path: Path) -> None:
    (tmp_path / "conv-x.json").write_text(json.dumps(CONV))

    def step(request: ModelRequest) -> ModelResponse:
        if request.tools:  # the triple extractor
            text = request.messages[-1].content
            found = [{"subject": "Bo", "relation": "fired", "object": "pottery bowl"}] if "kiln" in text else []
            return reply("", call("triples", {"triples": found}))
        return reply("Ann and Bo talk about a greyhound and pottery.")  # a summary

    model = ScriptedModel([step] * 50)
    cache = tmp_path / "cache" / "contexts.db"
    result = run(Console(quiet=True), data=tmp_path, embedder=HashEmbedder(), modes="hybrid,hybrid+tree,hybrid+graph",
                 llm=model, context_cache=cache, scale_chunks=0)  # fmt: skip
    rows = {(r["mode"], r["split"]): r for r in result["rows"] if "split" in r}
    assert rows[("hybrid+tree", "all")]["questions"] == 2 and rows[("hybrid+graph", "all")]["questions"] == 2
    assert rows[("hybrid+tree", "tree-generation")]["generated"] >= 1
    graph = rows[("hybrid+graph", "graph-extraction")]
    assert graph["extracted"] == 1 and graph["triples"] == 1  # four short turns: one batch and not graph["warnings"]
    assert rows[("hybrid+tree", "all")]["recall@20"] == 1.0 and rows[("hybrid+graph", "all")]["recall@20"] == 1.0
    assert result["params"]["auxiliary_index_notes"] == []
    # a rerun builds both from the disk cache
    idle = ScriptedModel([])
    again = run(Console(quiet=True), data=tmp_path, embedder=HashEmbedder(), modes="hybrid+tree,hybrid+graph",
                llm=idle, context_cache=cache)  # fmt: skip
    assert idle.requests == [] and not any(r.get("warnings") for r in again["rows"])


def test_a_failing_model_falls_back_to_hybrid_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "conv-x.json").write_text(json.dumps(CONV))
    result = run(Console(quiet=True), data=tmp_path, embedder=HashEmbedder(), modes="hybrid,hybrid+tree,hybrid+graph",
                 llm=ScriptedModel([]), context_cache=tmp_path / "c.db", scale_chunks=0)  # fmt: skip
    rows = {(r["mode"], r["split"]): r for r in result["rows"] if "split" in r}
    assert rows[("hybrid+tree", "all")]["recall@10"] == rows[("hybrid", "all")]["recall@10"]
    assert rows[("hybrid+graph", "all")]["recall@10"] == rows[("hybrid", "all")]["recall@10"]
    notes = " ".join(result["params"]["auxiliary_index_notes"])
    assert "no summary tree" in notes and "no entity graph" in notes


def test_questions_sample_is_seeded_and_reported(tmp_path: Path) -> None:
    qas = [{"question": f"q{i}", "evidence": ["D1:1"], "category": 4} for i in range(10)]
    assert sample_questions(qas, 3, "conv-1.json") == sample_questions(qas, 3, "conv-1.json")
    assert sample_questions(qas, 3, "conv-1.json") != sample_questions(qas, 3, "conv-2.json")
    assert sample_questions(qas, 30, "conv-1.json") == list(range(10))
    (tmp_path / "conv-x.json").write_text(json.dumps({**CONV, "qa": CONV["qa"] + qas}))
    result = run(Console(quiet=True), data=tmp_path, embedder=HashEmbedder(), questions=4, modes=["bm25"])
    indices = result["params"]["sample"]["indices"]["conv-x"]
    assert len(indices) == 4 and result["params"]["questions"] == 4
    assert [r["questions"] for r in result["rows"] if r.get("split") == "all"] == [4]


def test_unknown_mode_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "conv-x.json").write_text(json.dumps(CONV))
    with pytest.raises(ConfigError, match="unknown mode"):
        run(Console(quiet=True), data=tmp_path, embedder=HashEmbedder(), modes="bm25,magic")


def test_empty_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no LoCoMo conversation files"):
        run(Console(quiet=True), data=tmp_path, embedder=HashEmbedder())


@pytest.mark.skipif(not DEFAULT_DATA.is_dir(), reason="the shared LoCoMo data is not here")
def test_quick_run_on_the_shared_data() -> None:
    result = run(Console(quiet=True), quick=True, embedder=HashEmbedder(), scale_chunks=0)
    assert result["params"]["questions"] == 30 and result["summary"]["recall10_bm25"] > 0.3


def test_registered_with_data_questions_and_modes_options() -> None:
    assert LOCOMO_RETRIEVAL.takes_data and LOCOMO_RETRIEVAL.module == "locomo_retrieval"
    assert {"questions", "modes", "rerank_depth"} <= set(LOCOMO_RETRIEVAL.options)
