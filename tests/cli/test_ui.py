"""``kairos ui``: opens the page of a running server, the token in the URL fragment (never sent to a server)."""

from __future__ import annotations

import asyncio
import threading
import webbrowser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kairos.agent import Agent
from kairos.cli import app
from kairos.cli.serve import ui_address
from kairos.context.session import SessionStore
from kairos.runtime import Runtime
from kairos.server import create_app
from kairos.testing import ScriptedModel
from tests.server.conftest import live


def test_the_token_goes_in_the_fragment_quoted() -> None:
    assert ui_address("http://127.0.0.1:8765", None) == "http://127.0.0.1:8765/"
    assert ui_address("http://127.0.0.1:8765", "a b&c") == "http://127.0.0.1:8765/#token=a%20b%26c"


def test_kairos_ui_opens_the_page_of_the_server_that_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    monkeypatch.setenv("KAIROS_API_TOKEN", "s3cret")
    ready, stop = threading.Event(), threading.Event()
    address: list[str] = []

    async def server() -> None:
        async with (
            Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt,
            live(create_app(rt, token="s3cret")) as (_, url),
        ):
            address.append(url)
            ready.set()
            await asyncio.to_thread(stop.wait)

    thread = threading.Thread(target=asyncio.run, args=(server(),))
    thread.start()
    try:
        assert ready.wait(30)
        port = address[0].rsplit(":", 1)[1]
        result = CliRunner().invoke(app, ["ui", "--port", port, "-w", str(tmp_path)])
    finally:
        stop.set()
        thread.join(60)
    assert result.exit_code == 0, result.output
    assert opened == [f"{address[0]}/#token=s3cret"]
