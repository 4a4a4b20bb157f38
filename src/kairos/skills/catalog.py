"""Skill discovery and trust: which skills exist and which the model may use (book ch2 §3.9, §7.5; anti-pattern 18).

A skill is a folder holding ``SKILL.md`` (see :mod:`kairos.skills.skill` for the format).

Sources, in precedence order (the first valid skill of a name wins; later ones are listed as
shadowed; an invalid skill claims no name, so a broken override never hides a working skill):

1. ``dirs`` from :class:`~kairos.skills.config.SkillsConfig` (default ``<workspace>/.kairos/skills``
   then ``<workspace>/skills``); each folder holds skill folders, or is one;
2. installed packages: entry points in the group ``kairos.skills`` whose object is a package, a
   path, or a callable returning paths;
3. the skills shipped with kairos (``kairos/skills/builtin``).

Trust: the built-ins ship (and are reviewed) with kairos itself and are trusted. A skill inside
the workspace is the workspace owner's, so it is trusted once the user trusts the workspace
(``kairos trust``, see :mod:`kairos.security.trust`); until then it is listed as ``needs_trust``
with the command to run. A skill is placed by its real location: a link from the workspace to a
folder outside it (or a skill folder holding links out of itself) is a third-party skill. Every
other skill is third-party code and prose, so it is hidden from the model until the user approves
it with ``kairos skills approve NAME``. The approval pins the skill's content hash, so a changed
skill needs a new approval. Approvals live in the user's config dir
(:class:`~kairos.security.review.ApprovalStore`), never in the workspace: a repository cannot ship
a pre-approved file. Each trust default is switchable in the user's config.

A broken skill never breaks the agent: it is listed with the reason and otherwise ignored.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from importlib import metadata
from importlib.resources import files
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeAlias

from kairos.paths import is_inside
from kairos.security.review import ApprovalStore
from kairos.security.trust import TrustStore
from kairos.skills.config import SkillsConfig
from kairos.skills.skill import (
    SKILL_FILE,
    Skill,
    SkillFormatError,
    SourceKind,
    folder_digest,
    load_skill_folder,
    name_problem,
    parse_skill_md,
    validate_meta,
)

ENTRY_POINT_GROUP = "kairos.skills"
APPROVAL_KIND = "skill"
"""The kind skills are recorded under in the user's :class:`ApprovalStore`."""
LEGACY_APPROVALS_FILE = "skill-approvals.json"
"""Where approvals used to live (``<workspace>/.kairos/``); ignored now, a repository could ship one."""
Status: TypeAlias = Literal["trusted", "approved", "needs_approval", "needs_trust", "changed", "invalid", "shadowed"]
USABLE: frozenset[Status] = frozenset({"trusted", "approved"})


@dataclass(frozen=True, slots=True)
class SkillRoot:
    """A place skills are looked for."""

    path: Path
    kind: SourceKind
    origin: str
    """How the user would name this source (``.kairos/skills``, ``entry point x (package y)``)."""


@dataclass(frozen=True, slots=True)
class SkillEntry:
    """One skill as listed: its status decides whether the model may see and load it."""

    name: str
    status: Status
    folder: Path
    kind: SourceKind
    origin: str
    reason: str = ""
    """Why it is not usable (parse error, approval missing or stale, shadowed by whom)."""
    skill: Skill | None = None

    @property
    def usable(self) -> bool:
        """Whether the model may see and load it."""
        return self.status in USABLE and self.skill is not None


# ---- sources -------------------------------------------------------------------------------


def builtin_root() -> Path:
    """The folder of the skills shipped with kairos (package data)."""
    return Path(str(files("kairos.skills").joinpath("builtin")))


def workspace_roots(workspace: Path, dirs: Iterable[str]) -> list[SkillRoot]:
    """The configured folders; the kind says whether the folder lies inside the workspace."""
    ws = workspace.resolve()
    roots = []
    for d in dirs:
        p = Path(d).expanduser()
        p = (p if p.is_absolute() else ws / p).resolve()
        inside = p == ws or ws in p.parents
        roots.append(SkillRoot(p, "workspace" if inside else "path", d))
    return roots


def entry_point_roots(group: str = ENTRY_POINT_GROUP) -> tuple[list[SkillRoot], list[SkillEntry]]:
    """Folders from installed packages, plus an invalid entry for each entry point that fails."""
    roots: list[SkillRoot] = []
    broken: list[SkillEntry] = []
    for ep in sorted(metadata.entry_points(group=group), key=lambda e: (e.name, e.value)):
        dist = ep.dist.name if ep.dist is not None else "?"
        origin = f"entry point {ep.name} (package {dist})"
        try:
            paths = _paths_of(ep.load())
        except Exception as e:  # a third-party package bug must not break the agent
            broken.append(SkillEntry(ep.name, "invalid", Path(), "package", origin, f"cannot load: {e!r}"))
            continue
        roots += [SkillRoot(p, "package", origin) for p in paths]
    return roots, broken


def _paths_of(obj: Any) -> list[Path]:
    if isinstance(obj, ModuleType):
        where = list(getattr(obj, "__path__", ())) or ([str(Path(obj.__file__).parent)] if obj.__file__ else [])
        return [Path(p) for p in where]
    if isinstance(obj, str | os.PathLike):
        return [Path(obj)]
    if callable(obj):
        out = obj()
        items = [out] if isinstance(out, str | os.PathLike) else list(out)
        return [Path(p) for p in items]
    raise TypeError(f"expected a package, a path or a callable returning paths, got {type(obj).__name__}")


def scan_root(root: SkillRoot) -> Iterator[SkillEntry | Skill]:
    """The skills in ``root`` (which holds skill folders, or is one); problems as invalid entries."""
    if not root.path.is_dir():
        return
    if (root.path / SKILL_FILE).is_file():
        candidates = [root.path]
    else:
        try:
            candidates = sorted(p for p in root.path.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return
    for folder in candidates:
        if not (folder / SKILL_FILE).is_file():
            odd = [p.name for p in folder.glob("*") if p.name.lower() == "skill.md"]
            if odd:
                yield SkillEntry(
                    folder.name, "invalid", folder, root.kind, root.origin, f"found {odd[0]}; rename it to SKILL.md"
                )
            continue
        try:
            yield load_skill_folder(folder, root.kind, root.origin)
        except SkillFormatError as e:
            yield SkillEntry(folder.name, "invalid", folder.resolve(), root.kind, root.origin, str(e))


# ---- approvals -----------------------------------------------------------------------------


class SkillApprovals:
    """The user's approvals of skills: an :class:`ApprovalStore` seen through kind ``skill``."""

    def __init__(self, store: ApprovalStore) -> None:
        """Wrap ``store`` (usually the user's, ``<user config dir>/approvals.json``)."""
        self.store = store

    @property
    def path(self) -> Path:
        """The file approvals are kept in."""
        return self.store.path

    @property
    def problem(self) -> str | None:
        """Why the approvals could not be read at the last look (nothing counts as approved then)."""
        return self.store.problem

    def status(self, skill: Skill) -> Literal["approved", "changed", "needs_approval"]:
        """Whether this exact content of ``skill`` is approved, or another content was."""
        return self.store.status(APPROVAL_KIND, skill.name, skill.digest)

    def approve(self, skill: Skill, now: datetime | None = None) -> None:
        """Approve this exact content of ``skill``; a later change needs a new approval.

        Raises:
            OSError: the approvals file cannot be written.
        """
        self.store.approve(APPROVAL_KIND, skill.name, skill.digest, source=str(skill.folder), now=now)

    def revoke(self, name: str) -> bool:
        """Withdraw the approval of the skill ``name``; False when there was none.

        Raises:
            OSError: the approvals file cannot be written.
        """
        return self.store.revoke(APPROVAL_KIND, name)


# ---- the catalog ---------------------------------------------------------------------------


class SkillCatalog:
    """Every skill source of a workspace, rescanned on each call (skills change while running).

    Trust, in order: an invalid skill is never usable; a skill of a kind in ``trusted_kinds``
    is usable as it is, except a ``workspace`` skill while ``workspace_trusted`` says no (it then
    needs the workspace trusted, or its own approval); every other skill needs an approval of its
    exact content in ``approvals``.
    """

    def __init__(
        self,
        roots: Sequence[SkillRoot],
        approvals: ApprovalStore,
        *,
        trusted_kinds: Iterable[SourceKind] = ("workspace", "builtin"),
        broken: Sequence[SkillEntry] = (),
        workspace: Path | None = None,
        workspace_trusted: Callable[[], bool] | None = None,
    ) -> None:
        """Build a catalog over ``roots``.

        Args:
            roots: where to look, earlier roots first on a name clash.
            approvals: the user's approvals (skills are recorded as kind ``skill``).
            trusted_kinds: source kinds usable without an approval.
            broken: entries to list as invalid (entry points that failed to load).
            workspace: the workspace; a ``workspace`` skill whose real location (links followed)
                is outside it is judged as a third-party ``path`` skill.
            workspace_trusted: whether the user trusts the workspace now (asked on each scan);
                None: ``workspace`` skills are trusted as ``trusted_kinds`` says.
        """
        self.roots = list(roots)
        self.approvals = SkillApprovals(approvals)
        self.trusted_kinds = frozenset(trusted_kinds)
        self.broken = list(broken)
        self.workspace = workspace.resolve() if workspace is not None else None
        self.workspace_trusted = workspace_trusted

    @classmethod
    def for_workspace(
        cls,
        workspace: Path,
        config: SkillsConfig | None = None,
        *,
        approvals: ApprovalStore | None = None,
        trust: TrustStore | None = None,
    ) -> SkillCatalog:
        """The catalog ``config`` describes for ``workspace``.

        Args:
            workspace: the workspace whose skills to find.
            config: the ``[skills]`` settings.
            approvals: the approvals; default the user's (``<user config dir>/approvals.json``).
            trust: the trusted workspaces; default the user's.
        """
        config = config or SkillsConfig()
        ws = workspace.resolve()
        roots = workspace_roots(ws, config.dirs)
        broken: list[SkillEntry] = []
        if config.entry_points:
            ep_roots, broken = entry_point_roots()
            roots += ep_roots
        if config.builtin:
            roots.append(SkillRoot(builtin_root(), "builtin", "kairos (built-in)"))
        trusted: list[SourceKind] = []
        if config.trust_workspace:
            trusted.append("workspace")
        if config.trust_builtin:
            trusted.append("builtin")
        store = trust or TrustStore()
        return cls(
            roots,
            approvals or ApprovalStore(),
            trusted_kinds=trusted,
            broken=broken,
            workspace=ws,
            workspace_trusted=lambda: store.is_trusted(ws),
        )

    def entries(self) -> list[SkillEntry]:
        """Every skill found, valid or not, with its status; sorted by name."""
        seen: dict[str, SkillEntry] = {}
        out: list[SkillEntry] = list(self.broken)
        ws_trusted = self.workspace_trusted() if self.workspace_trusted is not None else True
        for root in self.roots:
            for found in scan_root(root):
                if isinstance(found, SkillEntry):  # invalid: listed, but it claims no name
                    out.append(found)
                    continue
                entry = self._judge(self._located(found), ws_trusted)
                first = seen.get(entry.name)
                if first is not None:
                    where = f"{first.origin} ({first.folder})"
                    out.append(_with(entry, status="shadowed", reason=f"a skill of this name from {where} comes first"))
                    continue
                seen[entry.name] = entry
                out.append(entry)
        return sorted(out, key=lambda e: (e.name, _STATUS_ORDER[e.status]))

    def available(self) -> list[Skill]:
        """The skills the model may see and load (valid, and trusted or approved)."""
        return [e.skill for e in self.entries() if e.usable and e.skill is not None]

    def find(self, name: str) -> SkillEntry | None:
        """The entry that owns ``name``: the first valid skill of that name, else an invalid one."""
        matches = [e for e in self.entries() if e.name == name and e.status != "shadowed"]
        return next((e for e in matches if e.skill is not None), matches[0] if matches else None)

    def _located(self, skill: Skill) -> Skill:
        """A workspace skill that really lives elsewhere (a link out of the workspace) is third-party."""
        if skill.kind != "workspace" or self.workspace is None:
            return skill
        if not is_inside(skill.folder, self.workspace):
            return replace(skill, kind="path", origin=f"{skill.origin}, a link to {skill.folder}")
        if skill.links_out:
            links = ", ".join(skill.links_out[:3])
            return replace(skill, kind="path", origin=f"{skill.origin}, with links out of its folder ({links})")
        return skill

    def _judge(self, skill: Skill, ws_trusted: bool) -> SkillEntry:
        base = SkillEntry(skill.name, "trusted", skill.folder, skill.kind, skill.origin, skill=skill)
        trusted_kind = skill.kind in self.trusted_kinds
        if trusted_kind and (skill.kind != "workspace" or ws_trusted):
            return base
        status = self.approvals.status(skill)
        if status == "approved":
            return _with(base, status="approved")
        hint = f"review it (kairos skills show {skill.name}), then: kairos skills approve {skill.name}"
        if self.approvals.problem:
            hint = f"{self.approvals.problem}; {hint}"
        if status == "changed":
            return _with(base, status="changed", reason=f"changed since it was approved; {hint}")
        if trusted_kind:  # a workspace skill of a workspace the user has not trusted (yet)
            ws = self.workspace or skill.folder
            reason = (
                f"the workspace {ws} is not trusted; review it, then run: kairos trust {_quote(ws)} "
                f"(or approve only this skill: kairos skills approve {skill.name})"
            )
            return _with(base, status="needs_trust", reason=reason)
        return _with(base, status="needs_approval", reason=f"third-party skill ({skill.origin}); {hint}")


_STATUS_ORDER: dict[Status, int] = {
    "trusted": 0,
    "approved": 0,
    "changed": 1,
    "needs_approval": 1,
    "needs_trust": 1,
    "invalid": 1,
    "shadowed": 2,
}


def _with(entry: SkillEntry, **changes: Any) -> SkillEntry:
    return replace(entry, **changes)


def _quote(path: Path) -> str:
    return shlex.quote(str(path))


__all__ = [
    "APPROVAL_KIND",
    "SKILL_FILE",
    "USABLE",
    "ApprovalStore",
    "Skill",
    "SkillApprovals",
    "SkillCatalog",
    "SkillEntry",
    "SkillFormatError",
    "SkillRoot",
    "SourceKind",
    "Status",
    "TrustStore",
    "builtin_root",
    "folder_digest",
    "load_skill_folder",
    "name_problem",
    "parse_skill_md",
    "scan_root",
    "validate_meta",
]
