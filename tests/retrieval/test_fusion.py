"""Fusion: by normalised scores (the hybrid search) and by rank (RRF), weighted, deterministic on ties."""

from __future__ import annotations

import pytest

from kairos.retrieval.fusion import RRF_K, best_first, rrf_of_scores, rrf_scores, score_fusion


def test_rrf_sums_reciprocal_ranks_with_k_60() -> None:
    fused = rrf_scores([["a", "b"], ["b", "c"]])
    assert RRF_K == 60
    assert fused == {"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 62}


def test_weights_scale_each_ranking_and_must_match_it() -> None:
    fused = rrf_scores([["a", "b"], ["b", "a"]], [2.0, 1.0], k=0)
    assert fused == {"a": 2.0 + 1 / 2, "b": 1.0 + 1.0}
    with pytest.raises(ValueError, match="1 weights for 2 rankings"):
        rrf_scores([["a"], ["b"]], [1.0])
    assert rrf_scores([]) == {} and rrf_scores([[], []]) == {}


def test_best_first_keeps_ties_in_order() -> None:
    assert best_first([0.1, 0.5, 0.5, 0.0]) == [1, 2, 0, 3]
    assert best_first([]) == []


def test_fusing_score_lists_ranks_every_item_in_every_list() -> None:
    words = [0.0, 3.0, 1.0]
    meaning = [0.9, 0.1, 0.8]
    fused = rrf_of_scores([(words, 1.0), (meaning, 1.0)])
    assert fused == [1 / 63 + 1 / 61, 1 / 61 + 1 / 63, 1 / 62 + 1 / 62]
    assert fused[0] == fused[1] > fused[2]  # first in one list beats second in both (1 / (k + r) is convex)
    assert rrf_of_scores([(words, 0.0), (meaning, 1.0)]) == [1 / 61, 1 / 63, 1 / 62]
    assert rrf_of_scores([]) == [] and rrf_of_scores([([], 1.0)]) == []


def test_score_fusion_weighs_normalised_scores_and_floors_a_miss_at_the_lists_lowest() -> None:
    bm25 = {"a": 12.0, "b": 6.0, "c": 2.0}  # BM25's scale
    cosine = {"b": 0.91, "d": 0.90, "c": 0.81}  # a cosine's scale: the same weight after normalising
    fused = score_fusion([(bm25, 0.5), (cosine, 0.5)])
    assert fused == pytest.approx({"a": 0.5, "b": 0.5 * 0.4 + 0.5, "c": 0.0, "d": 0.5 * 0.9})
    assert max(fused, key=fused.__getitem__) == "b"  # good in both beats first in one (RRF would tie a and b)


def test_score_fusion_of_single_or_empty_lists() -> None:
    assert score_fusion([({"a": 3.0}, 0.6), ({"b": 0.5}, 0.4)]) == {"a": 0.6, "b": 0.4}
    assert score_fusion([({}, 1.0), ({}, 1.0)]) == {}
    assert score_fusion([]) == {}
