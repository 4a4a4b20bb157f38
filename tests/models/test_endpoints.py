"""Where a remote model's requests go, said before waiting on it (issue 24 §5).

``--model openai:x`` with no base URL and no key went to OpenAI's public endpoint and retried five
times (22 s) without saying that nothing was configured; a refused loopback connection was retried
five times too (23 s). Now the first is refused before any request, and a refused connection gets
one quick retry (a server restarting) and then says that nothing listens at the URL.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from kairos.cli import app
from kairos.errors import ConfigError, ModelUnavailableError
from kairos.models import load_model
from kairos.models.anthropic import AnthropicModel
from kairos.models.base import complete
from kairos.models.openai_compat import OpenAICompatModel
from kairos.models.types import Message, ModelRequest

ENDPOINT_VARS = ("KAIROS_BASE_URL", "OPENAI_BASE_URL", "KAIROS_API_KEY", "OPENAI_API_KEY")


@pytest.fixture
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENDPOINT_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def closed_port() -> Iterator[str]:
    """The URL of a loopback port nothing listens on (bound, then closed: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1"


@pytest.mark.usefixtures("no_endpoint")
def test_no_base_url_and_no_key_is_refused_before_any_request() -> None:
    with pytest.raises(ConfigError) as caught:
        load_model("openai:qwen")
    message = str(caught.value)
    assert "no base URL is set" in message and "--base-url" in message and "OPENAI_API_KEY" in message


@pytest.mark.usefixtures("no_endpoint")
def test_either_a_base_url_or_a_key_is_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OpenAICompatModel("qwen", base_url="http://127.0.0.1:9/v1").base_url == "http://127.0.0.1:9/v1"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert OpenAICompatModel("gpt-4o").base_url == "https://api.openai.com/v1"


@pytest.mark.usefixtures("no_endpoint")
def test_the_cli_says_so_at_once(workspace: object) -> None:
    result = CliRunner().invoke(app, ["run", "-w", str(workspace), "--model", "openai:x", "hi"])
    assert result.exit_code == 1 and "no base URL is set" in result.stderr
    assert "Traceback" not in result.output and "retrying" not in result.output


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
async def test_a_refused_connection_is_retried_once_then_named(closed_port: str, backend: str) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    model = (
        OpenAICompatModel("qwen", base_url=closed_port, max_retries=4, sleep=sleep)
        if backend == "openai"
        else AnthropicModel("claude", base_url=closed_port, api_key="k", max_retries=4, sleep=sleep)
    )
    request = ModelRequest("", "", (), (Message.user("hi"),))
    async with model:
        with pytest.raises(ModelUnavailableError) as caught:
            await complete(model, request)
    assert caught.value.attempts == 2 and waits == [0.5]  # not five attempts with growing waits
    message = str(caught.value)
    assert f"nothing listens at {closed_port} (connection refused)" in message
    assert "raise max_retries" not in message  # more retries would not help


def test_the_cli_run_names_the_url_nothing_listens_at(workspace: object, closed_port: str) -> None:
    args = ["run", "-w", str(workspace), "--model", "openai:x", "--base-url", closed_port, "hi"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert result.output.count("retrying in 0.5 s (attempt 2 of 2)") == 1
    assert f"nothing listens at {closed_port}" in result.stderr
