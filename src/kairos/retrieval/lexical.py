"""An in-memory Okapi BM25 over the words of :func:`kairos.retrieval.text.tokens`.

The tokenizer lower-cases, splits on anything that is not a letter or digit, drops stop words and
strips plurals and ``-ing`` (see :mod:`kairos.retrieval.text`, shared with every other word match).

BM25 is a small own implementation: the corpora here (a tool catalog, the paragraphs of one page)
are hundreds of short documents, where a dependency buys nothing and one query takes well under
a millisecond. The knowledge base's BM25 is tantivy's, over an index kept beside its rows
(:mod:`kairos.knowledge.bm25`); user memory's is SQLite FTS5's (:mod:`kairos.memory.store`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from kairos.retrieval.text import tokens


class BM25:
    """Okapi BM25 over a fixed list of documents, tokenized with :func:`~kairos.retrieval.text.tokens`.

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


__all__ = ["BM25"]
