"""Search modes beyond the base ones: a strategy registers itself by name where it is implemented.

:meth:`KnowledgeBase.search <kairos.knowledge.base.KnowledgeBase.search>` runs ``bm25``, ``dense``,
``hybrid`` and ``hybrid+rerank`` itself; any other mode is looked up here. The summary tree
(``hybrid+tree``, :mod:`kairos.knowledge.summary_tree`) and the entity graph (``hybrid+graph``,
:mod:`kairos.knowledge.entity_graph`) register theirs when imported, and the package imports both,
so every mode works whichever module a caller imported. This keeps the base free of them: they
build on :class:`~kairos.knowledge.base.KnowledgeBase`, never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from kairos.knowledge.base import KnowledgeBase, SearchResult
    from kairos.knowledge.records import Filters

Strategy: TypeAlias = "Callable[[KnowledgeBase, str, int, Filters], SearchResult]"
"""``(knowledge base, query, k, filters) -> result``; called only with a non-empty query and ``k > 0``."""

_STRATEGIES: dict[str, Strategy] = {}


def register_strategy(mode: str, strategy: Strategy) -> None:
    """Make ``mode`` a search mode run by ``strategy`` (registering a mode again replaces its strategy)."""
    _STRATEGIES[mode] = strategy


def strategy_for(mode: str) -> Strategy | None:
    """The strategy registered for ``mode``; None if there is none."""
    return _STRATEGIES.get(mode)


def registered_modes() -> tuple[str, ...]:
    """The registered modes, in the order they were first registered."""
    return tuple(_STRATEGIES)


__all__ = ["Strategy", "register_strategy", "registered_modes", "strategy_for"]
