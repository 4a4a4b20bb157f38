"""Check-then-confirm for irreversible calls (issue 10 §3).

A call of a tool flagged ``irreversible`` (``@tool(irreversible=True)``), and with
``[review] confirm_dangerous`` a command the dangerous-command check flags, does not run the
first time: it returns a preview (the exact call and why it needs confirming) and a one-time
token. It runs only when repeated with that token:

- tools flagged ``irreversible`` get an optional ``confirm_token`` argument in their schema;
- command tools (``bash``, ``python``), whose schema has no such argument, take the token as a
  trailing comment: ``rm -rf build  # confirm: TOKEN`` (harmless to the shell and to Python).

A token is bound to the tool's name and the hash of its arguments (without the token), works
once, and expires after ``[review] confirm_ttl_s`` seconds. Confirming is the agent's second look;
the permission rules, the reviewer and the approver still decide the confirmed call.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kairos.security._judge import describe_call
from kairos.security.dangerous import dangerous
from kairos.security.permissions import COMMAND_ARGS, SANDBOXED_TOOLS
from kairos.tools.audit import DENIED_KEY, args_digest
from kairos.tools.base import Resource, Tool, ToolContext, ToolResult

CONFIRM_ARG = "confirm_token"
"""The argument irreversible tools take the token in."""
CONFIRM_RESOURCE: Resource[ConfirmTokens] = Resource("kairos.confirm")
"""The session's :class:`ConfirmTokens`."""
PREVIEW_KEY = "kairos.confirm"
"""``ToolResult.metadata`` key of a preview: ``{"token": ..., "reason": ...}``."""
_COMMENT = re.compile(r"\s*#\s*confirm:\s*([A-Za-z0-9_-]{1,64})\s*$")


@dataclass(frozen=True, slots=True)
class _Issued:
    key: str
    expires: float


class ConfirmTokens:
    """One-time tokens bound to one call (name + argument hash), valid for ``ttl_s`` seconds.

    Args:
        ttl_s: lifetime of a token.
        clock: monotonic seconds (a test passes its own).
    """

    def __init__(self, ttl_s: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._issued: dict[str, _Issued] = {}

    @staticmethod
    def _key(tool: str, arguments: dict[str, Any]) -> str:
        return f"{tool}:{args_digest(arguments)}"

    def issue(self, tool: str, arguments: dict[str, Any]) -> str:
        """A fresh token for exactly ``tool(arguments)``."""
        now = self.clock()
        self._issued = {t: i for t, i in self._issued.items() if i.expires > now}  # expired ones go
        token = secrets.token_urlsafe(9)
        self._issued[token] = _Issued(self._key(tool, arguments), now + self.ttl_s)
        return token

    def redeem(self, tool: str, arguments: dict[str, Any], token: str) -> str | None:
        """Use ``token`` for ``tool(arguments)``: None when valid (it is spent), else what is wrong."""
        issued = self._issued.get(token)
        if issued is None:
            return "is unknown or was already used (each token works once)"
        if issued.expires <= self.clock():
            del self._issued[token]
            return f"expired (tokens are valid for {self.ttl_s:g} s)"
        if issued.key != self._key(tool, arguments):
            return "was issued for a different call (the tool or its arguments changed)"
        del self._issued[token]
        return None


def split_token(tool: Tool, arguments: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The arguments without the token, and the token (``confirm_token`` or a ``# confirm:`` comment)."""
    if CONFIRM_ARG in arguments:
        rest = {k: v for k, v in arguments.items() if k != CONFIRM_ARG}
        token = arguments[CONFIRM_ARG]
        return rest, token if isinstance(token, str) and token else None
    if tool.name in SANDBOXED_TOOLS:
        for key in COMMAND_ARGS:
            value = arguments.get(key)
            if isinstance(value, str) and (m := _COMMENT.search(value)):
                return {**arguments, key: value[: m.start()]}, m.group(1)
    return arguments, None


def confirm_reason(tool: Tool, arguments: dict[str, Any], *, irreversible: bool, dangerous_commands: bool) -> str:
    """Why this call needs a confirm token ('' when it does not)."""
    if irreversible and tool.irreversible:
        return "it cannot be undone"
    if dangerous_commands and tool.name in SANDBOXED_TOOLS:
        found = [f for key in COMMAND_ARGS if isinstance(v := arguments.get(key), str) for f in dangerous(v)]
        if found:
            return "dangerous command: " + "; ".join(found)
    return ""


def tokens_of(ctx: ToolContext, ttl_s: float) -> ConfirmTokens:
    """The session's token store (made on first use)."""
    return ctx.get_or_put(CONFIRM_RESOURCE, lambda: ConfirmTokens(ttl_s))


def check(tool: Tool, arguments: dict[str, Any], ctx: ToolContext, *, reason: str, ttl_s: float) -> ToolResult | None:
    """None when the call carries a valid token for itself; else the preview (with a new token).

    ``reason`` is :func:`confirm_reason`'s answer (non-empty: this call needs confirming).
    """
    clean, token = split_token(tool, arguments)
    store = tokens_of(ctx, ttl_s)
    problem = store.redeem(tool.name, clean, token) if token is not None else None
    if token is not None and problem is None:
        return None
    new = store.issue(tool.name, clean)
    head = f"Not run: the confirm token {problem}. " if problem else "Not run yet: this is a preview. "
    how = (
        f'repeat exactly the same call with "{CONFIRM_ARG}": "{new}"'
        if tool.name not in SANDBOXED_TOOLS or tool.irreversible
        else f"repeat exactly the same call with `  # confirm: {new}` appended to the command"
    )
    text = (
        f"{head}'{tool.name}' needs confirming because {reason}.\nThe call:\n{describe_call(tool.name, clean)}\n"
        f"Check that this is what the user asked for. If it is, {how}. The token works once, only for this "
        f"exact call, for {ttl_s:g} s. If it is not, do not run it."
    )
    meta = {PREVIEW_KEY: {"token": new, "reason": reason}, DENIED_KEY: True, "approver": "confirm"}
    return ToolResult(text, is_error=bool(problem), metadata=meta)


__all__ = [
    "CONFIRM_ARG",
    "CONFIRM_RESOURCE",
    "PREVIEW_KEY",
    "ConfirmTokens",
    "check",
    "confirm_reason",
    "split_token",
    "tokens_of",
]
