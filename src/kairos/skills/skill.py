"""One skill folder: the ``SKILL.md`` format, parsing, validation and the content digest.

A skill is a folder holding ``SKILL.md``: YAML front matter between ``---`` lines with ``name``
(lowercase letters, digits and hyphens, equal to the folder's name) and ``description`` (a
routing condition: when to use it, when not to), then a Markdown body; beside it, optional
sub-documents, scripts and templates. :mod:`kairos.skills.catalog` finds skill folders and
decides which of them the model may use.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

import yaml

from kairos.paths import is_inside

SKILL_FILE = "SKILL.md"
NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_SKILL_MD_BYTES = 64 * 1024
"""Bodies past this belong in sub-documents: a body is loaded whole into the context."""
_SKIP = frozenset({"__pycache__", ".git", ".DS_Store"})

SourceKind: TypeAlias = Literal["workspace", "path", "package", "builtin"]


class SkillFormatError(ValueError):
    """``SKILL.md`` is malformed; the message says what to fix."""


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
    links_out: tuple[str, ...] = ()
    """Relative paths of links in the folder that lead out of it (they make the skill third-party)."""

    @property
    def summary(self) -> str:
        """The description on one line, as the catalog shows it."""
        return " ".join(self.description.split())

    def files(self) -> list[str]:
        """Relative paths of the folder's other files (sub-documents, scripts, templates)."""
        return [rel for rel, _ in _walk(self.folder) if rel != SKILL_FILE]


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
    real = folder.resolve()
    return Skill(name, desc, body, real, kind, origin, folder_digest(folder), meta, _links_out(folder, real))


def _links_out(folder: Path, real: Path) -> tuple[str, ...]:
    """Links under ``folder`` whose target is outside it (what the model could read through them)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d not in _SKIP]
        for name in (*dirnames, *filenames):
            p = Path(dirpath) / name
            if p.is_symlink() and not is_inside(p.resolve(), real):
                out.append(p.relative_to(folder).as_posix())
    return tuple(sorted(out))


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


__all__ = [
    "MAX_DESCRIPTION",
    "MAX_NAME",
    "MAX_SKILL_MD_BYTES",
    "SKILL_FILE",
    "Skill",
    "SkillFormatError",
    "SourceKind",
    "folder_digest",
    "load_skill_folder",
    "name_problem",
    "parse_skill_md",
    "validate_meta",
]
