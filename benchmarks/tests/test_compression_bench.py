"""Smoke test of the ``compression`` bench on scripted models (the real run uses the bundled model)."""

from __future__ import annotations

import json
from pathlib import Path

from kairos.models.types import ModelResponse
from kairos.testing import ScriptedModel, call, reply
from kairos_bench.compression import (
    N_CTX,
    Corpus,
    check,
    make_corpus,
    make_search,
    run_trial,
    summarise,
)


def right_answer(corpus: Corpus) -> str:
    still = ", ".join(f.name for f in corpus.founders if f.left is None)
    left = ", ".join(f"{f.name} ({f.left})" for f in corpus.founders if f.left is not None)
    return f"STILL THERE: {still}; LEFT: {left}"


def test_corpus_is_deterministic_long_and_noisy() -> None:
    a, b, c = make_corpus(7), make_corpus(7), make_corpus(8)
    assert a == b and a != c
    assert len(a.founders) == 5 and len(a.docs) >= 9
    assert any(f.left is None for f in a.founders) and any(f.left is not None for f in a.founders)
    assert all(len(page) >= 5000 for _, page in a.docs)
    assert [f.name in turn for f, turn in zip(a.founders, a.turns, strict=False)] == [True] * 5
    assert len(a.turns) == 6 and "Sum up for all 5 co-founders" in a.turns[-1]
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
    steps: list[ModelResponse] = []
    for f in corpus.founders:
        steps += [reply("", call("search", {"query": f.name})), reply(f"{f.name}: {f.left or 'still there'}.")]
    return ScriptedModel([*steps, reply(right_answer(corpus))], context_window=N_CTX)


async def test_a_trial_runs_and_reports_every_row_field(tmp_path: Path) -> None:
    corpus = make_corpus(1000)
    summ = ScriptedModel([lambda r: reply("Relevant: the facts of this page.")] * 10, context_window=N_CTX)
    rows = []
    for strategy in ("task_aware", "windowed"):
        row = await run_trial(strategy, 0, corpus, scripted_agent(corpus), summ, tmp_path)
        rows.append(row)
        assert row["success"] and row["stop"] == "answer"
        assert row["iterations"] == 11 and row["total_prompt_tokens"] > 0
        json.dumps(row)
    task_aware, windowed = rows
    # task-aware compresses each page on arrival; windowed only once five raw pages pass 80 %
    assert task_aware["summarizer_calls"] == 5 and task_aware["compression_ratio"] < 0.2
    assert windowed["summarizer_calls"] == 5 and windowed["total_prompt_tokens"] > 2 * task_aware["total_prompt_tokens"]
    summary = summarise(rows)
    assert summary["success_taskaware"] == 1.0
    assert summary["tokens_ratio_taskaware_vs_windowed"] < 0.5
