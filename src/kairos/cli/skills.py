"""``kairos skills``: list, review, approve, revoke and scaffold skills.

Mounted by the main CLI as ``app.add_typer(skills_app, name="skills")``. Approval is the review
gate for third-party skills (book ch2 anti-pattern 18): ``show`` prints every file of a skill so
the owner can read what the model would be told and what its scripts do before ``approve``
(escape sequences in those files are shown, not obeyed). Approvals are recorded in the user's
config dir (``<user config dir>/approvals.json``), never in the workspace.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kairos.cli._console import _text, console, err_console, existing_workspace
from kairos.errors import ConfigError
from kairos.paths import STATE_DIR_NAME

if TYPE_CHECKING:
    from kairos.skills.catalog import SkillCatalog, SkillEntry
    from kairos.skills.config import SkillsConfig

skills_app = typer.Typer(help="List, review, approve and create skills.", no_args_is_help=True, rich_markup_mode=None)

WorkspaceOpt = Annotated[
    Path, typer.Option("--workspace", "-w", help="the workspace whose skills to manage", callback=existing_workspace)
]
NameArg = Annotated[str, typer.Argument(help="the skill's name")]
_STYLE = {
    "trusted": "green",
    "approved": "green",
    "needs_approval": "yellow",
    "needs_trust": "yellow",
    "changed": "yellow",
    "invalid": "red",
    "shadowed": "dim",
}
_SHOW_TEXT_BYTES = 200_000
SKILL_TEMPLATE = """\
---
name: {name}
description: >-
  {description}
---

# {title}

## Role and reader
Who this skill serves, which task it covers, and what a good result looks like. One short
paragraph a new teammate could act on.

## Steps
1. The first thing to do (name the exact command or file).
2. The next step. To run a script of this skill with bash:
   `{{{{python}}}} {{{{skill_dir}}}}/scripts/SCRIPT.py ARGS`
3. How to report the result to the user.

Stop and ask the user when: (the cases where guessing is costly).
Done when: (a check anyone can make).

## Principles
- 3 to 5 decision rules, each with its scope, the action, its exception and how to verify it.
  Good: (an example that follows the rule). Bad: (one that breaks it).

## Prohibitions
- Common mistakes and out-of-scope actions, each with its legitimate exception.

## References
- `reference.md`: (what it holds; when to read it with read_skill_file).
"""


def _catalog(workspace: Path) -> SkillCatalog:
    from kairos.skills.catalog import SkillCatalog

    return SkillCatalog.for_workspace(workspace, _config(workspace))


def _config(workspace: Path) -> SkillsConfig:
    """``[skills]`` of the effective configuration; what loading ignored is shown on stderr."""
    from kairos.config import load_config

    try:
        config = load_config(workspace)
    except ConfigError as e:
        raise _fail(str(e)) from e
    for notice in config.notices:
        err_console.print(f"[yellow]notice:[/] {_text(notice)}")
    return config.skills


def _fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {_text(message)}")
    return typer.Exit(code)


def _entry(catalog: SkillCatalog, name: str) -> SkillEntry:
    entry = catalog.find(name)
    if entry is None:
        names = ", ".join(sorted({e.name for e in catalog.entries()})) or "(none)"
        raise _fail(f"no skill named {name!r}; found: {names}")
    return entry


@skills_app.command("list")
def list_skills(workspace: WorkspaceOpt = Path(".")) -> None:
    """Every skill found, its source and whether the model may use it."""
    from kairos.skills.catalog import LEGACY_APPROVALS_FILE

    catalog = _catalog(workspace)
    entries = catalog.entries()
    if not entries:
        console.print("no skills found; create one with: kairos skills new NAME")
    for e in entries:
        style = _STYLE[e.status]
        console.print(f"[bold]{_text(f'{e.name:24s}')}[/] [{style}]{e.status:14s}[/] [dim]{_text(e.origin)}[/]")
        if e.skill is not None and e.status != "shadowed":
            console.print(f"  {_text(e.skill.summary)}")
        if e.reason:
            console.print(f"  [{style}]{_text(e.reason)}[/]")
    if catalog.approvals.problem:
        err_console.print(f"[yellow]warning:[/] {_text(catalog.approvals.problem)}")
    legacy = catalog.workspace / STATE_DIR_NAME / LEGACY_APPROVALS_FILE if catalog.workspace else None
    if legacy is not None and legacy.exists():
        err_console.print(
            f"[yellow]notice:[/] ignoring {_text(str(legacy))}: approvals inside a workspace could come with "
            f"the repository; they live in {_text(str(catalog.approvals.path))} now (approve skills again)"
        )


@skills_app.command("show")
def show(
    name: NameArg,
    workspace: WorkspaceOpt = Path("."),
    body_only: Annotated[bool, typer.Option("--body-only", help="only the instructions (SKILL.md's body)")] = False,
) -> None:
    """Print a skill for review: status, folder, hash and the full text of every file."""
    from kairos.skills.catalog import SKILL_FILE

    catalog = _catalog(workspace)
    entry = _entry(catalog, name)
    console.print(f"[bold]{_text(entry.name)}[/] [{_STYLE[entry.status]}]{entry.status}[/] {_text(entry.reason)}")
    console.print(f"source: {_text(entry.origin)}\nfolder: {_text(str(entry.folder))}")
    skill = entry.skill
    if skill is None:
        raise typer.Exit(1)
    console.print(f"sha256: {skill.digest}\ndescription: {_text(skill.summary)}\n")
    if body_only:
        console.print(_text(skill.body))
        return
    for rel in [SKILL_FILE, *skill.files()]:
        path = skill.folder / rel
        data = path.read_bytes()
        console.rule(_text(rel))
        if len(data) > _SHOW_TEXT_BYTES:
            console.print(f"[yellow]({len(data)} bytes; too long to show, review it in an editor)[/]")
            continue
        try:
            # escapes shown, not obeyed: a skill must not hide lines from the person reviewing it
            console.print(_text(data.decode("utf-8")))
        except UnicodeDecodeError:
            console.print(f"[yellow](binary file, {len(data)} bytes)[/]")


@skills_app.command("approve")
def approve(
    name: NameArg,
    workspace: WorkspaceOpt = Path("."),
    yes: Annotated[bool, typer.Option("--yes", "-y", help="approve without asking")] = False,
) -> None:
    """Let the model see and load a third-party skill (this exact content; a change needs re-approval)."""
    from kairos.skills.catalog import SKILL_FILE

    catalog = _catalog(workspace)
    entry = _entry(catalog, name)
    skill = entry.skill
    if skill is None:
        raise _fail(f"{name} cannot be approved: {entry.reason}")
    if entry.status == "trusted":
        console.print(f"{_text(name)} is a {skill.kind} skill and trusted already; no approval needed.")
        return
    if entry.status == "approved":
        console.print(f"{_text(name)} is approved already (sha256 {skill.digest[:12]}).")
        return
    files = ", ".join([SKILL_FILE, *skill.files()])
    console.print(
        f"[bold]{_text(name)}[/] from {_text(skill.origin)}\nfolder: {_text(str(skill.folder))}\nfiles: {_text(files)}"
    )
    console.print(f"sha256: {skill.digest}")
    if not yes and not typer.confirm(
        "Approve it? The model will be able to read these instructions and run these scripts", default=False
    ):
        raise typer.Exit(1)
    try:
        catalog.approvals.approve(skill)
    except OSError as e:
        raise _fail(f"cannot record the approval in {catalog.approvals.path}: {e.strerror or e}") from e
    console.print(f"[green]approved[/] {_text(name)}; it appears in the catalog of the next request.")


@skills_app.command("revoke")
def revoke(name: NameArg, workspace: WorkspaceOpt = Path(".")) -> None:
    """Withdraw an approval: the skill leaves the catalog and can no longer be loaded."""
    catalog = _catalog(workspace)
    try:
        revoked = catalog.approvals.revoke(name)
    except OSError as e:
        raise _fail(f"cannot update {catalog.approvals.path}: {e.strerror or e}") from e
    if not revoked:
        raise _fail(f"{name} has no approval to revoke")
    console.print(f"[green]revoked[/] {_text(name)}")


@skills_app.command("new")
def new(
    name: NameArg,
    description: Annotated[
        str,
        typer.Option(
            "--description",
            "-d",
            prompt="Description (when to use the skill, and when not to)",
            help="a routing condition: when to use the skill and when not to",
        ),
    ],
    workspace: WorkspaceOpt = Path("."),
    directory: Annotated[
        str | None, typer.Option("--dir", help="skills folder (default: the first of [skills] dirs)")
    ] = None,
) -> None:
    """Create a skill folder with a SKILL.md following the four-part structure."""
    from kairos.skills.catalog import SKILL_FILE, name_problem

    problem = name_problem(name)
    if problem:
        raise _fail(problem)
    if not description.strip():
        raise _fail("the description must not be empty: the model decides from it when to load the skill")
    base = Path(directory or _config(workspace).dirs[0]).expanduser()
    folder = (base if base.is_absolute() else workspace / base) / name
    if folder.exists():
        raise _fail(f"{folder} already exists")
    folder.mkdir(parents=True)
    title = name.replace("-", " ").capitalize()
    text = SKILL_TEMPLATE.format(name=name, description=" ".join(description.split()), title=title)
    (folder / SKILL_FILE).write_text(text, encoding="utf-8")
    console.print(f"[green]created[/] {_text(str(folder / SKILL_FILE))}")
    console.print("Replace the placeholder text, add reference.md or scripts/ beside it, then: kairos skills list")
