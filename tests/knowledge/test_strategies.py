"""Search modes that register themselves: the summary tree's and the entity graph's, and any other."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from kairos.knowledge import KnowledgeBase, SearchResult
from kairos.knowledge import strategies as strategies_module
from kairos.knowledge.entity_graph import search_graph
from kairos.knowledge.records import Filters
from kairos.knowledge.strategies import register_strategy, registered_modes, strategy_for
from kairos.knowledge.summary_tree import search_tree


@pytest.fixture
def restore_registry() -> Iterator[None]:
    saved = dict(strategies_module._STRATEGIES)
    yield
    strategies_module._STRATEGIES.clear()
    strategies_module._STRATEGIES.update(saved)


def test_the_tree_and_the_graph_register_their_modes() -> None:
    assert strategy_for("hybrid+tree") is search_tree and strategy_for("hybrid+graph") is search_graph
    assert {"hybrid+tree", "hybrid+graph"} <= set(registered_modes()) and strategy_for("hybrid") is None


def test_the_modes_are_registered_whatever_the_caller_imported() -> None:
    code = (
        "from kairos.knowledge.base import KnowledgeBase; from kairos.knowledge.strategies import registered_modes; "
        "print(sorted(registered_modes()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['hybrid+graph', 'hybrid+tree']"


def test_a_registered_strategy_runs_its_mode(kb: KnowledgeBase, restore_registry: None) -> None:
    seen: list[tuple[str, int, Filters]] = []

    def echo(base: KnowledgeBase, query: str, k: int, filters: Filters) -> SearchResult:
        assert base is kb
        seen.append((query, k, filters))
        return SearchResult([], warning="echo")

    register_strategy("echo", echo)
    assert kb.search("hello", 3, "echo").warning == "echo"  # type: ignore[arg-type]
    assert kb.search("   ", 3, "echo").hits == [] and len(seen) == 1  # an empty query never reaches it


def test_an_unknown_mode_names_every_mode(kb: KnowledgeBase) -> None:
    with pytest.raises(ValueError) as raised:
        kb.search("hello", 3, "fuzzy")  # type: ignore[arg-type]
    assert str(raised.value) == (
        "unknown search mode 'fuzzy': use bm25, dense, hybrid, hybrid+rerank, hybrid+tree or hybrid+graph"
    )
