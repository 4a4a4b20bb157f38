"""``kairos mcp``: serve kairos tools over MCP, and review the MCP servers kairos connects to.

``serve`` exposes toolsets to any MCP client. ``list``, ``show``, ``approve`` and ``revoke`` manage
the servers of ``[[mcp.servers]]``: a server's tools reach the model only after its listing (every
tool's name, description and schemas) was approved here, and again after any change (``show``
prints the diff). Looking at a server starts it: only servers from the user config or a trusted
workspace are there to look at.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kairos.cli._console import console, err_console, existing_workspace
from kairos.errors import KairosError
from kairos.security.terminal import safe_for_terminal
from kairos.server.auth import TOKEN_ENV

if TYPE_CHECKING:
    from kairos.config import KairosConfig
    from kairos.mcp.client import McpServerSource
    from kairos.mcp.config import McpServerConfig
    from kairos.mcp.review import McpReview

mcp_app = typer.Typer(
    help="Serve kairos tools over MCP; review the MCP servers kairos uses.", no_args_is_help=True, rich_markup_mode=None
)
WorkspaceOpt = Annotated[
    Path,
    typer.Option(
        "--workspace",
        "-w",
        help="the workspace (its tools' root; its kairos.toml is read)",
        callback=existing_workspace,
    ),
]
NameArg = Annotated[str, typer.Argument(help="the server's name in [[mcp.servers]]")]


def _out(text: str, *, err: bool = False) -> None:
    (err_console if err else console).print(safe_for_terminal(text), markup=False)


def _config(workspace: Path) -> KairosConfig:
    from kairos.config import load_config

    try:
        config = load_config(workspace)
    except KairosError as e:
        _out(f"error: {e}", err=True)
        raise typer.Exit(1) from e
    for notice in config.notices:
        _out(f"notice: {notice}", err=True)
    return config


def _server(config: KairosConfig, name: str) -> McpServerConfig:
    found = next((s for s in config.mcp.servers if s.name == name), None)
    if found is None:
        known = ", ".join(s.name for s in config.mcp.servers) or "(none)"
        _out(f"error: no MCP server named {name!r} in the configuration; configured: {known}", err=True)
        raise typer.Exit(1)
    return found


async def _probe(server: McpServerConfig, workspace: Path, review: McpReview) -> tuple[McpServerSource, str]:
    """Connect, list, disconnect: the source keeps the listing and its digest; plus how it was."""
    from kairos.mcp.client import McpServerSource

    source = McpServerSource(server, workspace, review=review)
    try:
        await source.list_tools()
        return source, source.describe()
    finally:
        await source.aclose()


@mcp_app.command("serve")
def serve(
    toolset: Annotated[
        list[str] | None, typer.Option("--toolset", "-t", help="toolset to expose (repeatable); default: files")
    ] = None,
    http: Annotated[int | None, typer.Option("--http", min=0, max=65535, help="serve HTTP on this port")] = None,
    host: Annotated[str, typer.Option("--host", help="HTTP address; non-loopback needs a token")] = "127.0.0.1",
    workspace: WorkspaceOpt = Path("."),
    token_env: Annotated[str, typer.Option("--token-env", help="env var holding the bearer token")] = TOKEN_ENV,
) -> None:
    """Expose kairos toolsets to any MCP client: stdio by default, Streamable HTTP with --http PORT.

    The tools work inside the workspace only. Over HTTP, any address other than loopback needs a
    bearer token (from $KAIROS_API_TOKEN), and when one is set every request must carry it.
    """
    from kairos.server.mcp_serve import build_server, serve_http, serve_stdio, workspace_context
    from kairos.tools.toolsets import registry as toolsets

    try:
        config = _config(workspace)
        tools = toolsets.tools(toolset or ["files"], config, served=True)
    except KeyError as e:
        _out(f"error: {e.args[0]}", err=True)
        raise typer.Exit(1) from e
    ctx = workspace_context(workspace, config.sandbox)
    server = build_server(tools, ctx)
    token = os.environ.get(token_env) or None

    def started(url: str) -> None:
        auth = "bearer token required" if token else "no auth (loopback only)"
        _out(f"kairos MCP server on {url} ({auth}); tools: {', '.join(t.name for t in tools)}")

    async def main() -> None:
        try:
            if http is None:
                await serve_stdio(server)
            else:
                await serve_http(server, host, http, token=token, on_started=started)
        finally:
            await ctx.aclose()  # the tools' per-session resources (a shell, clients)

    try:
        asyncio.run(main())
    except (KairosError, OSError) as e:
        _out(f"error: {e}", err=True)
        raise typer.Exit(1) from e
    except KeyboardInterrupt:  # pragma: no cover - interactive
        pass


@mcp_app.command("list")
def list_servers(workspace: WorkspaceOpt = Path(".")) -> None:
    """Every configured MCP server: connects to each and says whether its tools are approved."""
    from kairos.mcp.review import McpReview

    config = _config(workspace)
    if not config.mcp.servers:
        if any("ignored mcp.servers" in n for n in config.notices):
            _out(f"no MCP servers in effect: this workspace is not trusted, so its [[mcp.servers]] are ignored "
                 f"(if you trust it: kairos trust {shlex.quote(str(workspace.resolve()))})")  # fmt: skip
        else:
            _out("no MCP servers configured (add [[mcp.servers]] to kairos.toml or your user config)")
        return
    review = McpReview()
    for server in config.mcp.servers:
        if not server.enabled:
            _out(f"{server.name}: disabled ({server.target})")
            continue
        _, line = asyncio.run(_probe(server, workspace, review))
        _out(f"{line} [{server.target}]")


@mcp_app.command("show")
def show(name: NameArg, workspace: WorkspaceOpt = Path(".")) -> None:
    """A server's tools as the model would read them, and what changed since the approval."""
    from kairos.mcp.review import McpReview

    config = _config(workspace)
    _show(*asyncio.run(_probe(_server(config, name), workspace, McpReview())))


def _show(source: McpServerSource, line: str) -> None:
    from kairos.mcp.review import render_listing

    if not source.digest:
        _out(f"error: {line}", err=True)
        raise typer.Exit(1)
    _out(f"MCP server {source.name} [{source.config.target}]: {source.review_status()}, digest {source.digest[:16]}")
    for line in render_listing(source.listing):
        _out(line)
    diff = source.review.diff(source.name, source.listing)
    if diff:
        _out("\nchanged since the approval:")
        for line in diff:
            _out(line)


@mcp_app.command("approve")
def approve(
    name: NameArg,
    workspace: WorkspaceOpt = Path("."),
    yes: Annotated[bool, typer.Option("--yes", "-y", help="approve without asking")] = False,
) -> None:
    """Show a server's tools (and the diff since the last approval) and approve exactly this listing."""
    from kairos.mcp.review import McpReview

    config = _config(workspace)
    review = McpReview()
    source, line = asyncio.run(_probe(_server(config, name), workspace, review))
    _show(source, line)
    if source.review_status() == "approved":
        _out(f"{name} is already approved")
        return
    if not yes:
        if not sys.stdin.isatty():
            _out("error: not a terminal; pass --yes to approve what is shown above", err=True)
            raise typer.Exit(1)
        if not typer.confirm(f"Offer these {len(source.listing)} tools of {name} to the model?", default=False):
            raise typer.Exit(1)
    review.approve(name, source.config.target, source.listing)
    _out(f"approved {name} ({len(source.listing)} tools)")


@mcp_app.command("revoke")
def revoke(name: NameArg) -> None:
    """Withdraw a server's approval: its tools are withheld until approved again."""
    from kairos.mcp.review import McpReview

    if McpReview().revoke(name):
        _out(f"revoked {name}")
    else:
        _out(f"{name} was not approved")


__all__ = ["mcp_app"]
