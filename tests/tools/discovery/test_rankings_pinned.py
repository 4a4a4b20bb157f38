"""Discovery rankings pinned exactly, so a change to the shared retrieval pieces cannot move them unnoticed.

The expected lists were recorded from the index before its tokenizer, BM25, RRF and embedder moved
to :mod:`kairos.retrieval`; ``kairos bench tool-discovery`` depends on them staying the same. The
word-only scores were re-recorded once, when the three stop-word lists became one
(:data:`kairos.retrieval.text.STOPWORDS`): "did", "its", "their" and "why" became stop words, which
shortens some tool texts; every ranking stayed the same.
"""

from __future__ import annotations

import pytest

from kairos.plugins.discovery import catalog_servers
from kairos.tools.discovery import ToolIndex

BM25_ONLY = {
    "stock prices prices": [
        ("get_stock_quote", 11.259),
        ("get_stock_history", 8.055),
        ("search_products", 7.654),
        ("get_crypto_price", 6.748),
        ("compare_prices", 7.251),
    ],
    "arXiv papers on transformers": [
        ("search_arxiv", 11.804),
        ("get_paper_citations", 8.484),
        ("get_paper_abstract", 8.225),
        ("download_paper_pdf", 7.931),
        ("format_citation", 7.345),
    ],
    "What's the monthly payment on a 250000 loan at 5.5 percent a year for 20 years?": [
        ("calculate_loan_payment", 31.361),
        ("get_public_holidays", 11.945),
        ("get_portfolio_holdings", 1.774),
        ("lookup_contact", 2.32),
        ("list_calendar_events", 1.957),
    ],
    "will it snow in Denver over the next few days": [
        ("get_stock_history", 6.681),
        ("get_weather_forecast", 5.962),
        ("get_hourly_forecast", 4.056),
        ("get_sunrise_sunset", 2.107),
        ("get_historical_weather", 1.972),
    ],
}

HYBRID = {
    "stock prices prices": [
        "get_stock_quote",
        "get_stock_history",
        "compare_prices",
        "get_company_fundamentals",
        "get_crypto_price",
    ],
    "bibtex citation": [
        "format_citation",
        "get_paper_citations",
        "get_stock_quote",
        "search_scholar",
        "get_author_profile",
    ],
    "arXiv papers on transformers": [
        "search_arxiv",
        "get_paper_abstract",
        "download_paper_pdf",
        "get_paper_citations",
        "get_trending_papers",
    ],
    "send an email to Bob": [
        "send_email",
        "reply_to_email",
        "invite_attendees",
        "create_email_draft",
        "forward_email",
    ],
    "café near me": [
        "find_nearby_places",
        "search_local_businesses",
        "reverse_geocode",
        "geocode_address",
        "search_flights",
    ],
}


@pytest.mark.parametrize("need", list(BM25_ONLY))
def test_word_only_rankings_and_scores_are_unchanged(need: str) -> None:
    index = ToolIndex(catalog_servers())
    hits = index.search(need, 5).hits
    assert [(h.tool.name, h.bm25) for h in hits] == BM25_ONLY[need]


@pytest.mark.parametrize("need", list(HYBRID))
def test_hybrid_rankings_are_unchanged(index: ToolIndex, need: str) -> None:
    assert [h.tool.name for h in index.search(need, 5).hits] == HYBRID[need]


def test_servers_and_not_found_are_unchanged(index: ToolIndex) -> None:
    s = index.search("will it snow in Denver over the next few days", 5)
    assert s.servers == ("weather", "news", "calendar", "finance") and s.best_similarity == 0.836
    juggling = index.search("teach me to juggle three balls", 3, always=True)
    assert not juggling.found
    names = [h.tool.name for h in juggling.hits]
    assert names == ["get_company_fundamentals", "summarize_webpage", "get_exchange_rate"]
