"""Fusion of retrievers: by normalised scores (the knowledge base's hybrid) or by rank (RRF).

:func:`score_fusion` keeps how sure each retriever is; :func:`rrf_scores` (Cormack et al., 2009) keeps only
the order, for lists whose scores mean nothing side by side (an entity graph's hops, tool discovery's
per-field lists). An item at rank ``r`` (1 = best) of an RRF ranking adds ``weight / (k + r)``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

RRF_K = 60
"""The usual RRF constant: a hit at rank r adds 1 / (60 + r)."""


def rrf_scores(
    rankings: Sequence[Sequence[K]], weights: Sequence[float] | None = None, k: int = RRF_K
) -> dict[K, float]:
    """The fused score of every item of ``rankings`` (each a list of keys, best first; ``weights`` default 1).

    Raises:
        ValueError: ``weights`` does not give one weight per ranking.
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    fused: dict[K, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + weight / (k + rank)
    return fused


def score_fusion(lists: Sequence[tuple[Mapping[K, float], float]]) -> dict[K, float]:
    """Weighted sum of each list's min-max normalised scores, for every item of any list.

    ``lists``: ``(scores, weight)`` per retriever, each its top candidates. An item a list did not return
    scores that list's lowest (it ranked below all of them there), so it is not wiped out by one
    retriever's miss. On LoCoMo this beats RRF, which throws the scores away: a dense runner-up far below
    the BM25 winner counts as much as a close one (recall@10 0.722 against RRF's 0.683 and BM25's 0.705).
    """
    keys = list(dict.fromkeys(key for scores, _ in lists for key in scores))
    fused = dict.fromkeys(keys, 0.0)
    for scores, weight in lists:
        if not scores:
            continue
        lo, hi = min(scores.values()), max(scores.values())
        for key in keys:
            if hi > lo:
                fused[key] += weight * (scores.get(key, lo) - lo) / (hi - lo)
            elif key in scores:
                fused[key] += weight
    return fused


def best_first(scores: Sequence[float]) -> list[int]:
    """The indices of ``scores``, highest score first (ties keep their order)."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])


def rrf_of_scores(score_lists: Sequence[tuple[Sequence[float], float]], k: int = RRF_K) -> list[float]:
    """Weighted RRF of ``(scores, weight)`` lists that score the same items; one fused score per item.

    Every item is ranked in every list (a zero score still has a rank; ties are broken by position).
    """
    if not score_lists:
        return []
    fused = rrf_scores([best_first(s) for s, _ in score_lists], [w for _, w in score_lists], k)
    return [fused.get(i, 0.0) for i in range(len(score_lists[0][0]))]


__all__ = ["RRF_K", "best_first", "rrf_of_scores", "rrf_scores", "score_fusion"]
