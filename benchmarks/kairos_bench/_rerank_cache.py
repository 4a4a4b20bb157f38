"""Reranker verdicts cached on disk, so a bench rerun (another depth, another split) costs no model time.

On the bundled model a verdict costs about 2 s per LoCoMo candidate (its turn and the turn before),
so one run at depth 40 over a small sample is most of an hour; the scores of a (query, passage)
pair do not depend on the depth or the other candidates, so they are kept by digest and reused.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from kairos.knowledge.contextual import ContextCache, digest
from kairos.knowledge.rerank import Reranker, RerankStats


@dataclass(slots=True)
class CacheTally:
    """Verdicts served from the cache and judged anew, with the new ones' model cost."""

    from_cache: int = 0
    judged: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    seconds: float = 0.0


class CachedReranker:
    """Wraps a reranker: a (reranker name, query, passage) verdict is asked for once and then read from ``cache``."""

    def __init__(self, inner: Reranker, cache: ContextCache) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.tally = CacheTally()

    async def score(self, query: str, passages: Sequence[str]) -> list[float | None]:
        """Cached scores where known; the inner reranker judges the rest (in one call, order kept)."""
        q = digest(query)
        known = [self.cache.get(self.name, q, digest(p)) for p in passages]
        missing = [i for i, s in enumerate(known) if s is None]
        scores = [None if s in (None, "") else float(s) for s in known]
        self.tally.from_cache += len(passages) - len(missing)
        if missing:
            t0 = time.perf_counter()
            fresh = await self.inner.score(query, [passages[i] for i in missing])
            self.tally.seconds += time.perf_counter() - t0
            self.tally.judged += len(missing)
            stats = getattr(self.inner, "last_stats", None)
            if isinstance(stats, RerankStats):
                self.tally.prompt_tokens += stats.prompt_tokens
                self.tally.cached_prompt_tokens += stats.cached_prompt_tokens
            for i, s in zip(missing, fresh, strict=True):
                scores[i] = s
                self.cache.put(self.name, q, digest(passages[i]), "" if s is None else repr(s))
        return scores
