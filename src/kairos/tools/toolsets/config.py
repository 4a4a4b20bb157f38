"""Settings of the shipped toolsets: ``[tools]`` (perception) and ``[notify]`` (notification channels).

Example ``config.toml``::

    [tools]
    toolsets = ["perception", "collaboration"]   # read_document, fetch_url, web_search; request_*, notify

    [tools.web_search]
    url = "https://search.example.com/api"   # GET ?q=...&n=... returning JSON results
    api_key_env = "SEARCH_API_KEY"            # sent as a bearer token; never shown to the model

    [[notify.channels]]
    name = "ops"
    kind = "webhook"
    url = "https://hooks.example.com/kairos"
    secret_env = "KAIROS_NOTIFY_SECRET"       # HMAC-SHA256 signature, as ``kairos serve`` checks it

    [[notify.channels]]
    name = "me"
    kind = "smtp"
    host = "smtp.example.com"
    from_address = "kairos@example.com"
    to = ["me@example.com"]
    password_env = "KAIROS_SMTP_PASSWORD"

Secrets are always named by an environment variable, never written in a file. An untrusted
workspace's ``kairos.toml`` may not set ``tools.web_search.url`` / ``api_key_env`` nor add
``[[notify.channels]]`` (see :mod:`kairos.security.trust`): either would send data, or a key,
wherever the repository's author likes.
"""

from __future__ import annotations

import os
import re
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,100}")
_CHANNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _check_env_name(value: str) -> str:
    if value and not _ENV_NAME.fullmatch(value):
        raise ValueError("must be an environment variable name such as SEARCH_API_KEY")
    return value


def _check_http_url(value: str) -> str:
    if value and not re.match(r"https?://[^/\s]+", value):
        raise ValueError("must be an http:// or https:// URL")
    return value


def env_secret(name: str) -> str:
    """The value of the environment variable ``name`` ('' when the name is empty or the variable unset)."""
    return os.environ.get(name, "") if name else ""


class WebSearchConfig(BaseModel):
    """``[tools.web_search]``: the search endpoint ``web_search`` calls (none: the tool says it is not set up).

    The endpoint is called as ``GET url?q=<query>&n=<count>`` and answers JSON: a list of results or an
    object with a ``results`` (or ``items``) list; each result has ``title``, ``url`` (or ``link``) and
    ``snippet`` (or ``content``/``description``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = ""
    api_key_env: str = ""
    """Environment variable with the key, sent as ``Authorization: Bearer <key>``."""
    timeout_s: float = Field(15.0, gt=0, le=120)
    max_results: int = Field(8, ge=1, le=50)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return _check_http_url(v)

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, v: str) -> str:
        return _check_env_name(v)


class FetchConfig(BaseModel):
    """``[tools.fetch]``: limits of ``fetch_url``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(20.0, gt=0, le=300)
    max_bytes: int = Field(5_000_000, ge=10_000, le=100_000_000)
    """A larger body is cut at this size (the result says so)."""


class RelevanceConfig(BaseModel):
    """``[tools.relevance_gate]``: answer in text when the model finds no offered tool relevant."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(False, description="score the first reply of each turn: call a tool, or answer?")
    min_p_call: float = Field(
        0.78,
        ge=0,
        le=1,
        description="below this probability of a call (the model's own, renormalised): text only. The default is "
        "the bundled 1.5B model's, calibrated on held-out BFCL cases (kairos bench bfcl --calibrate): it loses 1 % "
        "of the relevant cases and stops 36 % of the irrelevant ones",
    )


BuiltinTool = Literal["bash", "current_time", "edit_file", "grep", "list_dir", "python", "read_file", "write_file"]
BUILTIN_TOOLS: tuple[BuiltinTool, ...] = get_args(BuiltinTool)


class ToolsConfig(BaseModel):
    """``[tools]``: the built-in tools, the perception toolset (documents, web pages, web search), relevance gate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    builtins: tuple[BuiltinTool, ...] = BUILTIN_TOOLS
    """The built-in tools the agent gets (default all eight). An assistant that handles mail or webhooks rarely
    needs the shell, Python or the files: leaving them out saves about 1,200 prompt tokens on every request
    (schemas' JSON at 4 characters a token) and takes them out of reach of an instruction hidden in a mail."""

    toolsets: tuple[Literal["perception", "collaboration", "browser"], ...] = ()
    """Toolsets the agent of ``kairos run``/``chat`` gets. Off by default: their schemas cost prompt tokens on
    every request, about 620 for perception (800 with web_search) and 520 for collaboration (740 with notify),
    estimated at 4 characters a token of the schemas' JSON."""
    page_chars: int = Field(8_000, ge=500, le=100_000)
    """Characters per page of ``read_document`` and ``fetch_url``."""
    compress_over_chars: int = Field(16_000, ge=1_000)
    """A document longer than this is shown compressed around ``focus`` on its first read (with the full text saved)."""
    fetch: FetchConfig = Field(default_factory=FetchConfig)
    web_search: WebSearchConfig = Field(default_factory=WebSearchConfig)
    relevance_gate: RelevanceConfig = Field(default_factory=RelevanceConfig)
    """Off by default; local models only (it reads the model's own call-or-answer probability)."""


class NotifyChannel(BaseModel):
    """One ``[[notify.channels]]`` entry: an SMTP mailbox or a webhook."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Literal["smtp", "webhook"]
    # webhook
    url: str = ""
    secret_env: str = ""
    """Webhook: environment variable with the HMAC secret (empty: the request is not signed)."""
    # smtp
    host: str = ""
    port: int = Field(587, ge=1, le=65535)
    ssl: bool = False
    starttls: bool = True
    user: str = ""
    """SMTP login ('' to send without logging in, e.g. a local relay)."""
    password_env: str = ""
    from_address: str = ""
    to: tuple[str, ...] = ()
    subject: str = "Message from kairos"
    timeout_s: float = Field(20.0, gt=0, le=120)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _CHANNEL_NAME.fullmatch(v):
            raise ValueError("must be a short name: letters, digits, '_', '.', '-'")
        return v

    @field_validator("secret_env", "password_env")
    @classmethod
    def _env(cls, v: str) -> str:
        return _check_env_name(v)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return _check_http_url(v)

    @model_validator(mode="after")
    def _complete(self) -> NotifyChannel:
        if self.kind == "webhook" and not self.url:
            raise ValueError(f"channel {self.name!r}: a webhook needs url")
        if self.kind == "smtp" and not (self.host and self.from_address and self.to):
            raise ValueError(f"channel {self.name!r}: an smtp channel needs host, from_address and to")
        if self.ssl and self.starttls and self.kind == "smtp":
            object.__setattr__(self, "starttls", False)  # implicit TLS already encrypts the connection
        return self


class NotifyConfig(BaseModel):
    """``[notify]``: where ``notify(channel, message)`` can send (user config only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    channels: tuple[NotifyChannel, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> NotifyConfig:
        names = [c.name for c in self.channels]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"channel names must be unique; repeated: {', '.join(dupes)}")
        return self

    def channel(self, name: str) -> NotifyChannel | None:
        """The channel called ``name``, or None."""
        return next((c for c in self.channels if c.name == name), None)


__all__ = ["FetchConfig", "NotifyChannel", "NotifyConfig", "ToolsConfig", "WebSearchConfig", "env_secret"]
