"""Configuration: defaults < user config < workspace ``kairos.toml`` < environment < CLI flags.

Each layer overrides the ones before it, table by table (``[local] threads`` in the workspace
keeps ``[local] n_ctx`` from the user config):

1. the defaults below;
2. ``<user config dir>/config.toml`` (optional; ``~/.config/kairos`` on Linux, or
   ``$KAIROS_CONFIG_DIR``): the user's own settings for every workspace;
3. ``<workspace>/kairos.toml``: the workspace's settings, limited while the workspace is not
   trusted (below);
4. the environment: ``KAIROS_MODEL`` and ``KAIROS_BASE_URL``;
5. CLI flags (``--model``, ``--base-url``).

A workspace is often someone else's repository, so until the user runs ``kairos trust`` on it its
``kairos.toml`` may change harmless behaviour and make things safer, but every setting that would
redirect the model endpoint or credentials, speak for the user in the system prompt, or widen
trust and approval is ignored with a notice (:attr:`KairosConfig.notices`): ``base_url``,
``[remote]``, ``instructions``, a ``model`` or ``compression.summarizer`` that is remote or a file
outside the workspace, ``defences.approver`` looser than the user's, ``defences.exempt_tools``,
``defences.confirm_side_effects = false`` over the user's ``true``, ``skills.trust_workspace``,
``skills.trust_builtin`` and ``skills.entry_points`` turned on over the user's ``false``, and
``skills.dirs`` outside the workspace, ``memory.user`` (another user's memories),
``[runtime.mail]``, ``[[runtime.handlers]]`` (instructions with the user's authority), ``[storage]``
(where sessions and events go, and the servers' credentials),
``[[mcp.servers]]`` (they would start
programs or connect to servers; see :mod:`kairos.mcp.config`), a ``[sandbox]`` that confines less than
the user's (``mode``, ``network``, ``bwrap``, higher limits, more paths) and ``allow`` permission
rules. Lists that add protection (``defences.secrets``, ``confirm_tools``, ``external_tools``,
deny and ask ``permissions.rules``) are added to the user's, never replace them.

Example ``kairos.toml``::

    model = "local"              # local | local-small | openai:NAME | anthropic:NAME | /path/model.gguf
    # base_url = "http://127.0.0.1:8000/v1"
    max_iterations = 20
    max_tokens = 1024

    [local]
    n_ctx = 8192
    threads = 2

    [status_bar]                 # the trailing <agent_status> message and its five techniques
    mode = "replace"             # replace | append | auto
    todo = true                  # TODO tools for long multi-step tasks (off by default)
    limits = { phone_call = 3 }  # declared per-tool call limits, shown and enforced

    [skills]
    dirs = [".kairos/skills", "skills"]

    [compression]
    trigger_ratio = 0.8          # full LLM compression above 80% of the window
    strategy = "windowed"

    [subagents]
    enabled = true               # spawn_subagent & co. (off by default)

    [memory]                     # user memory: key cards per session, memory_search, extraction after
    enabled = true
    user = "alice"               # user config only: a workspace cannot choose whose memories it reads

    [knowledge]
    tools = "auto"               # kb_search & co. when `kairos kb add` filled the knowledge base

    [defences]
    confirm_side_effects = true  # ask before write_file / edit_file / bash
    approver = "auto"            # ask on a terminal, deny otherwise

    [runtime]                    # kairos serve / kairos chat: the event runtime's tools
    toolsets = ["tasks", "timers", "watch", "outbox"]   # also: calendar, mail

    classifier = "local-small"   # optional: a small model routes user messages sent mid-run
    [[runtime.handlers]]         # on_email_received: what to do with each new mail (user config)
    type = "email.received"
    then = "Then say in one line what you did."
    cases = [
      { when = "a meeting invitation", then = "check_calendar for its time, then draft_reply to it." },
      { when = "advertising or a newsletter", then = "move_email it to Archive." },
    ]
    [[runtime.rules]]            # first match wins; then user interrupts interrupt, the rest queues
    strategy = "interrupt"
    type = "email.received"
    sender = "*@mycompany.com"
    keywords = ["urgent", "outage"]

    [runtime.mail]               # IMAP in, SMTP out (user config only; the password from the env)
    imap_host = "imap.example.com"
    user = "me@example.com"
    from_address = "me@example.com"
    password_env = "KAIROS_MAIL_PASSWORD"

    [storage]                    # user config (or a trusted workspace); kairos serve --store/--bus win
    store = "embedded"           # SQLite in .kairos/, or "postgresql://kairos@127.0.0.1/kairos"
    bus = "nats://127.0.0.1:4222"  # default "embedded"; a nats-server -js shared by a deployment's processes

    [browser]                    # computer use (kairos run --browser; [tools] toolsets = ["browser"])
    allow_hosts = ["shop.example.com"]  # user config or a trusted workspace; loopback is not allowed by default
    mode = "indexed"             # numbered elements; "raw_html": the page's HTML, actions by CSS selector

Every section is optional; ``kairos config`` prints the effective settings.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from kairos.browser.config import BrowserConfig
from kairos.context.compression.config import CompressionConfig
from kairos.errors import ConfigError
from kairos.mcp.config import McpConfig
from kairos.memory.config import KnowledgeConfig, MemoryConfig
from kairos.models.settings import LocalConfig, ModelSettings, RemoteConfig
from kairos.paths import user_config_file
from kairos.plugins.status_bar.config import StatusBarConfig
from kairos.plugins.subagents.envelope import SubAgentConfig
from kairos.security.defences import DefencesConfig
from kairos.security.permissions import PermissionsConfig
from kairos.security.reviewer import ReviewConfig
from kairos.security.trust import TrustStore, restrict_untrusted
from kairos.skills.config import SkillsConfig
from kairos.storage.config import StorageConfig
from kairos.tools.discovery.config import DiscoveryConfig
from kairos.tools.sandbox import SandboxConfig
from kairos.tools.toolsets.config import BuiltinTool, NotifyConfig, ToolsConfig

CONFIG_FILE = "kairos.toml"
MAX_CONFIG_BYTES = 1024 * 1024
ENV_SETTINGS: dict[str, str] = {"KAIROS_MODEL": "model", "KAIROS_BASE_URL": "base_url"}
"""Environment variables read as settings (they win over both config files)."""


class MailConfig(BaseModel):
    """One mailbox: IMAP in, SMTP out. The password is read from ``password_env`` only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    imap_host: str
    imap_port: int = Field(993, ge=1, le=65535)
    imap_ssl: bool = True
    user: str
    password_env: str = "KAIROS_MAIL_PASSWORD"
    """Name of the environment variable holding the password (IMAP, and SMTP unless ``smtp_password_env``)."""
    from_address: str
    smtp_host: str = ""
    """Empty: the IMAP host."""
    smtp_port: int = Field(587, ge=1, le=65535)
    smtp_ssl: bool = False
    smtp_starttls: bool = True
    smtp_user: str | None = None
    """None: the IMAP user; empty: send without logging in (a local relay)."""
    smtp_password_env: str = ""
    folder: str = "INBOX"
    drafts_folder: str = "Drafts"
    idle: bool = True
    """Use IMAP IDLE when the server offers it (False: always poll)."""
    idle_renew_s: float = Field(60.0, gt=0)
    """IDLE is ended and the folder searched again this often: a message that lands between a search
    and the next IDLE is not reported by IDLE, so this bounds how late it is seen."""
    poll_s: float = Field(60.0, gt=0)
    session: str | None = None
    """The session mail events go to (None: the runtime's default session)."""
    thread_sessions: bool = False
    """Each mail thread in a session of its own (a reply joins its thread's): one mail's handling
    does not steer the next one's, and what a hostile mail says stays out of the others' context."""
    max_body_chars: int = Field(20_000, ge=100)
    max_message_bytes: int = Field(5_000_000, ge=1024)
    timeout_s: float = Field(30.0, gt=0)

    @field_validator("password_env", "smtp_password_env")
    @classmethod
    def _env_name(cls, v: str) -> str:
        if v and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,100}", v):
            raise ValueError("must be an environment variable name such as KAIROS_MAIL_PASSWORD")
        return v

    @property
    def smtp_login_user(self) -> str:
        """The SMTP login ('' for none)."""
        return self.user if self.smtp_user is None else self.smtp_user

    def password(self, smtp: bool = False) -> str:
        """The password from the environment.

        Raises:
            ConfigError: the variable is not set.
        """
        name = (self.smtp_password_env or self.password_env) if smtp else self.password_env
        value = os.environ.get(name)
        if not value:
            raise ConfigError(f"no mail password: set the environment variable {name}")
        return value

    @property
    def account(self) -> str:
        """``user@host:port/folder``: the key of this mailbox's state."""
        return f"{self.user}@{self.imap_host}:{self.imap_port}/{self.folder}"


RuntimeToolset = Literal["tasks", "timers", "watch", "outbox", "calendar", "mail"]
DEFAULT_TOOLSETS: tuple[RuntimeToolset, ...] = ("tasks", "timers", "watch", "outbox")


class UrgencyRuleConfig(BaseModel):
    """One ``[[runtime.rules]]`` entry: events that match (globs; any keyword) get ``strategy``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    strategy: Literal["interrupt", "queue", "parallel", "drop"]
    type: str = "*"
    source: str = "*"
    sender: str = "*"
    keywords: tuple[str, ...] = ()


class HandlerCaseConfig(BaseModel):
    """One case of a handler: an event that is ``when`` (the triage model's pick) is handled by ``then``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    when: str = Field(min_length=1, max_length=200)
    then: str = Field(min_length=1, max_length=2000)


class EventHandlerConfig(BaseModel):
    """One ``[[runtime.handlers]]`` entry (ch6 Exp 6-1's ``on_email_received``): how to handle matching events.

    ``then`` is shown after every matching event; with ``cases``, a triage model first picks the case
    the event is and only that case's ``then`` is shown (a small model follows one instruction better
    than a list it must choose from). Matching as in ``[[runtime.rules]]``; the first handler that
    matches wins.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str = "*"
    source: str = "*"
    sender: str = "*"
    then: str = Field("", max_length=2000)
    cases: tuple[HandlerCaseConfig, ...] = Field((), max_length=12)

    @model_validator(mode="after")
    def _says_something(self) -> EventHandlerConfig:
        if not self.then.strip() and not self.cases:
            raise ValueError("a handler needs `then` (what to do) or `cases` (when … then …)")
        if len({c.when for c in self.cases}) < len(self.cases):
            raise ValueError("two cases of one handler have the same `when`: the triage could not tell them apart")
        return self


class RuntimeConfig(BaseModel):
    """``[runtime]``: which runtime tools the agent gets under ``kairos serve`` and ``kairos chat``.

    Every toolset costs prompt tokens on each request (about 600 for tasks, 370 timers, 190 watch,
    330 outbox, 200 calendar, 450 mail), so a deployment lists only what it uses. ``mail`` needs
    ``[runtime.mail]``; an untrusted workspace cannot set ``[runtime.mail]`` (it names a server and
    the variable holding its password).
    """

    model_config = ConfigDict(extra="forbid")

    toolsets: list[RuntimeToolset] = Field(default_factory=lambda: list(DEFAULT_TOOLSETS))
    mail: MailConfig | None = None
    heartbeat_s: float | None = Field(None, ge=60, description="wake every session this often (off: None)")
    background_after_s: float = Field(30.0, ge=0)
    """A tool call still running after this many seconds goes on as an async task (``bash`` running a build,
    say), so the agent can answer meanwhile and the job can be cancelled; 0: calls run to the end."""
    rules: list[UrgencyRuleConfig] = Field(default_factory=list)
    """Urgency rules, first match wins, before the book's defaults (user interrupts interrupt, the rest queues)."""
    classifier: str | None = None
    """A model spec (e.g. ``local-small``) that routes user messages no rule matched while a run is going,
    and picks handler cases (else the agent's model does, after the turn it may be busy with)."""
    handlers: list[EventHandlerConfig] = Field(default_factory=list)
    """How to handle events from the world (mail, webhooks, file changes); user config or a trusted workspace."""

    @model_validator(mode="after")
    def _mailbox_brings_its_tools(self) -> RuntimeConfig:
        if self.mail is not None:
            self.toolsets = [*self.toolsets, *(t for t in ("mail", "calendar") if t not in self.toolsets)]
        return self


class VoiceConfig(BaseModel):
    """``[voice]``: the agent ``kairos voice`` and the web UI's microphone talk to, and their turn-taking.

    Every prompt token is read before the first word can be spoken (about 95 tokens/s for the bundled model on
    2 cores), and a small model given tools calls them when it should talk, so the voice agent has none by
    default (and no skills): it answers at once. List tools here for a model that uses them well.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    builtins: tuple[BuiltinTool, ...] = ()
    toolsets: tuple[RuntimeToolset, ...] = ()
    speculate: bool = True
    """Start the answer on the transcript taken at a 240 ms pause; the end of speech confirms it (or reruns it)."""
    silence_ms: int = Field(600, ge=240, le=3000)
    """Silence that ends the user's turn."""
    hold_ms: int = Field(2000, ge=600, le=10_000)
    """Silence that ends it while the user dictates digits or spells a name."""
    web: bool = False
    """``kairos serve``'s agent gets the voice part of the system prompt too, for the web UI's microphone: replies
    get short and may carry control tokens (the web UI hides them) in every session, typed ones included."""
    backchannel_ms: int = Field(800, ge=0, le=3000)
    """Speech over the agent at most this long, of words like "mm-hm" or "yeah", does not cut it off."""


class FastSlowConfig(BaseModel):
    """``[fast_slow]``: a slow background agent beside the chat, serve and voice agent (book ch6 Plan 2).

    The foreground answers at once; the background (this model, with the deployment's tools) checks each
    user question in a side session and its answer reaches the foreground as advice in its status.
    Off by default: on 2 cores a second local model slows the first one while it works.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    background: str | None = None
    """A model spec (``local``, ``openai:NAME``, ``anthropic:NAME``, a ``.gguf``): switches it on."""
    timeout_s: float = Field(120.0, gt=0, le=3600)
    """A check still running after this long is cancelled and reported as failed."""


class KairosConfig(BaseModel):
    """Every setting with its default; unknown keys are an error (a typo should not be ignored)."""

    model_config = ConfigDict(extra="forbid")

    model: str = "local"
    base_url: str | None = None
    max_iterations: int = Field(20, ge=1)
    max_tokens: int = Field(1024, ge=16)
    instructions: str = Field("", description="extra deployment instructions appended after the cache boundary")
    local: LocalConfig = Field(default_factory=LocalConfig)
    remote: RemoteConfig = Field(default_factory=RemoteConfig)
    status_bar: StatusBarConfig = Field(default_factory=StatusBarConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    compression: CompressionConfig = Field(default_factory=CompressionConfig)
    subagents: SubAgentConfig = Field(
        default_factory=lambda: SubAgentConfig(enabled=False),
        description="off by default: four more tool schemas (~600 tokens) on every request",
    )
    defences: DefencesConfig = Field(default_factory=DefencesConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    permissions: PermissionsConfig = Field(default_factory=PermissionsConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig, description="opt-in toolsets, page sizes, web_search")
    notify: NotifyConfig = Field(default_factory=NotifyConfig, description="notification channels (user config)")
    mcp: McpConfig = Field(default_factory=McpConfig)
    discovery: DiscoveryConfig = Field(default_factory=DiscoveryConfig, description="discover_tools over the catalog")
    review: ReviewConfig = Field(default_factory=ReviewConfig, description="reviewer model, sidecar, confirm tokens")
    memory: MemoryConfig = Field(default_factory=MemoryConfig, description="user memory (off by default)")
    knowledge: KnowledgeConfig = Field(default_factory=KnowledgeConfig, description="kb_* tools and the embedder")
    storage: StorageConfig = Field(default_factory=StorageConfig, description="store and bus URLs (user config)")
    voice: VoiceConfig = Field(default_factory=VoiceConfig, description="the voice agent's tools and turn-taking")
    fast_slow: FastSlowConfig = Field(default_factory=FastSlowConfig, description="a slow background agent (off)")
    browser: BrowserConfig = Field(default_factory=BrowserConfig, description="computer use: Chromium, allowed hosts")

    _notices: tuple[str, ...] = PrivateAttr(default=())
    _sources: tuple[str, ...] = PrivateAttr(default=())

    @property
    def notices(self) -> tuple[str, ...]:
        """What :func:`load_config` ignored and why, for the user to see (empty if nothing was)."""
        return self._notices

    @property
    def sources(self) -> tuple[str, ...]:
        """Where the settings came from, lowest precedence first (``defaults`` alone when built in code)."""
        return ("defaults", *self._sources)

    def for_voice(self) -> KairosConfig:
        """These settings for a voice agent: [voice]'s tools (of those allowed anyway), a shorter status, no skills."""
        builtins = tuple(b for b in self.voice.builtins if b in self.tools.builtins)
        toolsets = [t for t in self.voice.toolsets if t in self.runtime.toolsets]
        return self.model_copy(
            update={
                "tools": self.tools.model_copy(update={"builtins": builtins, "toolsets": ()}),
                "runtime": self.runtime.model_copy(update={"toolsets": toolsets}),
                # the user's words are right above: no recital, no timestamps (the status keeps the time)
                "status_bar": self.status_bar.model_copy(update={"current_request": False, "timestamps": False}),
                "skills": self.skills.model_copy(update={"enabled": False}),
                "subagents": self.subagents.model_copy(update={"enabled": False}),
                "discovery": self.discovery.model_copy(update={"enabled": False}),
            }
        )

    def model_settings(self) -> ModelSettings:
        """The settings ``load_model`` takes (the rest of the config is none of a backend's business)."""
        return ModelSettings(base_url=self.base_url, max_tokens=self.max_tokens, local=self.local, remote=self.remote)


def load_config(
    workspace: Path,
    overrides: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    user_file: Path | None = None,
    trusted: bool | None = None,
) -> KairosConfig:
    """The effective configuration of ``workspace``; what was ignored is in ``config.notices``.

    Callers show ``config.notices`` to the user (the CLI prints them on stderr): a setting from an
    untrusted workspace that was ignored must not go unnoticed.

    Args:
        workspace: the workspace; its ``kairos.toml`` is read if there is one.
        overrides: CLI flags, e.g. ``{"model": "local"}``; None values are skipped, tables merge.
        env: the environment (default ``os.environ``), for ``KAIROS_MODEL`` and ``KAIROS_BASE_URL``.
        user_file: the user's config file (default ``<user config dir>/config.toml``); may be absent.
        trusted: whether the workspace is trusted (default: whether ``kairos trust`` recorded it).

    Returns:
        The validated configuration, with ``notices`` and ``sources`` set.

    Raises:
        ConfigError: a file cannot be read, is not UTF-8 or not TOML, or a setting is unknown or
            invalid; the message names the file.
    """
    workspace = workspace.resolve()
    user_path = user_file if user_file is not None else user_config_file()
    ws_path = workspace / CONFIG_FILE
    sources = ["defaults"]
    notices: list[str] = []

    user_data = read_toml(user_path) or {}
    baseline = _validate(user_data, user_path)
    if user_path.is_file():
        sources.append(f"user config {user_path}")
    misnamed = user_path.with_name(CONFIG_FILE)  # the workspace file's name, where the user's file is config.toml
    if user_file is None and misnamed != ws_path and misnamed.is_file():
        warnings = [f"{misnamed} is not read: your own settings go in {user_path} (rename the file)"]
    else:
        warnings = []

    ws_data = read_toml(ws_path)
    if ws_data is not None:
        _validate(ws_data, ws_path)
        if trusted is None:
            trusted = TrustStore().is_trusted(workspace)
        if trusted:
            sources.append(f"workspace config {ws_path} (trusted workspace)")
        else:
            ws_data, notices = restrict_untrusted(ws_data, baseline.model_dump(), workspace, ws_path)
            sources.append(f"workspace config {ws_path} (untrusted workspace: limited)")
        ws_data = _anchor_model_paths(ws_data, workspace)

    environ = os.environ if env is None else env
    env_data = {key: value for var, key in ENV_SETTINGS.items() if (value := environ.get(var, ""))}
    if env_data:
        sources.append("environment " + ", ".join(var for var in ENV_SETTINGS if environ.get(var)))
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    if flags:
        sources.append("command line " + ", ".join(sorted(flags)))

    merged = _merge(_merge(_merge(user_data, ws_data or {}), env_data), flags)
    config = _validate(merged, " < ".join(sources[1:]) or "defaults")
    # private attributes take part in ==: leaving them empty when only the defaults were used keeps
    # load_config(empty workspace) == KairosConfig()
    config._notices = (*warnings, *notices)
    config._sources = tuple(sources[1:])
    return config


def read_toml(path: Path) -> dict[str, Any] | None:
    """The TOML table in ``path``, or None when there is no such file.

    Raises:
        ConfigError: the path is a directory or not a regular file, cannot be read, is too large,
            is not UTF-8 (the message says where the bad byte is) or is not valid TOML.
    """
    try:
        if not path.exists():
            return None
    except OSError as e:  # e.g. a parent that is a file, or no permission to look
        raise ConfigError(f"{path} cannot be read: {e.strerror or e}") from e
    if path.is_dir():
        raise ConfigError(
            f"{path} is a directory; kairos reads settings from a file of that name: rename or remove the directory"
        )
    if not path.is_file():
        raise ConfigError(f"{path} is not a regular file (a pipe or device?); replace it with a TOML file")
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path} has {size} bytes; a settings file has at most {MAX_CONFIG_BYTES}")
        raw = path.read_bytes()
    except PermissionError as e:
        raise ConfigError(f"{path} cannot be read (permission denied): fix its permissions or remove it") from e
    except OSError as e:
        raise ConfigError(f"{path} cannot be read: {e.strerror or e}") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(
            f"{path} is not UTF-8 text: byte 0x{raw[e.start]:02x} at line {line}, column {column} "
            f"({e.reason}); save the file as UTF-8"
        ) from e
    try:
        return tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from e


def _validate(data: Mapping[str, Any], where: Path | str) -> KairosConfig:
    try:
        return KairosConfig.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"invalid configuration ({where}): {problems}") from e


def _merge(low: Mapping[str, Any], high: Mapping[str, Any]) -> dict[str, Any]:
    """``high`` over ``low``; tables merge key by key, anything else is replaced."""
    out = dict(low)
    for key, value in high.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _anchor_model_paths(data: dict[str, Any], workspace: Path) -> dict[str, Any]:
    """A relative ``.gguf`` path in ``kairos.toml`` means a file of the workspace, not of the cwd."""

    def anchored(spec: Any) -> Any:
        if isinstance(spec, str) and spec.endswith(".gguf") and not Path(spec).expanduser().is_absolute():
            return str(workspace / spec)
        return spec

    out = dict(data)
    if "model" in out:
        out["model"] = anchored(out["model"])
    compression = out.get("compression")
    if isinstance(compression, Mapping) and "summarizer" in compression:
        out["compression"] = {**compression, "summarizer": anchored(compression["summarizer"])}
    return out
