"""The summariser: task-aware prompts, citations, and input chunked to always fit its window."""

from __future__ import annotations

import pytest

from kairos.context.compression.llm import (
    CITATION_RULE,
    NOTHING_RELEVANT,
    TASK_SYSTEM,
    Summarizer,
    SummaryError,
    focus,
    verbatim,
)
from kairos.errors import ModelUnavailableError
from kairos.models.types import ModelRequest, ModelResponse
from kairos.testing import ScriptedModel, reply
from tests.context.compression.helpers import page


def text_part(request: ModelRequest) -> str:
    """The text a task-aware request asks to compress (between its header and its closing cue)."""
    body = request.messages[0].content.split("Text to compress:\n", 1)[1]
    return body.rsplit("\n\nSentences of this text", 1)[0]


def echo_model(window: int, n: int = 50) -> ScriptedModel:
    """Answers a task-aware request with the first line of its text (a copy, as asked), any other
    with a short summary naming the request's size."""

    def answer(r: ModelRequest) -> ModelResponse:
        prompt = r.messages[0].content
        if "Text to compress:\n" in prompt:
            return reply(text_part(r).splitlines()[0])
        return reply(f"summary of {len(prompt)} chars")

    return ScriptedModel([answer] * n, context_window=window)


async def test_long_input_is_chunked_so_every_call_fits_the_window() -> None:
    model = echo_model(800)
    s = Summarizer(model, max_tokens=100, context_chars=200)
    text = page("long", 20_000)
    out = await s.summarize(text, source="fetch(long)", query="what about long?", context="known: little")
    assert len(model.requests) > 5 and s.calls == len(model.requests)
    assert all(model.count_tokens(r) <= 800 - 100 for r in model.requests)
    sent = "".join(text_part(r) for r in model.requests[:-1])
    assert sent == text  # every chunk went in, none lost, none overlapping
    assert out.startswith("long line")


async def test_generic_summary_of_a_long_text_is_chunked_too() -> None:
    model = echo_model(600)
    s = Summarizer(model, max_tokens=64)
    await s.summarize(page("g", 9000), source="fetch(g)")
    assert len(model.requests) > 2
    assert all(model.count_tokens(r) <= 600 - 64 for r in model.requests)


async def test_task_aware_prompt_carries_the_query_and_the_current_context() -> None:
    model = echo_model(8000)
    s = Summarizer(model)
    await s.summarize("page text " * 50, source="search(x), call c1", query="Who left Acme?", context="Ana: CTO")
    req = model.requests[0]
    assert req.system == TASK_SYSTEM and req.tools == ()
    prompt = req.messages[0].content
    assert prompt.startswith("Given the search query: Who left Acme?\n\nCurrent context: Ana: CTO")
    assert "Source: search(x), call c1" in prompt


async def test_citation_mode_asks_for_a_source_on_every_fact() -> None:
    model = echo_model(8000)
    await Summarizer(model).summarize("t " * 100, source="s", query="q", citations=True)
    assert model.requests[0].system == TASK_SYSTEM + CITATION_RULE
    assert "After each sentence, add its source" in CITATION_RULE


async def test_context_is_trimmed_oldest_first_to_leave_room_for_the_text() -> None:
    model = echo_model(700)
    s = Summarizer(model, max_tokens=64, context_chars=5000)
    context = "OLD " * 600 + "NEWEST"
    await s.summarize(page("t", 3000), source="s", query="q", context=context)
    prompt = model.requests[0].messages[0].content
    assert "NEWEST" in prompt and prompt.count("OLD") < 600
    assert all(model.count_tokens(r) <= 700 - 64 for r in model.requests)


async def test_merged_summary_is_one_call_cut_to_fit() -> None:
    model = echo_model(900)
    s = Summarizer(model, max_tokens=100)
    await s.merge([(f"fetch({i})", page(str(i), 2000)) for i in range(4)])
    assert len(model.requests) == 1 and model.count_tokens(model.requests[0]) <= 800
    assert "did not fit the summariser's window and was cut" in model.requests[0].messages[0].content


async def test_a_window_without_room_for_text_fails_without_calling() -> None:
    model = echo_model(160)
    with pytest.raises(SummaryError, match="no room"):
        await Summarizer(model, max_tokens=100).summarize(page("x", 5000), source="s")
    assert model.requests == []


async def test_backend_errors_and_empty_summaries_are_summary_errors() -> None:
    failing = ScriptedModel([ModelUnavailableError("down", model="m")])
    with pytest.raises(SummaryError, match="down"):
        await Summarizer(failing).summarize("x " * 100, source="s")
    empty = ScriptedModel([reply("   ")])
    with pytest.raises(SummaryError, match="empty"):
        await Summarizer(empty).summarize("x " * 100, source="s")


async def test_a_summary_cut_at_max_tokens_keeps_the_streamed_text() -> None:
    model = ScriptedModel([reply("Ana left Acme in 2022 and", finish_reason="length")])
    out = await Summarizer(model).summarize("x " * 100, source="s")
    assert out == "Ana left Acme in 2022 and […]"


def test_requests_have_no_tools_and_reserve_the_reply_budget() -> None:
    s = Summarizer(ScriptedModel(context_window=1000), max_tokens=300)
    req: ModelRequest = s.request("sys", "user")
    assert req.tools == () and req.max_tokens == 300 and s.budget == 700


def test_a_task_aware_summary_keeps_only_sentences_copied_from_its_source() -> None:
    source = (
        "Menu | Login. Dario Vance co-founded Helix in 2014. In 2020, he left Helix to start a bakery. "
        "Cookies help us improve. Sunniva Berg is still the CTO of Helix."
    )
    summary = (
        "- Dario Vance co-founded Helix in 2014.\n"
        "In 2020 he left Helix to start a bakery. [source: fetch: helix.test]\n"
        "Dario Vance still works at Helix.\n"  # the summariser's own conclusion: not in the page
        "Tobin Rae left Helix in 2019.\n"  # copied from the context it was shown: not in this page
        "Yes relevant information."
    )
    kept = verbatim(summary, source)
    assert kept == (
        "Dario Vance co-founded Helix in 2014. In 2020 he left Helix to start a bakery. [source: fetch: helix.test]"
    )
    assert verbatim("Dario Vance still works at Helix.", source) == NOTHING_RELEVANT
    assert verbatim(NOTHING_RELEVANT, source) == NOTHING_RELEVANT


NOISY_PAGE = "\n\n".join(
    [
        "Home | News | Companies | People | Log in",
        "We use cookies to improve your experience. Accept all | Reject",
        "Analysts expect the market for edge analytics to grow next year, driven by mid-sized firms. " * 3,
        "Mara Quist co-founded Helix Labs in 2012. In 2016, Mara Quist became chief scientist of Helix Labs.",
        "Sponsored: CloudNest hosting gives growing teams 50% off their first year.",
        "Mara Quist left Helix Labs in 2021 to start Fjordline.",
        "Related articles:\n- Oskar Brandvold steps down at Norrow Systems (2019)",
        "Conference organisers reported record attendance this year, with 40 sessions. " * 4,
        "Comments (2)\nanon_vc: Great read!\npm_rik: The culture was always impressive.",
    ]
)


def test_focus_keeps_the_paragraphs_about_the_task_in_their_order() -> None:
    query = "Does Mara Quist, a co-founder of Helix Labs, still work there? If not, which year did they leave?"
    kept = focus(NOISY_PAGE, query, budget=400)
    assert kept.split("\n\n") == [
        "Mara Quist co-founded Helix Labs in 2012. In 2016, Mara Quist became chief scientist of Helix Labs.",
        "Mara Quist left Helix Labs in 2021 to start Fjordline.",
    ]  # navigation, ads, filler sharing only "year", another person's teaser: gone
    assert focus(NOISY_PAGE, query, budget=0) == NOISY_PAGE  # off
    assert focus(NOISY_PAGE, query, budget=len(NOISY_PAGE)) == NOISY_PAGE  # short enough already
    assert focus(NOISY_PAGE, "quarterly tax forms", budget=400) == NOISY_PAGE  # nothing shared: no guessing
    assert focus("one paragraph " * 100, "paragraph", budget=100) == "one paragraph " * 100


async def test_a_task_aware_call_reads_only_the_focused_paragraphs() -> None:
    model = echo_model(4096)
    summarizer = Summarizer(model, focus_chars=400)
    summary = await summarizer.summarize(NOISY_PAGE, source="search", query="Where is Mara Quist of Helix Labs now?")
    assert text_part(model.requests[0]).startswith("Mara Quist co-founded Helix Labs in 2012.")
    assert "cookies" not in text_part(model.requests[0]) and "Oskar" not in text_part(model.requests[0])
    assert summary.startswith("Mara Quist co-founded Helix Labs")  # still checked against what it read
    generic = Summarizer(echo_model(4096), focus_chars=400)
    await generic.summarize(NOISY_PAGE, source="search")  # a generic summary reads the whole text
    assert "cookies" in generic.model.requests[0].messages[0].content  # type: ignore[attr-defined]


async def test_a_summary_that_copied_nothing_falls_back_to_the_focused_excerpt() -> None:
    query = "Where is Mara Quist of Helix Labs now?"
    invents = ScriptedModel([lambda r: reply("Yes, Mara Quist still works at Helix Labs.")], context_window=4096)
    summary = await Summarizer(invents, focus_chars=400).summarize(NOISY_PAGE, source="search", query=query)
    assert summary == focus(NOISY_PAGE, query, 400)  # the page's own words, never the invented claim
    honest = ScriptedModel([lambda r: reply(NOTHING_RELEVANT)], context_window=4096)
    summary = await Summarizer(honest, focus_chars=400).summarize(NOISY_PAGE, source="search", query=query)
    assert summary == NOTHING_RELEVANT  # a model that says the page does not help is believed
    unfocused = ScriptedModel([lambda r: reply("Yes, Mara Quist still works at Helix Labs.")], context_window=4096)
    summary = await Summarizer(unfocused).summarize(NOISY_PAGE, source="search", query=query)
    assert summary == NOTHING_RELEVANT  # no excerpt to fall back on: the whole page is not a summary
