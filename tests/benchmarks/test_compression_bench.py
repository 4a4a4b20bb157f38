"""Smoke test of the ``compression`` bench on scripted models (the real run uses the bundled model)."""

from __future__ import annotations

import json
from pathlib import Path

from kairos.benchmarks.compression import (
    Corpus,
    check,
    make_corpus,
    make_search,
    run_trial,
    summarise,
)
from kairos.models.types import ModelResponse
from kairos.testing import ScriptedModel, call, reply


def right_answer(corpus: Corpus) -> str:
    still = ", ".join(f.name for f in corpus.founders if f.left is None)
    left = ", ".join(f"{f.name} ({f.left})" for f in corpus.founders if f.left is not None)
    return f"STILL THERE: {still}; LEFT: {left}"


def test_corpus_is_deterministic_long_and_noisy() -> None:
    a, b, c = make_corpus(7), make_corpus(7), make_corpus(8)
    assert a == b and a != c
    assert len(a.founders) == 3 and len(a.docs) >= 6
    assert any(f.left is None for f in a.founders) and any(f.left is not None for f in a.founders)
    assert all(len(page) >= 4000 for _, page in a.docs)
    assert all(f.name in a.question for f in a.founders)
    assert all("Home | News" in page and ("Sponsored" in page or "Advertisement" in page) for _, page in a.docs)


def test_search_finds_the_founding_page_and_each_profile() -> None:
    corpus = make_corpus(3)
    search = make_search(corpus)
    founding = search.fn(query=f"{corpus.company} co-founders")
    assert all(f.name in founding for f in corpus.founders) and "founded in" in founding
    for f in corpus.founders:
        page = search.fn(query=f.name)
        assert f"In {f.role_year}, {f.name} became" in page
        assert (f"left {corpus.company} in" in page) == (f.left is not None)
    assert search.fn(query="zzz qqq").startswith("No results")


def test_check_wants_the_exact_sets_and_years() -> None:
    corpus = make_corpus(11)
    assert check(right_answer(corpus), corpus)
    leaver = next(f for f in corpus.founders if f.left is not None)
    assert not check(right_answer(corpus).replace(f"({leaver.left})", f"({leaver.role_year})"), corpus)
    assert not check(right_answer(corpus).split("; LEFT")[0], corpus)
    stayer = next(f for f in corpus.founders if f.left is None)
    assert not check(right_answer(corpus) + f", {stayer.name} (2020)", corpus)


def scripted_agent(corpus: Corpus) -> ScriptedModel:
    names = [call("search", {"query": f.name}) for f in corpus.founders]
    steps: list[ModelResponse] = [reply("", names[0]), reply("", *names[1:]), reply(right_answer(corpus))]
    return ScriptedModel(list(steps), context_window=4096)


async def test_a_trial_runs_and_reports_every_row_field(tmp_path: Path) -> None:
    corpus = make_corpus(1000)
    summ = ScriptedModel([lambda r: reply("Relevant: the facts of this page.")] * 10, context_window=4096)
    rows = []
    for strategy in ("task_aware", "windowed"):
        row = await run_trial(strategy, 0, corpus, scripted_agent(corpus), summ, tmp_path)
        rows.append(row)
        assert row["success"] and row["stop"] == "answer"
        assert row["iterations"] == 3 and row["total_prompt_tokens"] > 0
        json.dumps(row)
    assert rows[0]["summarizer_calls"] == 3 and rows[0]["compression_ratio"] < 0.2
    summary = summarise(rows)
    assert summary["success_taskaware"] == 1.0
    assert "tokens_ratio_taskaware_vs_windowed" in summary
