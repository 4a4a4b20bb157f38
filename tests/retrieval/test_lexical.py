"""The in-memory BM25: what discovery and page excerpts rank by."""

from __future__ import annotations

from kairos.retrieval.lexical import BM25


def test_bm25_ranks_rare_words_higher_and_scores_every_document() -> None:
    bm = BM25(["weather forecast for a city", "stock price of a company", "price of a flight", "stock stock stock"])
    s = bm.scores("stock prices")
    assert len(s) == 4 and s[1] > s[2] > 0 and s[0] == 0
    assert bm.scores("") == [0.0] * 4 and bm.scores("zebra") == [0.0] * 4


def test_bm25_prefers_the_shorter_document_and_counts_a_repeated_query_word() -> None:
    bm = BM25(["rocket launch", "rocket launch and a long story about gardens tomatoes soil and rain", "gardens"])
    s = bm.scores("rocket")
    assert s[0] > s[1] > 0 == s[2]
    assert bm.scores("rocket rocket")[0] == 2 * s[0]


def test_bm25_over_no_documents_or_empty_ones() -> None:
    assert BM25([]).scores("anything") == []
    assert BM25(["", "the of"]).scores("the") == [0.0, 0.0]
