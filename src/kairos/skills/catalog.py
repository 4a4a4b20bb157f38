"""Skill discovery, ``SKILL.md`` parsing and trust (book ch2 §3.9, §7.5; anti-pattern 18).

A skill is a folder holding ``SKILL.md``: YAML front matter between ``---`` lines with ``name``
(lowercase letters, digits and hyphens, equal to the folder's name) and ``description`` (a
routing condition: when to use it, when not to), then a Markdown body; beside it, optional
sub-documents, scripts and templates.

Sources, in precedence order (the first valid skill of a name wins; later ones are listed as
shadowed; an invalid skill claims no name, so a broken override never hides a working skill):

1. ``dirs`` from :class:`~kairos.skills.config.SkillsConfig` (default ``<workspace>/.kairos/skills``
   then ``<workspace>/skills``); each folder holds skill folders, or is one;
2. installed packages: entry points in the group ``kairos.skills`` whose object is a package, a
   path, or a callable returning paths;
3. the skills shipped with kairos (``kairos/skills/builtin``).

Trust: a skill inside the workspace was written by the workspace owner and is trusted; the
built-ins ship (and are reviewed) with kairos itself and are trusted too. Every other skill is
third-party code and prose, so it is hidden from the model until the owner approves it with
``kairos skills approve NAME``. The approval stores the skill's content hash, so a changed skill
needs a new approval. Each trust default is switchable in the config.

A broken skill never breaks the agent: it is listed with the reason and otherwise ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from importlib.resources import files
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeAlias

import yaml

from kairos.paths import default_state_dir
from kairos.skills.config import SkillsConfig

SKILL_FILE = "SKILL.md"
ENTRY_POINT_GROUP = "kairos.skills"
APPROVALS_FILE = "skill-approvals.json"
NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_SKILL_MD_BYTES = 64 * 1024
"""Bodies past this belong in sub-documents: a body is loaded whole into the context."""
_SKIP = frozenset({"__pycache__", ".git", ".DS_Store"})

SourceKind: TypeAlias = Literal["workspace", "path", "package", "builtin"]
Status: TypeAlias = Literal["trusted", "approved", "needs_approval", "changed", "invalid", "shadowed"]
USABLE: frozenset[Status] = frozenset({"trusted", "approved"})


class SkillFormatError(ValueError):
    """``SKILL.md`` is malformed; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class SkillRoot:
    """A place skills are looked for."""

    path: Path
    kind: SourceKind
    origin: str
    """How the user would name this source (``.kairos/skills``, ``entry point x (package y)``)."""


@dataclass(frozen=True, slots=True)
class Skill:
    """A parsed, valid skill."""

    name: str
    description: str
    body: str
    folder: Path
    kind: SourceKind
    origin: str
    digest: str
    """sha256 over every file of the folder (relative path and bytes): what an approval pins."""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """The description on one line, as the catalog shows it."""
        return " ".join(self.description.split())

    def files(self) -> list[str]:
        """Relative paths of the folder's other files (sub-documents, scripts, templates)."""
        return [rel for rel, _ in _walk(self.folder) if rel != SKILL_FILE]


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
        return self.status in USABLE and self.skill is not None


# ---- parsing -------------------------------------------------------------------------------


def parse_skill_md(text: str) -> tuple[dict[str, Any], str]:
    """Split ``SKILL.md`` into (front matter, body).

    Raises:
        SkillFormatError: no front matter, unclosed, not YAML, or not a mapping.
    """
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise SkillFormatError("SKILL.md must start with YAML front matter: a line '---', the keys, then '---'")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), None)
    if end is None:
        raise SkillFormatError("the front matter is not closed: add a line '---' after the name and description")
    try:
        meta = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise SkillFormatError(f"the front matter is not valid YAML{where}: {problem}") from e
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise SkillFormatError(f"the front matter must be a mapping of keys, got a {type(meta).__name__}")
    return meta, "".join(lines[end + 1 :]).strip("\n")


def validate_meta(meta: dict[str, Any], folder_name: str, body: str) -> tuple[str, str]:
    """The skill's (name, description).

    Raises:
        SkillFormatError: a required key is missing or breaks the naming and size rules.
    """
    name = meta.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SkillFormatError("the front matter needs 'name': the skill's folder name")
    problem = name_problem(name)
    if problem:
        raise SkillFormatError(problem)
    if name != folder_name:
        raise SkillFormatError(f"'name' is {name!r} but the folder is {folder_name!r}; they must be equal")
    desc = meta.get("description")
    if not isinstance(desc, str) or not desc.strip():
        raise SkillFormatError(
            "the front matter needs 'description': when to use the skill and when not to (the model routes on it)"
        )
    if len(desc) > MAX_DESCRIPTION:
        raise SkillFormatError(
            f"'description' has {len(desc)} characters (at most {MAX_DESCRIPTION}): it is always in context, "
            "so keep it a short routing condition and move details into the body"
        )
    if not body.strip():
        raise SkillFormatError("SKILL.md has no body: write the instructions after the front matter")
    return name, desc.strip()


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid skill name, or None."""
    if len(name) > MAX_NAME:
        return f"skill names have at most {MAX_NAME} characters ({name[:20]!r}... has {len(name)})"
    if not NAME_RE.match(name):
        return f"{name!r} is not a valid skill name: use lowercase letters, digits and single hyphens (report-writing)"
    return None


_Stamp = tuple[tuple[str, int, int], ...]
_LOADED: dict[tuple[Path, str, str], tuple[_Stamp, Skill]] = {}
"""Parsed skills by folder, reused while no file's path, size or mtime changed: the catalog is
rescanned before every request, and hashing every script each time would be wasted work."""


def _stamp(folder: Path) -> _Stamp:
    out = []
    for rel, p in _walk(folder):
        try:
            st = p.stat()
        except OSError:
            st = None
        out.append((rel, st.st_size if st else -1, st.st_mtime_ns if st else -1))
    return tuple(out)


def load_skill_folder(folder: Path, kind: SourceKind, origin: str) -> Skill:
    """Parse one skill folder (cached until one of its files changes).

    Raises:
        SkillFormatError: the folder is not a valid skill.
    """
    key, stamp = (folder.resolve(), kind, origin), _stamp(folder)
    cached = _LOADED.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    skill = _parse_skill_folder(folder, kind, origin)
    _LOADED[key] = (stamp, skill)
    return skill


def _parse_skill_folder(folder: Path, kind: SourceKind, origin: str) -> Skill:
    md = folder / SKILL_FILE
    try:
        size = md.stat().st_size
        if size > MAX_SKILL_MD_BYTES:
            raise SkillFormatError(
                f"SKILL.md has {size} bytes (at most {MAX_SKILL_MD_BYTES}); move details into sub-documents"
            )
        text = md.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SkillFormatError(f"SKILL.md is not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise SkillFormatError(f"SKILL.md cannot be read: {e.strerror or e}") from e
    meta, body = parse_skill_md(text)
    name, desc = validate_meta(meta, folder.name, body)
    return Skill(name, desc, body, folder.resolve(), kind, origin, folder_digest(folder), meta)


def _walk(folder: Path) -> Iterator[tuple[str, Path]]:
    """(relative posix path, path) of every file under ``folder``, sorted, caches skipped."""
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP)
        for f in sorted(filenames):
            if f in _SKIP or f.endswith(".pyc"):
                continue
            p = Path(dirpath) / f
            yield p.relative_to(folder).as_posix(), p


def folder_digest(folder: Path) -> str:
    """sha256 of the folder's files: any edit, addition or removal changes it."""
    h = hashlib.sha256()
    for rel, p in _walk(folder):
        h.update(rel.encode() + b"\0")
        try:
            h.update(p.read_bytes())
        except OSError:
            h.update(b"\0unreadable")
        h.update(b"\0")
    return h.hexdigest()


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


class ApprovalStore:
    """Approved skills of a workspace: ``{name: {digest, folder, approved_at}}`` in a JSON file.

    A file that cannot be read counts as no approvals (fail closed); ``problem`` says why.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem: str | None = None

    def load(self) -> dict[str, dict[str, str]]:
        self.problem = None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            self.problem = f"{self.path} is unreadable ({e}); no third-party skill counts as approved"
            return {}
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            self.problem = f"{self.path} is not a JSON object of approvals; no third-party skill counts as approved"
            return {}
        return data

    def status(self, skill: Skill) -> Literal["approved", "changed", "needs_approval"]:
        rec = self.load().get(skill.name)
        if rec is None:
            return "needs_approval"
        return "approved" if rec.get("digest") == skill.digest else "changed"

    def approve(self, skill: Skill, now: datetime | None = None) -> None:
        data = self.load()
        data[skill.name] = {
            "digest": skill.digest,
            "folder": str(skill.folder),
            "approved_at": (now or datetime.now(UTC)).isoformat(timespec="seconds"),
        }
        self._save(data)

    def revoke(self, name: str) -> bool:
        data = self.load()
        if data.pop(name, None) is None:
            return False
        self._save(data)
        return True

    def _save(self, data: dict[str, dict[str, str]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".approvals-", dir=self.path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, self.path)


# ---- the catalog ---------------------------------------------------------------------------


class SkillCatalog:
    """Every skill source of a workspace, rescanned on each call (skills change while running)."""

    def __init__(
        self,
        roots: Sequence[SkillRoot],
        approvals: ApprovalStore,
        *,
        trusted_kinds: Iterable[SourceKind] = ("workspace", "builtin"),
        broken: Sequence[SkillEntry] = (),
    ) -> None:
        self.roots = list(roots)
        self.approvals = approvals
        self.trusted_kinds = frozenset(trusted_kinds)
        self.broken = list(broken)

    @classmethod
    def for_workspace(
        cls, workspace: Path, config: SkillsConfig | None = None, *, state_dir: Path | None = None
    ) -> SkillCatalog:
        """The catalog ``config`` describes; approvals live in the workspace's state dir."""
        config = config or SkillsConfig()
        roots = workspace_roots(workspace, config.dirs)
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
        state = state_dir or default_state_dir(workspace.resolve())
        return cls(roots, ApprovalStore(state / APPROVALS_FILE), trusted_kinds=trusted, broken=broken)

    def entries(self) -> list[SkillEntry]:
        """Every skill found, valid or not, with its status; sorted by name."""
        seen: dict[str, SkillEntry] = {}
        out: list[SkillEntry] = list(self.broken)
        approvals = self.approvals.load()
        for root in self.roots:
            for found in scan_root(root):
                if isinstance(found, SkillEntry):  # invalid: listed, but it claims no name
                    out.append(found)
                    continue
                entry = self._judge(found, approvals)
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

    def _judge(self, skill: Skill, approvals: dict[str, dict[str, str]]) -> SkillEntry:
        base = SkillEntry(skill.name, "trusted", skill.folder, skill.kind, skill.origin, skill=skill)
        if skill.kind in self.trusted_kinds:
            return base
        rec = approvals.get(skill.name)
        if rec is not None and rec.get("digest") == skill.digest:
            return _with(base, status="approved")
        hint = f"review it (kairos skills show {skill.name}), then: kairos skills approve {skill.name}"
        if self.approvals.problem:
            hint = f"{self.approvals.problem}; {hint}"
        if rec is not None:
            return _with(base, status="changed", reason=f"changed since it was approved; {hint}")
        return _with(base, status="needs_approval", reason=f"third-party skill ({skill.origin}); {hint}")


_STATUS_ORDER: dict[Status, int] = {
    "trusted": 0,
    "approved": 0,
    "changed": 1,
    "needs_approval": 1,
    "invalid": 1,
    "shadowed": 2,
}


def _with(entry: SkillEntry, **changes: Any) -> SkillEntry:
    from dataclasses import replace

    return replace(entry, **changes)
