"""Smoke test of the ``compression`` bench on scripted models (the real run uses the bundled model)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kairos.context.compression.llm import NOTHING_RELEVANT
from kairos.models.types import Message, ModelRequest, ModelResponse
from kairos.testing import ScriptedModel, call, reply
from kairos_bench.compression import (
    N_CTX,
    Corpus,
    Founder,
    check,
    facts_in,
    gold,
    make_corpus,
    make_search,
    passages,
    run_trial,
    share,
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
        # a query naming the person finds their profile, whatever words come with the name
        for query in (f"{f.name} co-founders {corpus.company}", f"{f.name.lower()} co-founder", f"{f.name} left"):
            assert search.fn(query=query) == page, query
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
    summ = ScriptedModel([lambda r: reply(NOTHING_RELEVANT)] * 10, context_window=N_CTX)
    rows = []
    for strategy in ("task_aware", "windowed"):
        row = await run_trial(strategy, 0, corpus, scripted_agent(corpus), summ, tmp_path)
        rows.append(row)
        assert row["success"] and row["stop"] == "answer"
        assert row["iterations"] == 11 and row["total_prompt_tokens"] > 0
        # every page came in; the summariser called each irrelevant (so every fact was dropped), the
        # exact answer came from the script
        assert row["facts_found"] == 1.0 and row["facts_kept"] == 0.0 and len(row["facts_dropped"]) == 5
        json.dumps(row)
    task_aware, windowed = rows
    # task-aware compresses each page on arrival; windowed only once five raw pages pass 80 %
    assert task_aware["summarizer_calls"] == 5 and task_aware["compression_ratio"] < 0.2
    assert windowed["summarizer_calls"] == 5 and windowed["total_prompt_tokens"] > 2 * task_aware["total_prompt_tokens"]
    summary = summarise(rows)
    assert summary["success_taskaware"] == 1.0
    assert summary["facts_kept_task_aware"] == 0.0 and summary["facts_found_windowed"] == 1.0
    assert summary["tokens_ratio_taskaware_vs_windowed"] < 0.5


def copying_summarizer() -> ScriptedModel:
    """Keeps the paragraphs that say whether someone left or stays, word for word."""

    def extract(request: ModelRequest) -> ModelResponse:
        text = request.messages[-1].content.split("Text to compress:")[-1]
        return reply("\n".join(p for p in text.split("\n\n") if " still works at " in p or " to start " in p))

    return ScriptedModel([extract] * 10, context_window=N_CTX)


async def test_a_summariser_that_invents_leaves_the_focused_excerpt(tmp_path: Path) -> None:
    corpus = make_corpus(1002)
    invents = ScriptedModel([lambda r: reply("Relevant: the facts of this page.")] * 10, context_window=N_CTX)
    row = await run_trial("task_aware", 0, corpus, scripted_agent(corpus), invents, tmp_path)
    assert row["facts_kept"] == 1.0 and row["compression_ratio"] < 0.35  # the page's own paragraphs, cut
    assert all("Relevant: the facts" not in text for text in row["last_compressed"])


async def test_facts_kept_reads_the_last_request(tmp_path: Path) -> None:
    corpus = make_corpus(1001)
    rows = [
        await run_trial(strategy, 0, corpus, scripted_agent(corpus), copying_summarizer(), tmp_path)
        for strategy in ("none", "task_aware")
    ]
    assert [(r["facts_kept"], r["facts_found"], r["facts_dropped"]) for r in rows] == [(1.0, 1.0, [])] * 2
    assert rows[1]["compression_ratio"] < 0.1
    assert rows[0]["last_compressed"] == [] and len(rows[1]["last_compressed"]) == 5
    summary = summarise(rows)
    assert summary["facts_kept_none"] == summary["facts_kept_task_aware"] == 1.0


# -- the facts-kept score on hand-made requests ------------------------------------------------------


def tiny_corpus() -> Corpus:
    founders = [
        Founder("Leona Okonkwo", 2020, "chief technology officer", 2016),
        Founder("Ilse Ashworth", None, "head of product", 2017),
    ]
    return Corpus("Veltrix Labs", 2012, founders, strangers=["Runa Quist"])


def tool(text: str) -> Message:
    return Message.tool("c1", text, name="search")


def request(*messages: Message) -> ModelRequest:
    return ModelRequest("system", "", (), (Message.user("Sum up."), *messages))


def kept(*texts: str) -> dict[str, bool]:
    return facts_in(request(*(tool(t) for t in texts)).messages, tiny_corpus())


HEADER = '[COMPRESSED] search(query="Leona Okonkwo"), 6,512 chars:\n'


def test_a_fact_stated_in_one_result_is_kept() -> None:
    assert kept(HEADER + "Leona Okonkwo left Veltrix Labs in March 2020 to start Fjordline.") == {
        "Leona Okonkwo": True,
        "Ilse Ashworth": False,
    }
    # the header names her, the summary says it with a pronoun: still her passage
    assert kept(HEADER + "In 2016 she became chief technology officer. She left in March 2020.")["Leona Okonkwo"]
    assert kept("Ilse Ashworth still works at Veltrix Labs.")["Ilse Ashworth"]
    assert kept("Ilse Ashworth is currently head of product; she has not left.")["Ilse Ashworth"]
    assert kept("Ilse Ashworth hasn't left and remains at Veltrix Labs.")["Ilse Ashworth"]


def test_a_dropped_fact_is_not_kept() -> None:
    assert kept(HEADER + "No relevant information.") == {"Leona Okonkwo": False, "Ilse Ashworth": False}
    assert not kept("Ilse Ashworth co-founded Veltrix Labs in 2012 and became head of product in 2017.")[
        "Ilse Ashworth"
    ]
    assert share(kept(HEADER + "Leona Okonkwo left in 2020.")) == 0.5


def test_a_wrong_year_or_status_is_not_kept() -> None:
    assert not kept("Leona Okonkwo left Veltrix Labs in 2018.")["Leona Okonkwo"]
    # the role-change year is not the year she left; a year without leaving is no fact
    assert not kept("In 2016, Leona Okonkwo became chief technology officer.")["Leona Okonkwo"]
    assert not kept("Leona Okonkwo: chief technology officer 2016-2020, still works there.")["Leona Okonkwo"]
    # a leaver said to stay, a stayer said to have left
    assert not kept("Leona Okonkwo still works at Veltrix Labs.")["Leona Okonkwo"]
    assert not kept("Ilse Ashworth left Veltrix Labs in 2019 and still advises it.")["Ilse Ashworth"]
    assert not kept("Ilse Ashworth no longer works at Veltrix Labs.")["Ilse Ashworth"]
    # a fact stated beside its opposite (a summariser mixing two pages) is not kept
    assert not kept("Leona Okonkwo still works there. In 2020, she left Veltrix Labs.")["Leona Okonkwo"]


def test_a_fact_split_across_messages_is_not_kept() -> None:
    assert not kept("Leona Okonkwo co-founded Veltrix Labs.", "A co-founder left in March 2020.")["Leona Okonkwo"]
    assert not kept("Ilse Ashworth co-founded Veltrix Labs.", "She still works there.")["Ilse Ashworth"]


def test_another_persons_year_does_not_count() -> None:
    # one message, three people: each passage runs to the sentence naming the next person
    text = (
        "Leona Okonkwo became chief technology officer in 2016. "
        "Related: Runa Quist left Brightmoor in 2020. Ilse Ashworth still works at Veltrix Labs."
    )
    assert kept(text) == {"Leona Okonkwo": False, "Ilse Ashworth": True}
    about = passages(text, tiny_corpus().people)
    assert about["Runa Quist"] == "Related: Runa Quist left Brightmoor in 2020. "
    # one sentence about two people is cut at the second name
    both = "Leona left Veltrix Labs in 2020, while Ashworth is still there."
    assert kept(both) == {"Leona Okonkwo": True, "Ilse Ashworth": True}
    assert passages(both, tiny_corpus().people)["Leona Okonkwo"] == "Leona left Veltrix Labs in 2020, while "
    # the year before the name, in the same sentence, belongs to her
    assert kept("Ilse Ashworth remains head of product. In 2020, Leona Okonkwo left.") == {
        "Leona Okonkwo": True,
        "Ilse Ashworth": True,
    }


def test_only_tool_results_count() -> None:
    said = Message.assistant("Leona Okonkwo left in 2020; Ilse Ashworth still works there.")
    assert facts_in(request(said).messages, tiny_corpus()) == {"Leona Okonkwo": False, "Ilse Ashworth": False}


@pytest.mark.parametrize("seed", [1000, 1001, 1002, 3, 11, 42])
def test_every_raw_profile_states_its_fact_and_nothing_else_does(seed: int) -> None:
    corpus = make_corpus(seed)
    search = make_search(corpus)
    pages = {f.name: search.fn(query=f.name) for f in corpus.founders}
    assert facts_in([tool(p) for p in pages.values()], corpus) == {f.name: True for f in corpus.founders}
    # the founding page, the strangers' pages and the other profiles state no one's fact
    others = [tool(p) for t, p in corpus.docs if not any(f.name in t for f in corpus.founders)]
    assert share(facts_in(others, corpus)) == 0.0
    for f in corpus.founders:
        rest = [tool(p) for name, p in pages.items() if name != f.name]
        assert not facts_in(rest, corpus)[f.name]
        # the profile without its one sentence: teasers, noise and the role change do not count
        cut = re.sub(rf"{f.name} (still works|left) [^\n]*", "", pages[f.name])
        assert cut != pages[f.name] and not facts_in([tool(cut)], corpus)[f.name], gold(f)
