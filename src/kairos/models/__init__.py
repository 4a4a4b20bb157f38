"""Model backends behind one Protocol, and the factory that picks one from a spec string."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kairos.errors import ConfigError
from kairos.models.base import Model, complete

if TYPE_CHECKING:
    from kairos.config import KairosConfig

__all__ = ["Model", "complete", "load_model"]


def load_model(spec: str, config: KairosConfig | None = None, *, base_url: str | None = None) -> Model:
    """Build a model from ``local``, ``local-small``, ``openai:NAME``, ``anthropic:NAME`` or a ``.gguf`` path.

    Raises:
        ConfigError: the spec names no known backend.
    """
    from kairos.config import KairosConfig  # lazy: the config imports every extension's settings

    config = config or KairosConfig()
    base_url = base_url or config.base_url
    if spec.startswith("openai:"):
        from kairos.models.openai_compat import OpenAICompatModel

        return OpenAICompatModel(spec.removeprefix("openai:"), base_url=base_url)
    if spec.startswith("anthropic:"):
        from kairos.models.anthropic import AnthropicModel

        return AnthropicModel(spec.removeprefix("anthropic:"), base_url=base_url)
    if spec in ("local", "local-small") or spec.endswith(".gguf"):
        try:
            from kairos.models.local import LocalModel
        except ImportError as e:
            raise ConfigError(
                f"the local model needs llama-cpp-python ({e}); install it with: pip install 'kairos[local]'"
            ) from e
        return LocalModel(spec, n_ctx=config.local.n_ctx, n_threads=config.local.threads, max_tokens=config.max_tokens)
    raise ConfigError(
        f"unknown model {spec!r}: use local, local-small, openai:NAME (with --base-url for vLLM, Ollama, "
        "llama.cpp server), anthropic:NAME, or a path to a .gguf file"
    )
