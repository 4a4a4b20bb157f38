"""One MCP server as a kairos tool source: connect, list, call, reconnect with backoff.

:class:`McpServerSource` is a :class:`~kairos.tools.base.ToolSource`. Its tools are
:class:`~kairos.tools.schema.SchemaTool` objects named ``<server>__<tool>`` (the server's name, two
underscores, the tool's name; characters outside ``[A-Za-z0-9_-]`` become ``_``), flagged
``external`` (their output is third-party content, which the defences tag) and, unless the server
marks a tool read-only, ``side_effects`` (so ``[defences] confirm_side_effects`` asks first).

A background task owns the connection. When the server dies (the process exits, the HTTP endpoint
stops answering) the task reconnects with exponential backoff (1 s, 2 s, 4 s ... up to
``retry_max_s``); meanwhile the tools stay listed and a call answers
``MCP server 'x' is down (...); retrying in N s`` as an error result: the run goes on.
``notifications/tools/list_changed`` marks the source changed; the runner takes the new list at
the next turn start (new tools appended, never reordered). A listing the user has not approved
(first use, or a changed digest: see :mod:`kairos.mcp.review`) offers no tools at all.

The connection uses the handshake-era protocol (``initialize``), which every MCP server speaks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TextIO

import httpx
import mcp_types as mt
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from kairos.mcp.config import McpServerConfig
from kairos.mcp.review import ListedTool, McpReview, listing_digest
from kairos.security.review import ReviewStatus
from kairos.tools.base import Tool, ToolContext, ToolResult
from kairos.tools.schema import SchemaTool
from mcp import Client, StdioServerParameters

log = logging.getLogger("kairos.mcp")
SEPARATOR = "__"
"""Between the server's name and the tool's: ``files__read``."""
RETRY_START_S = 1.0
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
Ask = Callable[["McpServerSource"], Awaitable[bool]]
"""Shows a server's unapproved listing to the user; True approves it."""


def tool_name(server: str, tool: str) -> str:
    """The name the model calls: ``<server>__<tool>``, at most 64 characters of ``[A-Za-z0-9_-]``."""
    return (server + SEPARATOR + _UNSAFE.sub("_", tool))[:64]


class ServerDown(Exception):
    """The connection is gone (the message says why)."""


class McpServerSource:
    """The tools of one MCP server (see the module docstring).

    Args:
        config: the server's ``[[mcp.servers]]`` entry.
        workspace: where a stdio server runs (and relative ``cwd`` is anchored).
        review: the approvals of server listings (default: the user's review store).
        log_dir: where a stdio server's stderr goes (``<name>.log``); default: discarded.
        ask: asks the user to approve a listing that is not approved yet (once per listing); None:
            never ask (``kairos mcp approve`` is the way then).
    """

    refresh_mid_turn = False
    """A changed server list waits for the next turn start (a turn keeps the tools it started with)."""

    def __init__(
        self,
        config: McpServerConfig,
        workspace: Path,
        *,
        review: McpReview | None = None,
        log_dir: Path | None = None,
        ask: Ask | None = None,
    ) -> None:
        self.config = config
        self.ask = ask
        self._asked: set[str] = set()
        self.name = config.name
        self.workspace = workspace
        self.review = review or McpReview()
        self.log_dir = log_dir
        self.state = "idle"
        """``idle`` (never started), ``connecting``, ``up``, ``down`` or ``closed``."""
        self.error: str | None = None
        """Why the server is down (or could not be listed)."""
        self.listing: list[ListedTool] = []
        """The server's tools as last listed (approved or not)."""
        self.digest = ""
        self.skipped: list[str] = []
        """Listed tools that are not offered, and why (an invalid schema, a duplicate name)."""
        self.retry_at: float | None = None
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()  # a connect attempt finished (up or failed)
        self._lost = asyncio.Event()  # the connection is gone: reconnect
        self._stale = True  # the server said its list changed (or it reconnected): list again
        self._version = 0
        self._closing = False
        self._tools: list[Tool] = []
        self._delay = RETRY_START_S
        self._refused: int | None = None  # the HTTP status of a refused request (401, 403): the credentials

    # -- ToolSource -------------------------------------------------------------------------

    def fingerprint(self) -> str:
        """Changes when the server's list changed, it (re)connected, or the approval changed."""
        return f"mcp:{self.name}:{self._version}:{self.state == 'up'}:{self._stale}:{self.review_status()}"

    async def list_tools(self) -> Sequence[Tool]:
        """The server's tools if the user approved its listing, else none (connects on first use)."""
        self.start()
        if not self._ready.is_set():  # the first connect: wait for it (a later reconnect never blocks a turn)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.connect_timeout_s):
                    await self._ready.wait()
        if self._stale and self._client is not None:
            await self._refresh()
        status = self.review_status()
        if status in ("needs_approval", "changed") and self.digest not in self._asked:
            self._asked.add(self.digest)
            if self.ask is not None and await self.ask(self):
                self.review.approve(self.name, self.config.target, self.listing)
                return list(self._tools)
            log.warning("%s", self.describe())
        return self.offered()

    def offered(self) -> list[Tool]:
        """The tools offered now: all of an approved listing; of a changed one, those approved as they are."""
        status = self.review_status()
        if status == "approved":
            return list(self._tools)
        if status != "changed":
            return []
        same = {tool_name(self.name, n) for n in self.review.unchanged(self.name, self.config.target, self.listing)}
        return [t for t in self._tools if t.name in same]

    def review_status(self) -> ReviewStatus | None:
        """The approval of the current listing (None before the server was ever listed)."""
        if not self.digest:
            return None
        return self.review.status(self.name, self.digest)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the connection task (idempotent); it keeps reconnecting until :meth:`aclose`."""
        if self._task is None:
            self.state = "connecting"
            self._ready = asyncio.Event()
            self._closing = False
            self._task = asyncio.create_task(self._run(), name=f"mcp:{self.name}")

    async def aclose(self) -> None:
        """Disconnect (a stdio server is stopped) and stop reconnecting."""
        task, self._task = self._task, None
        self.state, self._closing = "closed", True
        if task is not None:
            task.cancel()  # the SDK may turn a cancel into a closed connection: _closing ends the loop then
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._client = None

    async def _run(self) -> None:
        self._delay = delay = RETRY_START_S
        while not self._closing:
            self._lost.clear()
            errlog = self._errlog()
            try:
                async with self._connect(errlog) as client:
                    self._client = client
                    self.state, self.error, self.retry_at = "up", None, None
                    self._stale = True
                    await self._refresh()
                    self._ready.set()
                    self._delay = delay = RETRY_START_S
                    await self._lost.wait()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # whatever the transport raised: the server is unusable
                if not self._lost.is_set():  # else the call that noticed said why
                    self.error = self._credentials_refused() or _describe(e)
            finally:
                self._client = None
                if errlog is not None:
                    errlog.close()
            if self._stopping():
                return
            self.state = "down"
            self.retry_at = time.monotonic() + delay
            self._version += 1
            self._ready.set()
            log.warning("MCP server %s is down (%s); retrying in %g s", self.name, self.error, delay)
            await asyncio.sleep(delay)
            self._delay = delay = min(delay * 2, self.config.retry_max_s)
            self.state, self.retry_at = "connecting", None

    def _credentials_refused(self) -> str | None:
        """What to say when the server refused the request's credentials (the SDK only says "an error response")."""
        status, self._refused = self._refused, None
        if status is None:
            return None
        names = ", ".join(f"{var} (the {header} header)" for header, var in self.config.headers_env.items())
        fix = f"check the value of {names}" if names else "it needs credentials: set headers_env in its [[mcp.servers]]"
        return f"the server refused the credentials (HTTP {status}): {fix}"

    def _stopping(self) -> bool:
        return self._closing  # a method: the flag changes under the loop's feet (aclose)

    def _connect(self, errlog: TextIO | None) -> AbstractAsyncContextManager[Client]:
        c = self.config
        common: dict[str, Any] = {
            "mode": "legacy",
            "read_timeout_seconds": c.connect_timeout_s,  # initialize and list; calls pass their own
            "message_handler": self._on_message,
            "cache": None,
        }
        if c.command is not None:
            cwd = (self.workspace / c.cwd) if c.cwd else self.workspace
            params = StdioServerParameters(command=c.command[0], args=list(c.command[1:]), env=c.env, cwd=cwd)
            assert errlog is not None  # made by _errlog for every stdio server
            return Client(stdio_client(params, errlog=errlog), **common)
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        headers = {}
        for header, var in c.headers_env.items():
            value = os.environ.get(var)
            if not value:
                raise ServerDown(f"set the environment variable {var} (the {header} header)")
            headers[header] = value
        url = str(c.url)

        async def note_refusal(response: httpx.Response) -> None:
            if response.status_code in (401, 403):
                self._refused = response.status_code

        @contextlib.asynccontextmanager
        async def connected() -> AsyncIterator[Client]:
            # the transport leaves a client it was given open: this closes it (and its sockets)
            async with create_mcp_http_client(headers=headers) as http:
                http.event_hooks["response"].append(note_refusal)
                async with Client(streamable_http_client(url, http_client=http), **common) as client:
                    yield client

        return connected()

    def _errlog(self) -> TextIO | None:
        """Where a stdio server's stderr goes (closed when the connection ends)."""
        if self.config.command is None:
            return None
        if self.log_dir is None:
            return open(os.devnull, "w", encoding="utf-8")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return (self.log_dir / f"{self.name}.log").open("a", encoding="utf-8")

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            self._stale = True
        elif isinstance(message, Exception):
            log.debug("MCP server %s sent something unreadable: %s", self.name, message)

    def _mark_lost(self, why: str) -> None:
        if self.state == "up":
            self.error = why
            self.state = "down"
            self.retry_at = time.monotonic() + self._delay
            self._lost.set()

    # -- listing and calling ----------------------------------------------------------------

    async def _refresh(self) -> None:
        client = self._client
        if client is None:
            return
        self._stale = False
        try:
            listed: list[mt.Tool] = []
            cursor: str | None = None
            for _ in range(100):  # a server that pages forever cannot hang the turn
                page = await client.list_tools(cursor=cursor)
                listed.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except (MCPError, ValidationError, OSError, RuntimeError) as e:
            if _is_disconnect(e):
                self._mark_lost(_describe(e))
            else:
                self.error = self._credentials_refused() or f"could not list its tools: {_describe(e)}"
            return
        self.listing = [_listed(t) for t in listed]
        self.digest = listing_digest(self.config.target, self.listing)
        self._tools = self._usable(self.listing)
        self._version += 1

    def _usable(self, listing: Sequence[ListedTool]) -> list[Tool]:
        """Tools for the listing; a duplicate name or an invalid schema is left out (and said so), never a crash."""
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        tools: list[Tool] = []
        names: set[str] = set()
        listed: set[str] = set()
        self.skipped = []
        for t in listing:
            if t.name in listed:
                self.skipped.append(f"{t.name} (listed twice)")
                continue
            listed.add(t.name)
            try:
                Draft202012Validator.check_schema(t.input_schema)
            except SchemaError as e:
                self.skipped.append(f"{t.name} (its input schema is invalid: {e.message})")
                continue
            name = tool_name(self.name, t.name)
            if name in names:  # two names that differ only after the 64th character, or in unsafe characters
                name = name[:55] + "_" + hashlib.sha256(t.name.encode()).hexdigest()[:8]
            names.add(name)
            tools.append(self._tool(t, name))
        for why in self.skipped:
            log.warning("MCP server %s: tool %s is left out", self.name, why)
        return tools

    def _tool(self, t: ListedTool, name: str) -> SchemaTool:
        async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return await self.call(t.name, arguments)

        origin = f"(Tool '{t.name}' of the MCP server '{self.name}'; its output is external content.)"
        return SchemaTool(
            name=name,
            description=f"{t.description}\n{origin}" if t.description else origin,
            parameters=t.input_schema,
            handler=handler,
            timeout_s=self.config.timeout_s,
            max_output_chars=self.config.max_output_chars,
            read_only=t.read_only,
            external=True,
            side_effects=not t.read_only,
        )

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """Call ``tool`` on the server; every failure is an error result, never an exception."""
        client = self._client
        meta = {"mcp_server": self.name, "mcp_tool": tool}
        if client is None or self.state != "up":
            return ToolResult.harness_error(self._down_message(), **meta)
        try:
            result = await client.call_tool(tool, arguments, read_timeout_seconds=self.config.timeout_s)
        except (MCPError, OSError, ValidationError, RuntimeError, TimeoutError) as e:
            if _is_disconnect(e):
                self._mark_lost(_describe(e))
                return ToolResult.harness_error(self._down_message(), **meta)
            if isinstance(e, TimeoutError):
                msg = f"MCP server '{self.name}' did not answer {tool} within {self.config.timeout_s:g} s"
            elif isinstance(e, MCPError):  # the server's own words: its content, external
                msg = f"MCP server '{self.name}' refused the call of {tool}: {e}"
                return ToolResult(msg, is_error=True, metadata={**meta, "exception": type(e).__name__})
            else:
                msg = f"MCP server '{self.name}' returned a malformed result for {tool}: {_describe(e)}"
            return ToolResult.harness_error(msg, **meta, exception=type(e).__name__)
        return to_tool_result(self.name, tool, result)

    def _down_message(self) -> str:
        why = f" ({self.error})" if self.error else ""
        when = ""
        if self.retry_at is not None:
            when = f"; retrying in {max(0.0, self.retry_at - time.monotonic()):.0f} s"
        elif self.state == "connecting":
            when = "; reconnecting now"
        return (
            f"MCP server '{self.name}' is down{why}{when}. Its tools fail until it is back; "
            "use another tool or try again later."
        )

    def describe(self) -> str:
        """One line for people: state, tool count, approval."""
        status = self.review_status()
        parts = [f"{self.name}: {self.state}", f"{len(self.listing)} tools"]
        if status == "changed" and (kept := len(self.offered())):
            parts.append(f"{len(self.listing) - kept} new or changed tools withheld, {kept} approved ones offered "
                         f"(run kairos mcp approve {self.name})")  # fmt: skip
        elif status is not None and status != "approved":
            parts.append(f"tools withheld ({status.replace('_', ' ')}: run kairos mcp approve {self.name})")
        if self.error and self.state != "up":
            parts.append(self.error)
        if self.skipped:
            parts.append("left out: " + "; ".join(self.skipped))
        return ", ".join(parts)


def to_tool_result(server: str, tool: str, result: mt.CallToolResult) -> ToolResult:
    """An MCP result as a kairos result: text blocks joined, other blocks described, never dropped silently."""
    parts: list[str] = []
    blocks: list[Any] = list(result.content)  # Any: a block type a later SDK adds lands in the last branch
    for block in blocks:
        if isinstance(block, mt.TextContent):
            parts.append(block.text)
        elif isinstance(block, mt.ImageContent | mt.AudioContent):
            parts.append(f"[{block.type} {block.mime_type}, {len(block.data) * 3 // 4:,} bytes, not shown]")
        elif isinstance(block, mt.ResourceLink):
            parts.append(f"[resource {block.uri}{f': {block.name}' if block.name else ''}]")
        elif isinstance(block, mt.EmbeddedResource):
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(text if isinstance(text, str) else f"[binary resource {res.uri}, not shown]")
        else:
            parts.append(f"[{getattr(block, 'type', 'unknown')} content, not shown]")
    if result.structured_content is not None and not parts:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    meta = {"mcp_server": server, "mcp_tool": tool}
    if result.is_error:
        return ToolResult(f"MCP tool {tool} (server '{server}') failed: {text or '(no message)'}", True, meta)
    return ToolResult(text, metadata=meta)


def _listed(t: mt.Tool) -> ListedTool:
    read_only = bool(t.annotations and t.annotations.read_only_hint)
    schema = dict(t.input_schema) if t.input_schema else {"type": "object", "properties": {}}
    return ListedTool(
        t.name, t.description or "", schema, dict(t.output_schema) if t.output_schema else None, read_only
    )


def _is_disconnect(e: BaseException) -> bool:
    if isinstance(e, OSError):
        return True
    if isinstance(e, MCPError):
        return e.code == mt.CONNECTION_CLOSED or "connection closed" in str(e).lower()
    return False


def _describe(e: BaseException) -> str:
    if isinstance(e, ServerDown):
        return str(e)
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(_describe(x) for x in e.exceptions)
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


__all__ = ["SEPARATOR", "Ask", "McpServerSource", "ServerDown", "to_tool_result", "tool_name"]
