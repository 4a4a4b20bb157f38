"""Model settings: what ``load_model`` needs, and nothing else of the configuration.

``kairos.toml`` spells them as top-level ``base_url``/``max_tokens`` and the ``[local]`` and
``[remote]`` tables; :meth:`kairos.config.KairosConfig.model_settings` collects them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class LocalConfig(BaseModel):
    """``[local]``: the bundled llama.cpp model."""

    model_config = ConfigDict(extra="forbid")

    n_ctx: int = Field(8192, ge=512, description="context window of the local model in tokens")
    threads: int | None = Field(None, ge=1, description="CPU threads; default: all cores")
    flash_attn: bool = Field(False, description="llama.cpp's flash attention (no measurable gain on a 2-core CPU)")
    prefix_cache_mb: int = Field(
        2048,
        ge=0,
        description="size bound of the disk cache of system-prefix KV states that lets a new process start warm "
        "(least recently used go first; shared by every workspace; 0: no disk cache)",
    )


class RemoteConfig(BaseModel):
    """``[remote]``: OpenAI-compatible and Anthropic endpoints."""

    model_config = ConfigDict(extra="forbid")

    context_window: int | None = Field(
        None, ge=512, description="the server model's window in tokens; default 32768 (openai:) or 200000 (anthropic:)"
    )
    timeout_s: float = Field(120.0, gt=0, description="seconds one HTTP attempt may take")
    max_retries: int = Field(4, ge=0, description="retries after a transient failure (429, 5xx, timeouts)")
    backoff_s: float = Field(1.0, ge=0, description="first retry wait; doubles per retry (a server's Retry-After wins)")
    max_retry_wait_s: float = Field(60.0, ge=0, description="the longest single wait, whatever the server asks")
    text_tool_calls: Literal["auto", "off"] = Field(
        "auto",
        description="auto: when the server returns no tool call but the text holds one (a fenced JSON "
        '{"name", "arguments"} block or <tool_call> tags, as many local servers do), use it; off: text stays text',
    )
    vision: bool = Field(
        False,
        description="the model sees images: a tool result's screenshot is sent to it (as image parts); off: a "
        "one-line note stands for it. Turn it on for a model that reads images (Claude, GPT-4o, Qwen2.5-VL…)",
    )


class ModelSettings(BaseModel):
    """Everything a backend is built from besides its spec string."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    max_tokens: int = Field(1024, ge=16)
    local: LocalConfig = Field(default_factory=LocalConfig)
    remote: RemoteConfig = Field(default_factory=RemoteConfig)
