"""Model backends behind one Protocol, and the factory that picks one from a spec string."""

from __future__ import annotations

from kairos.errors import ConfigError
from kairos.models.base import Model, complete
from kairos.models.settings import LocalConfig, ModelSettings, RemoteConfig

__all__ = ["LocalConfig", "Model", "ModelSettings", "RemoteConfig", "complete", "load_model"]


def load_model(spec: str, settings: ModelSettings | None = None, *, base_url: str | None = None) -> Model:
    """Build a model from ``local``, ``local-small``, ``openai:NAME``, ``anthropic:NAME`` or a ``.gguf`` path.

    Raises:
        ConfigError: the spec names no known backend, or its extra is not installed.
    """
    settings = settings or ModelSettings()
    base_url = base_url or settings.base_url
    remote = settings.remote
    if spec.startswith("openai:"):
        from kairos.models.openai_compat import OpenAICompatModel

        return OpenAICompatModel(
            spec.removeprefix("openai:"),
            base_url=base_url,
            context_window=remote.context_window or 32768,
            max_retries=remote.max_retries,
            backoff_s=remote.backoff_s,
            timeout_s=remote.timeout_s,
            max_retry_wait_s=remote.max_retry_wait_s,
            text_tool_calls=remote.text_tool_calls,
            vision=remote.vision,
        )
    if spec.startswith("anthropic:"):
        from kairos.models.anthropic import AnthropicModel

        return AnthropicModel(
            spec.removeprefix("anthropic:"),
            base_url=base_url,
            context_window=remote.context_window or 200000,
            max_retries=remote.max_retries,
            backoff_s=remote.backoff_s,
            timeout_s=remote.timeout_s,
            max_retry_wait_s=remote.max_retry_wait_s,
            text_tool_calls=remote.text_tool_calls,
            vision=remote.vision,
        )
    if spec in ("local", "local-small") or spec.endswith(".gguf"):
        try:
            from kairos.models.local import LocalModel
        except ImportError as e:
            raise ConfigError(
                f"the local model needs llama-cpp-python ({e}); install it with: pip install 'kairos-harness[local]'"
            ) from e
        local = settings.local
        return LocalModel(
            spec,
            n_ctx=local.n_ctx,
            n_threads=local.threads,
            flash_attn=local.flash_attn,
            max_tokens=settings.max_tokens,
            prefix_cache=False if local.prefix_cache_mb == 0 else None,
            prefix_cache_bytes=local.prefix_cache_mb * 1024 * 1024,
        )
    raise ConfigError(
        f"unknown model {spec!r}: use local, local-small, openai:NAME (with --base-url for vLLM, Ollama, "
        "llama.cpp server), anthropic:NAME, or a path to a .gguf file"
    )
