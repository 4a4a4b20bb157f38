"""The MCP servers of one kairos process, as a plugin: their tools join the agent's.

:class:`McpTools` contributes one :class:`~kairos.mcp.client.McpServerSource` per enabled
``[[mcp.servers]]`` entry. A server connects when its tools are first listed (a session's first
turn), stays connected while any session is open, and is stopped when the last one closes.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from kairos.agent.plugin import Plugin, RunContext
from kairos.mcp.client import Ask, McpServerSource
from kairos.mcp.config import McpConfig
from kairos.mcp.review import McpReview, render_listing
from kairos.security.terminal import safe_for_terminal
from kairos.tools.base import Tool, ToolSource


class McpTools(Plugin):
    """The tools of the configured MCP servers (each withheld until the user approved its listing).

    Args:
        config: the ``[mcp]`` settings.
        workspace: where stdio servers run.
        review: the approvals of server listings (default: the user's review store).
        log_dir: where stdio servers' stderr goes (default ``<workspace>/.kairos/mcp``).
        ask: asks the user about a listing not approved yet (see :func:`terminal_review`); None: never ask.
    """

    stage = "annotate"

    def __init__(
        self,
        config: McpConfig,
        workspace: Path,
        *,
        review: McpReview | None = None,
        log_dir: Path | None = None,
        ask: Ask | None = None,
    ) -> None:
        review = review or McpReview()
        logs = log_dir or workspace / ".kairos" / "mcp"
        self.sources = [McpServerSource(s, workspace, review=review, log_dir=logs, ask=ask) for s in config.enabled()]
        self._open = 0

    def tools(self) -> Sequence[Tool | ToolSource]:
        """One tool source per server."""
        return self.sources

    def source(self, name: str) -> McpServerSource | None:
        """The server named ``name``, if configured."""
        return next((s for s in self.sources if s.name == name), None)

    async def open(self, ctx: RunContext) -> None:
        """Count the session (servers connect lazily, when their tools are first listed)."""
        self._open += 1

    async def close(self, ctx: RunContext) -> None:
        """Stop the servers when the last session closes (a later session reconnects)."""
        self._open -= 1
        if self._open <= 0:
            await self.aclose()

    async def aclose(self) -> None:
        """Disconnect every server."""
        for s in self.sources:
            await s.aclose()

    def notices(self) -> list[str]:
        """One line per server that is down or whose tools are withheld, for the user."""
        return [s.describe() for s in self.sources if s.state != "up" or s.review_status() != "approved"]


async def terminal_review(source: McpServerSource, *, stdin: TextIO | None = None, out: TextIO | None = None) -> bool:
    """Show the listing (and what changed since the approval) on the terminal; ``y`` approves it.

    Escape sequences in descriptions are shown, not obeyed. Anything but ``y``/``yes`` (an empty
    line, end of input) declines: the tools stay withheld.
    """
    stdin, out = stdin or sys.stdin, out or sys.stderr
    status = "changed since you approved it" if source.review_status() == "changed" else "not approved yet"
    lines = [f"MCP server {source.name} [{source.config.target}]: its tools are {status}."]
    diff = source.review.diff(source.name, source.listing)
    lines.extend(diff or render_listing(source.listing))
    lines.append(f"Offer these {len(source.listing)} tools of {source.name} to the model? [y/N] ")
    out.write(safe_for_terminal("\n".join(lines)))
    out.flush()
    answer = await asyncio.to_thread(stdin.readline)
    return answer.strip().lower() in ("y", "yes")


__all__ = ["McpTools", "terminal_review"]
