"""Configuration: ``kairos.toml`` in the workspace, overridden by CLI flags and environment.

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

    [defences]
    confirm_side_effects = true  # ask before write_file / edit_file / bash
    approver = "auto"            # ask on a terminal, deny otherwise

Every section is optional; ``kairos config`` prints the effective settings.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kairos.context.compression.config import CompressionConfig
from kairos.errors import ConfigError
from kairos.models.settings import LocalConfig, ModelSettings, RemoteConfig
from kairos.plugins.status_bar.config import StatusBarConfig
from kairos.plugins.subagents.envelope import SubAgentConfig
from kairos.security.defences import DefencesConfig
from kairos.skills.config import SkillsConfig

CONFIG_FILE = "kairos.toml"


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

    def model_settings(self) -> ModelSettings:
        """The settings ``load_model`` takes (the rest of the config is none of a backend's business)."""
        return ModelSettings(base_url=self.base_url, max_tokens=self.max_tokens, local=self.local, remote=self.remote)


def load_config(workspace: Path, overrides: dict[str, Any] | None = None) -> KairosConfig:
    """Read ``<workspace>/kairos.toml`` (if any) and apply non-None ``overrides``.

    Raises:
        ConfigError: the file is not valid TOML or has unknown/invalid keys.
    """
    path = workspace / CONFIG_FILE
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path} is not valid TOML: {e}") from e
    for key, value in (overrides or {}).items():
        if value is not None:
            data[key] = value
    try:
        return KairosConfig.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"invalid configuration ({path}): {problems}") from e
