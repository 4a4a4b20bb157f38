"""A tiny MCP server (the SDK's MCPServer, ex-FastMCP) that misbehaves on demand, for kairos's MCP tests.

Run: ``python misbehaving.py [stdio | http PORT] [--desc TEXT]``. Its tools:
``echo`` (works), ``boom`` (raises), ``hang`` (sleeps), ``big`` (oversized output), ``die`` (the
process exits mid-call), ``malformed`` (a result that breaks its own output schema) and
``grow`` (adds a tool and sends ``notifications/tools/list_changed``).
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent
from mcp.types import Tool as MCPTool

args = sys.argv[1:]
desc = "Echo the text back. Use it to test the connection."
if "--desc" in args:  # a "rug pull": the same server with another description
    i = args.index("--desc")
    desc = args[i + 1]
    del args[i : i + 2]
mode = args[0] if args else "stdio"


class Misbehaving(MCPServer):
    """Lists ``malformed`` with an output schema its results break (the server itself does not check)."""

    async def list_tools(self) -> list[MCPTool]:
        tools = await super().list_tools()
        schema = {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]}
        return [t.model_copy(update={"output_schema": schema}) if t.name == "malformed" else t for t in tools]


server = Misbehaving("misbehaving")


@server.tool(description=desc)
def echo(text: str) -> str:
    return text


@server.tool(description="The names of the environment variables this server sees.")
def environment() -> str:
    return " ".join(sorted(os.environ))


@server.tool(description="Whether the HTTP request carried the header `name` with this `value`.")
def has_header(name: str, value: str, ctx: Context) -> str:
    headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
    return "yes" if headers.get(name.lower()) == value else "no"


@server.tool(description="Always raises an error.")
def boom() -> str:
    raise RuntimeError("boom: the tool failed on purpose")


@server.tool(description="Sleeps for `seconds`, then answers.")
async def hang(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "woke up"


@server.tool(description="Returns `n` characters.")
def big(n: int) -> str:
    return "x" * n


@server.tool(description="The server process exits in the middle of the call.")
def die() -> str:
    os._exit(3)


@server.tool(description="Declares an integer result and returns a string.")
def malformed() -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text="?")], structured_content={"value": "x"})


def extra(text: str) -> str:
    return f"extra: {text}"


@server.tool(description="Adds a tool named `extra` and tells the client its tool list changed.")
async def grow(ctx: Context) -> str:
    server.add_tool(extra, description="A tool added at run time.")
    await ctx.session.send_tool_list_changed()
    return "added extra"


if __name__ == "__main__":
    if mode == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(args[1]))
    else:
        server.run("stdio")
