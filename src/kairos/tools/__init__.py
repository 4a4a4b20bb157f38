"""Tools: the :class:`Tool` protocol and its implementations, the context they run in, tool sets.

``@tool`` makes a tool of a typed function; :class:`SchemaTool` wraps a JSON Schema and a handler;
:class:`ToolSource` is a set of tools that may change; :class:`ToolSet` is a session's frozen snapshot.
The built-in tools are in :mod:`kairos.tools.builtins`.
"""

from kairos.tools.base import (
    InvalidArguments,
    StaticTools,
    Tool,
    ToolContext,
    ToolResult,
    ToolSet,
    ToolSource,
    spec_digest,
)
from kairos.tools.function import FunctionTool, make_tool, tool
from kairos.tools.schema import SchemaTool

__all__ = [
    "FunctionTool",
    "InvalidArguments",
    "SchemaTool",
    "StaticTools",
    "Tool",
    "ToolContext",
    "ToolResult",
    "ToolSet",
    "ToolSource",
    "make_tool",
    "spec_digest",
    "tool",
]
