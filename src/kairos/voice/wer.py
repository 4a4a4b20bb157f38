"""Word error rate with a small normaliser, for tests and the voice bench."""

from __future__ import annotations

import re

_DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def normalize(text: str) -> list[str]:
    """Lower case, punctuation gone, each digit spelled out ("555" -> "five five five")."""
    text = re.sub(r"\d", lambda m: f" {_DIGITS[int(m.group())]} ", text.lower())
    return re.findall(r"[a-z']+", text.replace("'", ""))


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / reference words, after :func:`normalize`."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / len(ref)
