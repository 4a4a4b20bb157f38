"""Toolsets kairos ships (issue 10 §2): perception, execution checkers and collaboration with a human.

- :func:`perception_tools`: ``read_document``, ``fetch_url``, ``web_search`` (:mod:`.perception`);
- :data:`execution_checkers`: what ``write_file``/``edit_file`` run after each write (:mod:`.checkers`);
- :func:`collaboration_tools`: ``request_approval``, ``request_input``, ``notify`` (:mod:`.collaboration`).

:mod:`.registry` names every toolset kairos has (these, the file and execution tools, the demo catalog
and the runtime's integrations): configuration and ``kairos mcp serve`` choose from it by name.

Each returns plain :class:`~kairos.tools.base.Tool` objects, so the same tools serve a local
agent and an MCP server.
"""

from kairos.tools.toolsets.checkers import execution_checkers
from kairos.tools.toolsets.collaboration import HUMAN_RESOURCE, Human, TerminalHuman, collaboration_tools
from kairos.tools.toolsets.config import NotifyChannel, NotifyConfig, ToolsConfig, WebSearchConfig
from kairos.tools.toolsets.perception import perception_tools

__all__ = [
    "HUMAN_RESOURCE",
    "Human",
    "NotifyChannel",
    "NotifyConfig",
    "TerminalHuman",
    "ToolsConfig",
    "WebSearchConfig",
    "collaboration_tools",
    "execution_checkers",
    "perception_tools",
]
