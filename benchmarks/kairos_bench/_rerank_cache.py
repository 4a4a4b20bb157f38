"""Reranker verdicts cached on disk, so a bench rerun (another depth, another split) costs no model time.

On the bundled model a verdict costs about 2 s per LoCoMo candidate (its turn and the turn before),
so one run at depth 40 over a small sample is most of an hour; the scores of a (query, passage)
pair do not depend on the depth or the other candidates, so they are kept by digest and reused.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from kairos.knowledge.contextual import ContextCache, digest
from kairos.knowledge.rerank import Reranker, RerankStats


class CachedReranker:
    """Wraps a reranker: a (reranker name, query, passage) verdict is asked for once and then read from ``cache``."""

    def __init__(self, inner: Reranker, cache: ContextCache) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.from_cache = 0
        self.judged = RerankStats()
        """What the verdicts not in the cache cost (summed over calls)."""

    async def score(self, query: str, passages: Sequence[str]) -> list[float | None]:
        """Cached scores where known; the inner reranker judges the rest (in one call, order kept)."""
        q = digest(query)
        known = [self.cache.get(self.name, q, digest(p)) for p in passages]
        missing = [i for i, s in enumerate(known) if s is None]
        scores = [None if s in (None, "") else float(s) for s in known]
        self.from_cache += len(passages) - len(missing)
        if missing:
            t0 = time.perf_counter()
            fresh = await self.inner.score(query, [passages[i] for i in missing])
            self.judged.seconds += time.perf_counter() - t0
            self.judged.judged += len(missing)
            stats = getattr(self.inner, "last_stats", None)
            if isinstance(stats, RerankStats):
                self.judged.prompt_tokens += stats.prompt_tokens
                self.judged.cached_prompt_tokens += stats.cached_prompt_tokens
            for i, s in zip(missing, fresh, strict=True):
                scores[i] = s
                self.cache.put(self.name, q, digest(passages[i]), "" if s is None else repr(s))
        return scores
