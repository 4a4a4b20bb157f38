"""``[mcp]`` settings: the MCP servers kairos connects to (their tools become the agent's tools).

Example ``kairos.toml`` (user config, or a trusted workspace: an untrusted workspace's servers
never start, see :mod:`kairos.security.trust`)::

    [[mcp.servers]]
    name = "files"                                   # tools are named files__<tool>
    command = ["python", "-m", "my_mcp_server"]      # stdio: kairos starts the process
    env = { LOG_LEVEL = "info" }                     # added to a minimal environment (no secrets)

    [[mcp.servers]]
    name = "search"
    url = "http://127.0.0.1:9000/mcp"                # Streamable HTTP
    headers_env = { Authorization = "SEARCH_AUTH" }  # header value read from $SEARCH_AUTH at connect time
    timeout_s = 30
"""

from __future__ import annotations

import re
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kairos.tools.base import DEFAULT_MAX_OUTPUT_CHARS

SERVER_NAME = r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}"
"""A server's name: the prefix of its tools' names (``<name>__<tool>``)."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,100}")


class McpServerConfig(BaseModel):
    """One ``[[mcp.servers]]`` entry: a stdio ``command`` or a Streamable HTTP ``url`` (exactly one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=f"^{SERVER_NAME}$")
    command: tuple[str, ...] | None = None
    """The program and its arguments (stdio transport); run in the workspace."""
    url: str | None = Field(None, pattern=r"^https?://")
    """The endpoint (Streamable HTTP transport)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for a stdio server, on top of a minimal one (PATH, HOME, ...)."""
    cwd: str | None = None
    """Working directory of a stdio server (relative to the workspace; default the workspace)."""
    headers_env: dict[str, str] = Field(default_factory=dict)
    """HTTP header name → name of the environment variable holding its value (values never enter config)."""
    timeout_s: float = Field(60.0, gt=0)
    """Seconds a tool call may take."""
    connect_timeout_s: float = Field(60.0, gt=0)
    """Seconds to start the server, initialize the session and list its tools (``npx`` servers start slowly)."""
    max_output_chars: int = Field(DEFAULT_MAX_OUTPUT_CHARS, ge=100)
    enabled: bool = True
    retry_max_s: float = Field(60.0, gt=0)
    """Longest wait between reconnect attempts (backoff doubles from 1 s up to this)."""

    @field_validator("name")
    @classmethod
    def _no_separator(cls, v: str) -> str:
        if "__" in v:
            raise ValueError("must not contain '__' (it separates the server's name from its tools' names)")
        return v

    @field_validator("command")
    @classmethod
    def _non_empty(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None and (not v or not v[0]):
            raise ValueError("command must name a program, e.g. ['python', '-m', 'server']")
        return v

    @field_validator("headers_env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [name for name in v.values() if not _ENV_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an environment variable name (values come from the environment)")
        return v

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r}: give exactly one of command (stdio) or url (HTTP)")
        return self

    @property
    def target(self) -> str:
        """What the server is (its command line or URL), for messages and the review digest."""
        return " ".join(self.command) if self.command is not None else str(self.url)


class McpConfig(BaseModel):
    """``[mcp]``: the servers whose tools the agent gets (each after the user approved its tools)."""

    model_config = ConfigDict(extra="forbid")

    servers: list[McpServerConfig] = Field(default_factory=list)

    @field_validator("servers")
    @classmethod
    def _unique(cls, v: list[McpServerConfig]) -> list[McpServerConfig]:
        names = [s.name for s in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"two MCP servers are named {dupes[0]!r}; names must be unique")
        return v

    def enabled(self) -> list[McpServerConfig]:
        """The servers to connect to."""
        return [s for s in self.servers if s.enabled]


__all__ = ["SERVER_NAME", "McpConfig", "McpServerConfig"]
