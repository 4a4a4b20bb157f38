"""The ``kairos`` command line: the typer app, and where each command and command group comes from.

The commands live in modules of their own: ``run``, ``chat`` and ``sessions`` in :mod:`kairos.cli.agent`,
``config`` and ``trust`` in :mod:`kairos.cli.settings`, ``bench`` in :mod:`kairos.cli.benchmarks`,
``serve`` and ``ui`` in :mod:`kairos.cli.serve`, ``worker`` in :mod:`kairos.cli.worker`, ``voice`` in
:mod:`kairos.cli.voice`, and the groups
``models``, ``skills``, ``mcp``, ``kb`` and ``memory`` in the modules of those names.
"""

from __future__ import annotations

from typing import Any

import typer
import typer.core

# re-exported: serve.py and worker.py import these from here (and the tests' conftest the consoles)
from kairos.cli._console import _text as _text
from kairos.cli._console import console as console
from kairos.cli._console import err_console as err_console
from kairos.cli._workspace import _fail as _fail
from kairos.cli._workspace import _notices as _notices
from kairos.cli.agent import chat, run, sessions
from kairos.cli.benchmarks import bench
from kairos.cli.kb import kb_app
from kairos.cli.mcp import mcp_app
from kairos.cli.memory import memory_app
from kairos.cli.models import models_app
from kairos.cli.serve import serve, ui
from kairos.cli.settings import show_config, trust
from kairos.cli.skills import skills_app
from kairos.cli.voice import voice
from kairos.cli.worker import worker
from kairos.errors import KairosError


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
app.add_typer(models_app, name="models")
app.add_typer(skills_app, name="skills")
app.add_typer(mcp_app, name="mcp")
app.add_typer(kb_app, name="kb")
app.add_typer(memory_app, name="memory")
app.command()(run)
app.command("config")(show_config)
app.command()(trust)
app.command()(chat)
app.command()(sessions)
app.command()(bench)
app.command()(serve)
app.command()(ui)
app.command()(worker)
app.command()(voice)


def main() -> None:  # pragma: no cover - console entry point
    """The ``kairos`` command (see :mod:`kairos.__main__`)."""
    app()
