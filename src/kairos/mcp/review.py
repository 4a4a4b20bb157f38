"""Review of an MCP server's tools: a digest of what the model would read, pinned by the user.

A server's tool descriptions go into the model's context with the user's authority, so they are
third-party content like a skill: the first time, and whenever they change (a "rug pull": a
server that changes its descriptions after it was approved), its tools are not offered until the
user approves the new listing (``kairos mcp approve NAME``). The digest is a sha256 over the
server's target (command or URL) and every tool's name, description and schemas; approvals live in
the shared review store (:class:`~kairos.security.review.ApprovalStore`, kind ``mcp-server``), and
the listing that was approved is kept next to it so a change can be shown as a diff.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kairos.paths import write_text_atomic
from kairos.security.review import ApprovalStore, ReviewStatus

KIND = "mcp-server"
"""The review store's kind for MCP servers."""
REVIEWED_DIR = "mcp-reviewed"
"""Folder (in the user config dir) holding the listing each approval saw, for diffs."""


@dataclass(frozen=True, slots=True)
class ListedTool:
    """One tool as the server lists it (what the model would read)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    read_only: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON form (sorted keys give a stable digest)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "read_only": self.read_only,
        }


def listing_digest(target: str, tools: Sequence[ListedTool]) -> str:
    """sha256 (hex) of the server's target and its tools, whatever order the server lists them in."""
    body = {"target": target, "tools": sorted((t.as_dict() for t in tools), key=lambda d: d["name"])}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def render_listing(tools: Sequence[ListedTool]) -> list[str]:
    """The listing as lines a person reads (and a diff compares)."""
    lines: list[str] = []
    for t in sorted(tools, key=lambda t: t.name):
        lines.append(f"tool {t.name}{' (read-only)' if t.read_only else ''}")
        lines.extend(f"  | {line}" for line in (t.description or "(no description)").splitlines())
        lines.append("  arguments: " + json.dumps(t.input_schema, sort_keys=True, ensure_ascii=False))
        if t.output_schema is not None:
            lines.append("  result: " + json.dumps(t.output_schema, sort_keys=True, ensure_ascii=False))
    return lines


class McpReview:
    """Approvals of MCP servers' listings, in the shared review store.

    Example::

        review = McpReview()
        review.status("files", digest)            # "needs_approval"
        review.approve("files", target, tools)    # after the user read render_listing(tools)
    """

    def __init__(self, store: ApprovalStore | None = None, reviewed_dir: Path | None = None) -> None:
        """Use ``store`` (default: the user's approvals file) and keep reviewed listings in ``reviewed_dir``."""
        self.store = store or ApprovalStore()
        self.reviewed_dir = reviewed_dir or self.store.path.parent / REVIEWED_DIR

    def status(self, name: str, digest: str) -> ReviewStatus:
        """``approved``, ``changed`` (another listing was approved) or ``needs_approval``."""
        return self.store.status(KIND, name, digest)

    def approve(self, name: str, target: str, tools: Sequence[ListedTool]) -> str:
        """Record the user's approval of this listing; returns its digest.

        Raises:
            OSError: the approvals file cannot be written.
        """
        digest = listing_digest(target, tools)
        self.store.approve(KIND, name, digest, source=target)
        record = {"target": target, "digest": digest, "tools": [t.as_dict() for t in tools]}
        write_text_atomic(self._reviewed(name), json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False))
        return digest

    def revoke(self, name: str) -> bool:
        """Withdraw the approval; False when there was none."""
        self._reviewed(name).unlink(missing_ok=True)
        return self.store.revoke(KIND, name)

    def approved_listing(self, name: str) -> list[ListedTool] | None:
        """The listing the user last approved (None if none is kept or it cannot be read)."""
        try:
            data = json.loads(self._reviewed(name).read_text(encoding="utf-8"))
            return [ListedTool(**t) for t in data["tools"]]
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def unchanged(self, name: str, target: str, tools: Sequence[ListedTool]) -> set[str]:
        """Names of ``tools`` exactly as the user last approved them (same server target, description and schemas).

        A server that adds a tool at run time keeps offering the ones approved; the new or changed ones
        wait for an approval of the new listing.
        """
        try:
            data = json.loads(self._reviewed(name).read_text(encoding="utf-8"))
            if data.get("target") != target or self.store.get(KIND, name) is None:
                return set()
            approved = {json.dumps(t, sort_keys=True) for t in data["tools"]}
        except (OSError, ValueError, TypeError, KeyError):
            return set()
        return {t.name for t in tools if json.dumps(t.as_dict(), sort_keys=True) in approved}

    def diff(self, name: str, tools: Sequence[ListedTool]) -> list[str]:
        """A unified diff from the approved listing to ``tools`` (empty when none was approved)."""
        old = self.approved_listing(name)
        if old is None:
            return []
        return list(
            difflib.unified_diff(render_listing(old), render_listing(tools), "approved", "now", lineterm="", n=2)
        )

    def _reviewed(self, name: str) -> Path:
        return self.reviewed_dir / f"{name}.json"


__all__ = ["KIND", "ListedTool", "McpReview", "listing_digest", "render_listing"]
