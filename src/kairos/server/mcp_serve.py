"""``kairos mcp serve``: kairos tools as an MCP server, over stdio or Streamable HTTP.

Every call runs through kairos's executor, as it would for kairos's own agent: arguments are
checked against the schema, the tool is confined to the workspace, timed out and its output capped
with an explicit notice; any failure is an ``isError`` result, never a crashed server. Approval of
side-effecting calls is the MCP client's job (its user decides what its agent may do).

Over HTTP the server binds loopback by default; any other address needs a bearer token (from
``$KAIROS_API_TOKEN``, as ``kairos serve``), and when a token is set every request must carry it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import mcp_types as mt
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from kairos import __version__
from kairos.models.types import ToolCall
from kairos.server.auth import bearer_ok
from kairos.tools.base import Tool, ToolContext, ToolSet
from kairos.tools.executor import execute
from kairos.tools.sandbox import SANDBOX_RESOURCE, Sandbox, SandboxConfig

_CALL_IDS = itertools.count(1)


def _annotations(t: Tool) -> mt.ToolAnnotations:
    return mt.ToolAnnotations(read_only_hint=t.read_only, destructive_hint=t.side_effects, open_world_hint=t.external)


def build_server(tools: Sequence[Tool], ctx: ToolContext, *, name: str = "kairos") -> Server[Any]:
    """An MCP server (the SDK's low-level ``Server``) that lists ``tools`` and runs their calls in ``ctx``."""
    toolset = ToolSet(tools)
    listed = [
        mt.Tool(
            name=t.name,
            description=t.spec.description,
            input_schema=t.spec.parameters,
            annotations=_annotations(t),
        )
        for t in toolset
    ]

    async def list_tools(_: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None) -> mt.ListToolsResult:
        return mt.ListToolsResult(tools=listed)

    async def call_tool(_: ServerRequestContext[Any], params: mt.CallToolRequestParams) -> mt.CallToolResult:
        call = ToolCall(f"mcp-{next(_CALL_IDS)}", params.name, json.dumps(params.arguments or {}))
        done = await execute(call, toolset, ctx)
        return mt.CallToolResult(
            content=[mt.TextContent(type="text", text=done.result.content)], is_error=done.result.is_error
        )

    return Server(name, version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client on this process's stdin/stdout until it disconnects."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]


def require_token(app: ASGIApp, token: str) -> ASGIApp:
    """Wrap ``app``: HTTP requests without ``Authorization: Bearer <token>`` get a 401."""

    async def guarded(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            if not bearer_ok(header, token):
                body = b'{"error": "missing or wrong bearer token"}'
                headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def http_app(server: Server[Any], *, host: str = "127.0.0.1", token: str | None = None) -> ASGIApp:
    """The Streamable HTTP app (endpoint ``/mcp``), behind a bearer token when one is given."""
    app: ASGIApp = server.streamable_http_app(host=host)
    return require_token(app, token) if token else app


async def serve_http(
    server: Server[Any],
    host: str,
    port: int,
    *,
    token: str | None = None,
    on_started: Callable[[str], None] | None = None,
) -> None:
    """Serve over Streamable HTTP until interrupted; ``on_started`` gets the endpoint URL.

    Raises:
        ConfigError: ``host`` is not loopback and there is no token.
        OSError: the address cannot be bound.
    """
    import asyncio

    import uvicorn

    from kairos.server.auth import check_bind

    check_bind(host, token)
    config = uvicorn.Config(http_app(server, host=host, token=token), host=host, port=port, log_level="warning")
    userver = uvicorn.Server(config)
    task = asyncio.create_task(userver.serve())
    while not userver.started and not task.done():  # noqa: ASYNC110  (uvicorn offers no started event)
        await asyncio.sleep(0.02)
    if userver.started and on_started is not None:
        sock = userver.servers[0].sockets[0].getsockname()
        on_started(f"http://{host}:{sock[1]}/mcp")
    await task
    if not userver.started:
        raise OSError(f"could not serve on {host}:{port}")


def workspace_context(workspace: Path, sandbox: SandboxConfig | None = None) -> ToolContext:
    """The tool context of a served workspace; its commands run in a sandbox with ``sandbox``'s settings."""
    ctx = ToolContext(workspace.resolve(), session_id="mcp")
    ctx.put(SANDBOX_RESOURCE, Sandbox(sandbox or SandboxConfig()))
    return ctx


__all__ = ["build_server", "http_app", "require_token", "serve_http", "serve_stdio", "workspace_context"]
