"""Words for lexical retrieval: one stop-word list, one tokenizer, and an in-memory Okapi BM25.

The tokenizer lower-cases, splits on anything that is not a letter or digit (``snake_case`` names
become words), drops stop words and strips plurals and ``-ing`` ("prices" → "price", "raining" →
"rain"). Letters of any script count: "Zürich" is one word. On ASCII text it is exactly the
tokenizer tool discovery was measured with (``kairos bench tool-discovery``), so its rankings hold.

BM25 is a small own implementation: the corpora here (a tool catalog, the paragraphs of one page)
are hundreds of short documents, where a dependency buys nothing and one query takes well under
a millisecond. The knowledge base's BM25 is SQLite FTS5's, over its own index.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_WORD = re.compile(r"[^\W_]+")
"""Runs of letters and digits (``\\w`` without the underscore)."""

STOPWORDS = frozenset(
    # function words, and the words of a request that say nothing about what is wanted ("please find me")
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "could",
        "do",
        "does",
        "for",
        "from",
        "get",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "need",
        "of",
        "on",
        "or",
        "please",
        "should",
        "show",
        "some",
        "tell",
        "than",
        "that",
        "the",
        "then",
        "there",
        "these",
        "this",
        "those",
        "to",
        "up",
        "use",
        "want",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "will",
        "with",
        "would",
        "you",
        "your",
        "find",
    ]
)
"""Words :func:`tokens` drops. A word is added only if no catalog text uses it (else discovery's rankings move)."""


def stem(word: str) -> str:
    """A light suffix stripper: plurals and ``-ing`` ("prices" → "price", "cities" → "city", "raining" → "rain")."""
    if len(word) > 5 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 6 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """The words of ``text`` that BM25 compares: lower-cased, stop words dropped, stemmed, in order."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


class BM25:
    """Okapi BM25 over a fixed list of documents, tokenized with :func:`tokens`.

    Args:
        docs: the documents' texts.
        k1: term-frequency saturation.
        b: length normalisation.
    """

    def __init__(self, docs: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(tokens(d)) for d in docs]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.avg = (sum(self.lengths) / len(self.lengths)) if self.docs else 1.0
        df: Counter[str] = Counter(w for c in self.docs for w in c)
        n = len(self.docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def scores(self, query: str) -> list[float]:
        """One score per document, in order (0 where no query word occurs; a repeated query word counts again)."""
        q = [w for w in tokens(query) if w in self.idf]
        out = []
        for c, length in zip(self.docs, self.lengths, strict=True):
            s = 0.0
            for w in q:
                tf = c.get(w, 0)
                if tf:
                    s += self.idf[w] * tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * length / self.avg))
            out.append(s)
        return out


__all__ = ["BM25", "STOPWORDS", "stem", "tokens"]
