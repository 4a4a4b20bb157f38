"""Review before use: approvals that pin reviewed content, kept where no workspace can write.

Third-party material (a skill from outside the workspace, later an MCP server's tool
descriptions) must be reviewed by the user before the model may use it. An approval records
*what* was reviewed: a kind (``skill``, ``mcp-server``, ...), a name and a digest of the content.
A changed digest means the content changed since the review, so the approval no longer holds.

Approvals live in ``<user config dir>/approvals.json``, outside every workspace: a repository
cannot ship a pre-approved file, and an agent's file tools (which work inside the workspace)
cannot approve anything. A file that cannot be read counts as no approvals (fail closed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias

from kairos.paths import user_config_dir, write_text_atomic

APPROVALS_FILE = "approvals.json"
ReviewStatus: TypeAlias = Literal["approved", "changed", "needs_approval"]
_Stamp: TypeAlias = tuple[int, int, int]


class JsonFile:
    """A JSON object in one file: read through a stat cache, written atomically.

    Reads are cheap when nothing changed (one ``stat``): the skills catalog consults approvals
    and workspace trust before every model request. A missing file is an empty object; a file
    that is unreadable or not a JSON object is empty too, and :attr:`problem` says why.
    """

    def __init__(self, path: Path, what: str) -> None:
        """Use the JSON file ``path``.

        Args:
            path: the file.
            what: what the file holds, for messages ("approvals").
        """
        self.path = path
        self.what = what
        self.problem: str | None = None
        self._cached: tuple[_Stamp, dict[str, Any], str | None] | None = None

    def read(self) -> Mapping[str, Any]:
        """The object (do not mutate it: it is shared with later reads)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self.problem, self._cached = None, None
            return {}
        except OSError as e:
            self.problem = f"{self.path} cannot be read ({e.strerror or e}); no {self.what} count"
            return {}
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if self._cached is not None and self._cached[0] == stamp:
            self.problem = self._cached[2]
            return self._cached[1]
        data, problem = self._parse()
        self._cached = (stamp, data, problem)
        self.problem = problem
        return data

    def _parse(self) -> tuple[dict[str, Any], str | None]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}, None
        except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            return {}, f"{self.path} is unreadable ({e}); no {self.what} count"
        if not isinstance(data, dict):
            return {}, f"{self.path} is not a JSON object; no {self.what} count"
        return data, None

    def write(self, data: Mapping[str, Any]) -> None:
        """Replace the file's content atomically.

        Raises:
            OSError: the file cannot be written.
        """
        write_text_atomic(self.path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        self._cached = None


@dataclass(frozen=True, slots=True)
class Approval:
    """One approval: this content (``digest``) of ``kind``/``name`` was reviewed by the user."""

    kind: str
    name: str
    digest: str
    source: str = ""
    """Where the reviewed content was (a folder, a server command), for the user's reference."""
    approved_at: str = ""


def _key(kind: str, name: str) -> str:
    return f"{kind}:{name}"


class ApprovalStore:
    """Approvals of third-party content: ``{"KIND:NAME": {digest, source, approved_at}}`` in JSON.

    Example::

        store = ApprovalStore()                       # <user config dir>/approvals.json
        store.status("skill", "vendor", digest)       # "needs_approval"
        store.approve("skill", "vendor", digest, source="/opt/skills/vendor")
        store.status("skill", "vendor", digest)       # "approved"; another digest: "changed"
    """

    def __init__(self, path: Path | None = None) -> None:
        """Open the store (the file is read on use, not here).

        Args:
            path: the JSON file; default ``<user config dir>/approvals.json``.
        """
        self._file = JsonFile(path or user_config_dir() / APPROVALS_FILE, "approvals")

    @property
    def path(self) -> Path:
        """The JSON file approvals are kept in."""
        return self._file.path

    @property
    def problem(self) -> str | None:
        """Why the file could not be used at the last read (then nothing counts as approved), or None."""
        return self._file.problem

    def get(self, kind: str, name: str) -> Approval | None:
        """The approval of ``kind``/``name``, whatever digest it pins, or None."""
        rec = self._file.read().get(_key(kind, name))
        if not isinstance(rec, dict) or not isinstance(rec.get("digest"), str):
            return None
        return Approval(kind, name, rec["digest"], str(rec.get("source", "")), str(rec.get("approved_at", "")))

    def status(self, kind: str, name: str, digest: str) -> ReviewStatus:
        """``approved`` when this exact content was approved, ``changed`` when other content was."""
        rec = self.get(kind, name)
        if rec is None:
            return "needs_approval"
        return "approved" if rec.digest == digest else "changed"

    def approvals(self, kind: str | None = None) -> list[Approval]:
        """Every approval (of one kind), sorted by kind and name."""
        out = []
        for key in sorted(self._file.read()):
            k, _, name = key.partition(":")
            if kind is None or k == kind:
                rec = self.get(k, name)
                if rec is not None:
                    out.append(rec)
        return out

    def approve(self, kind: str, name: str, digest: str, *, source: str = "", now: datetime | None = None) -> None:
        """Record that the user reviewed this content; replaces an earlier approval of the name.

        Raises:
            OSError: the file cannot be written.
        """
        data = dict(self._file.read())
        data[_key(kind, name)] = {
            "digest": digest,
            "source": source,
            "approved_at": (now or datetime.now(UTC)).isoformat(timespec="seconds"),
        }
        self._file.write(data)

    def revoke(self, kind: str, name: str) -> bool:
        """Withdraw an approval; False when there was none.

        Raises:
            OSError: the file cannot be written.
        """
        data = dict(self._file.read())
        if data.pop(_key(kind, name), None) is None:
            return False
        self._file.write(data)
        return True


__all__ = ["APPROVALS_FILE", "Approval", "ApprovalStore", "JsonFile", "ReviewStatus"]
