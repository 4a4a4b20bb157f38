from __future__ import annotations

import asyncio
from pathlib import Path

from kairos.errors import ModelUnavailableError
from kairos.knowledge import KnowledgeBase, Turn
from kairos.knowledge.contextual import ContextCache, ContextWriter, add_conversation, add_paths, windows
from kairos.knowledge.records import ChunkIn
from kairos.knowledge.store import Filters
from kairos.models.types import ModelRequest, ModelResponse, Usage
from kairos.testing import ScriptedModel, reply

MAY, JUNE = 1_683_500_000.0, 1_685_600_000.0
TURNS = [
    Turn("Ann", "We finally got him home!", "D1:1", MAY, "8 May, 2023"),
    Turn("Bo", "Congrats, what breed is he?", "D1:2", MAY, "8 May, 2023"),
    Turn("Bo", "The bowl cracked again.", "D2:1", JUNE, "1 June, 2023"),
]
ANY_TIME = Filters(all_versions=True)


def context_for(request: ModelRequest) -> ModelResponse:
    """A scripted writer: names the topic the document is about (the kind of context a model adds)."""
    doc, part = request.messages[0].content, request.messages[1].content
    topic = "adopting a greyhound puppy" if "home" in doc else "a pottery bowl from the kiln"
    speaker = part.split("] ")[1].split(":")[0]
    return ModelResponse(
        reply(f"{speaker} talks about {topic}.").message, Usage(prompt_tokens=100, cached_prompt_tokens=80)
    )


def test_contexts_are_stored_and_searched(kb: KnowledgeBase, tmp_path: Path) -> None:
    model = ScriptedModel([context_for] * 3)
    writer = ContextWriter(model, ContextCache(tmp_path / "ctx.db"))
    result = asyncio.run(add_conversation(kb, writer, "conv", TURNS))
    assert result.status == "added" and result.chunks == 3 and not result.notes
    # "greyhound" and "kiln" are only in the contexts, yet BM25 now finds the turns, returned as they were said
    hits = kb.search("greyhound", k=3, mode="bm25", filters=ANY_TIME).hits
    assert [h.chunk.meta["turn_id"] for h in hits] == ["D1:1", "D1:2"]
    top = kb.search("kiln", k=1, mode="bm25", filters=ANY_TIME).hits[0].chunk
    assert top.meta["turn_id"] == "D2:1" and top.meta["context"] == "Bo talks about a pottery bowl from the kiln."
    assert top.text == "[1 June, 2023] Bo: The bowl cracked again." and top.source == "conv"
    # the contextualised copy is the document's twin: stored, never listed or returned itself
    twin = kb.store.find_current("conv#contexts")
    assert twin is not None and twin.kind == "context" and twin.chunks == 3
    assert [d.source for d in kb.list_documents()] == ["conv"]
    # per session: the document first (the same message for both turns of May), the turn last
    first, second, third = model.requests
    assert first.messages[0] == second.messages[0] != third.messages[0]
    assert "We finally got him home!" in first.messages[0].content and "cracked" not in first.messages[0].content
    assert "what breed" in second.messages[1].content
    assert writer.stats.generated == 3 and writer.stats.reuse == 0.8


def test_a_rerun_is_served_from_the_disk_cache(tmp_path: Path) -> None:
    from kairos.knowledge import HashEmbedder

    cache_path = tmp_path / "ctx.db"
    first = ContextWriter(ScriptedModel([context_for] * 3, name="m"), ContextCache(cache_path))
    kb1 = KnowledgeBase.open(tmp_path / "one", HashEmbedder())
    asyncio.run(add_conversation(kb1, first, "conv", TURNS))
    first.cache.close()  # type: ignore[union-attr]
    idle = ScriptedModel([], name="m")  # any call would fail: no steps
    again = ContextWriter(idle, ContextCache(cache_path))
    kb2 = KnowledgeBase.open(tmp_path / "two", HashEmbedder())
    result = asyncio.run(add_conversation(kb2, again, "conv", TURNS))
    assert idle.requests == [] and again.stats.from_cache == 3 and again.stats.generated == 0
    assert result.status == "added" and not result.notes
    hit = kb2.search("greyhound", k=1, mode="bm25", filters=ANY_TIME).hits[0]
    assert hit.chunk.meta["context"].endswith("adopting a greyhound puppy.")
    # the key is (model, document, chunk): the same session text hits, another model does not
    part = "[8 May, 2023] Ann: We finally got him home!"
    session = part + "\n[8 May, 2023] Bo: Congrats, what breed is he?"
    assert asyncio.run(again.contexts(session, [part]))[0] == "Ann talks about adopting a greyhound puppy."
    other = ContextWriter(ScriptedModel([context_for] * 3, name="other"), ContextCache(cache_path))
    asyncio.run(other.contexts(session, [part]))
    assert other.stats.from_cache == 0 and other.stats.generated == 1
    kb1.close()
    kb2.close()


def test_model_failure_indexes_without_context_and_says_so(kb: KnowledgeBase) -> None:
    model = ScriptedModel([context_for, ModelUnavailableError("gone", model="m"), context_for])
    writer = ContextWriter(model)
    result = asyncio.run(add_conversation(kb, writer, "conv", TURNS))
    assert result.status == "added" and result.chunks == 3
    assert any("context generation failed" in n and "ModelUnavailableError" in n for n in result.notes)
    assert len(model.requests) == 2  # after the failure the model is not asked again for this batch
    texts = {h.chunk.meta["turn_id"]: h.chunk for h in kb.search("bowl breed home", k=3, filters=ANY_TIME).hits}
    assert "context" in texts["D1:1"].meta and "context" not in texts["D1:2"].meta
    assert texts["D2:1"].text == "[1 June, 2023] Bo: The bowl cracked again."
    twin = kb.store.find_current("conv#contexts")
    assert twin is not None and twin.chunks == 1  # only the turn that got a context has a twin
    assert writer.stats.failed == 2 and writer.stats.generated == 1


def test_an_empty_answer_leaves_the_chunk_plain(kb: KnowledgeBase) -> None:
    writer = ContextWriter(ScriptedModel([reply("   ")] * 3))
    result = asyncio.run(add_conversation(kb, writer, "conv", TURNS))
    assert result.status == "added" and any("empty context" in n for n in result.notes)
    assert writer.stats.failed == 3 and kb.store.find_current("conv#contexts") is None  # no context: no twin


def test_windows_split_sessions_and_long_documents() -> None:
    turns = [ChunkIn("x " * 10, i, valid_from=MAY if i < 3 else JUNE) for i in range(5)]
    assert windows(turns, "conversation") == [[0, 1, 2], [3, 4]]
    assert windows(turns, "markdown") == [[0, 1, 2, 3, 4]]
    assert windows(turns, "markdown", budget=25) == [[0, 1], [2, 3], [4]]


def test_add_paths_contextualises_files_and_reports_bad_ones(kb: KnowledgeBase, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Kiln\n\nFire the glaze at cone 6.")
    (tmp_path / "b.bin").write_bytes(b"\x00\xff" * 50)
    (tmp_path / "empty.txt").write_text("  \n")
    ticks: list[int] = []
    model = ScriptedModel([reply("Pottery studio manual, firing section."), ModelUnavailableError("gone", model="m")])
    hook = lambda: ticks.append(1)  # noqa: E731
    writer = ContextWriter(model, on_chunk=hook)
    files = [tmp_path / "a.md", tmp_path / "b.bin", tmp_path / "empty.txt", tmp_path / "missing.md"]
    results = asyncio.run(add_paths(kb, writer, files))
    status = {Path(r.source).name: (r.status, r.message) for r in results}
    assert status["a.md"] == ("added", "")
    assert status["b.bin"][0] == status["empty.txt"][0] == status["missing.md"][0] == "error"
    assert "empty document" in status["empty.txt"][1] and "no such file" in status["missing.md"][1]
    hit = kb.search("studio manual", k=1, mode="bm25").hits[0].chunk
    assert hit.meta["context"] == "Pottery studio manual, firing section." and "cone 6" in hit.text
    assert not hit.text.startswith("Context:")
    assert ticks == [1] and writer.on_chunk is hook  # the caller's hook ran too and is back in place
