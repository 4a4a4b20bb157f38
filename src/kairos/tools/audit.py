"""The audit log: one JSON line per tool call, whatever its outcome (issue 10 §3).

The executor writes it for every call it is given (unknown tools, bad arguments, denials, errors,
timeouts, cancellations and answers given without running the tool included), so no tool or plugin
can skip it. A line::

    {"time": "2026-12-01T07:00:00.123+00:00", "session": "s1", "call_id": "c1", "tool": "bash",
     "args_sha256": "…", "outcome": "ok", "decision": "allow (default: sandboxed command)"}

``args_sha256`` hashes the canonical JSON of the arguments (sorted keys, no spaces), so the log
proves what ran without keeping file contents or secrets. ``decision`` is what the permission
check decided and who decided (a rule, a default, an approver); empty when no check ran.

A log that cannot be written never fails a call: the problem is logged once (``logging``) and kept
in :attr:`AuditLog.problem`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias

from kairos.paths import default_state_dir
from kairos.tools.base import Resource, ToolContext, ToolResult

AUDIT_RESOURCE: Resource[AuditLog] = Resource("kairos.audit")
"""The session's :class:`AuditLog`."""
AUDIT_FILE = "audit.jsonl"
DENIED_KEY = "kairos.denied"
"""``ToolResult.metadata`` key a refusal carries (the same key as ``kairos.security.defences.DENIED``)."""
NOT_RUN_KEY = "kairos.not_run"
"""``ToolResult.metadata`` key of an answer the harness gave without running the tool (the loop guard's
reuse of an identical read-only call, or its refusal of a call that failed twice); the value says which."""
Outcome: TypeAlias = Literal["ok", "error", "denied", "timeout", "cancelled", "not_run"]

_log = logging.getLogger("kairos.audit")


def args_digest(arguments: dict[str, Any] | str) -> str:
    """sha256 of the canonical JSON of ``arguments`` (or of the raw text when it was not JSON)."""
    if isinstance(arguments, str):
        text = arguments
    else:
        text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def outcome_of(result: ToolResult) -> Outcome:
    """How a call ended, from its result."""
    meta = result.metadata
    if meta.get(DENIED_KEY):
        return "denied"
    if meta.get(NOT_RUN_KEY):
        return "not_run"
    if meta.get("timed_out") or "timeout_s" in meta:
        return "timeout"
    return "error" if result.is_error else "ok"


class AuditLog:
    """Appends audit lines to ``path``.

    Args:
        path: the JSONL file (its folder is created on the first write).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem: str | None = None
        """Why the last write failed, if it did."""
        self._decisions: dict[str, str] = {}

    def decided(self, call_id: str, decision: str) -> None:
        """Remember the permission decision for ``call_id``; the call's line will carry it."""
        self._decisions[call_id] = decision

    def record(
        self, *, session: str, call_id: str, tool: str, arguments: dict[str, Any] | str, outcome: Outcome
    ) -> None:
        """Append one line; never raises."""
        line = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "session": session,
            "call_id": call_id,
            "tool": tool,
            "args_sha256": args_digest(arguments),
            "outcome": outcome,
            "decision": self._decisions.pop(call_id, ""),
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        except (OSError, ValueError) as e:
            first = self.problem is None
            self.problem = f"{type(e).__name__}: {e}"
            if first:  # once: a full disk must not flood the log
                _log.warning("cannot write the audit log %s (%s); tool calls go on unaudited", self.path, self.problem)


def audit_of(ctx: ToolContext) -> AuditLog:
    """The session's audit log: the one under :data:`AUDIT_RESOURCE`, else ``<state dir>/audit.jsonl``."""
    return ctx.get_or_put(AUDIT_RESOURCE, lambda: AuditLog(default_state_dir(ctx.workspace) / AUDIT_FILE))
