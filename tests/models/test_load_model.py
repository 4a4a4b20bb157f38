"""load_model hands every [remote] setting to the remote backends."""

from __future__ import annotations

import pytest

from kairos.models import ModelSettings, RemoteConfig, load_model
from kairos.models._remote import RemoteModel
from kairos.models.anthropic import AnthropicModel
from kairos.models.openai_compat import OpenAICompatModel

REMOTE = RemoteConfig(
    context_window=4096, timeout_s=7.5, max_retries=2, backoff_s=0.25, max_retry_wait_s=9, text_tool_calls="off"
)


@pytest.mark.parametrize(("spec", "cls"), [("openai:qwen", OpenAICompatModel), ("anthropic:claude-x", AnthropicModel)])
async def test_remote_settings_reach_the_backend(spec: str, cls: type[RemoteModel[object]]) -> None:
    model = load_model(spec, ModelSettings(remote=REMOTE), base_url="http://127.0.0.1:9/v1")
    assert isinstance(model, cls)
    async with model:
        assert (model.name, model.base_url, model.context_window) == (spec.split(":")[1], "http://127.0.0.1:9/v1", 4096)
        assert model.timeout_s == 7.5 and model.text_tool_calls == "off"
        policy = model.retry_policy
        assert (policy.max_retries, policy.backoff_s, policy.max_retry_after_s, policy.max_backoff_s) == (2, 0.25, 9, 9)
        assert model._client.timeout == 7.5 and model._client.max_retries == 0


@pytest.mark.parametrize(("spec", "window"), [("openai:qwen", 32768), ("anthropic:claude-x", 200000)])
async def test_defaults(spec: str, window: int) -> None:
    model = load_model(spec, base_url="http://127.0.0.1:9")
    assert isinstance(model, RemoteModel)
    async with model:
        assert model.context_window == window and model.text_tool_calls == "auto"
        assert model.retry_policy.max_retry_after_s == 60.0 and model.retry_policy.max_backoff_s == 30.0


def test_text_tool_calls_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="text_tool_calls"):
        OpenAICompatModel("m", base_url="http://127.0.0.1:9/v1", text_tool_calls="always")  # type: ignore[arg-type]


def test_local_settings_reach_the_local_model() -> None:
    pytest.importorskip("llama_cpp")
    from kairos.models import LocalConfig

    local = LocalConfig(n_ctx=4096, threads=1, flash_attn=True, prefix_cache_mb=0)
    model = load_model("local", ModelSettings(local=local))  # lazy: nothing is loaded
    assert (model.context_window, model.n_threads, model.flash_attn, model.prefix_cache) == (4096, 1, True, False)  # type: ignore[attr-defined]
    assert not load_model("local", ModelSettings()).flash_attn  # type: ignore[attr-defined]  # off unless asked
