"""Shared helpers: a running runtime with the app in front, in process (ASGI) or on loopback (uvicorn)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.runtime import Runtime
from kairos.server import create_app
from kairos.server.serving import KairosServer, make_server
from kairos.testing import ScriptedModel
from kairos.tools.base import Tool

TOKEN = "t0ken-for-tests"
SECRET = "webhook-secret-for-tests"


@asynccontextmanager
async def api(
    tmp_path: Path, model: ScriptedModel, tools: list[Tool] | None = None, **kw: Any
) -> AsyncIterator[tuple[Runtime, httpx.AsyncClient]]:
    """A running runtime and an in-process client of its app."""
    async with Runtime(Agent(model, tools=tools or []), SessionStore(tmp_path)) as rt:
        app = create_app(rt, **kw)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client:
            yield rt, client


@asynccontextmanager
async def live(app: FastAPI) -> AsyncIterator[tuple[KairosServer, str]]:
    """``app`` under uvicorn on 127.0.0.1 (a free port), in this loop; stopped (drained) at the end."""
    server = make_server(app, "127.0.0.1", 0, signals=False)
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(30):
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)
    try:
        yield server, server.url()
    finally:
        server.stop()
        await asyncio.wait_for(task, 60)


async def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Wait until ``condition()`` holds (polled; a generous bound that a working system never reaches)."""
    async with asyncio.timeout(timeout_s):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)
