"""Garbage on the wire never takes the server down (a real uvicorn on loopback)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import httpx
import pytest

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.runtime import Runtime
from kairos.server import create_app
from kairos.testing import ScriptedModel
from tests.server.conftest import TOKEN, live

GARBAGE = [
    b"GARBAGE\r\n\r\n",
    b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
    b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n{}",
    b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\nContent-Length: 2\r\n\r\n{}",
    b"GET /v1/sessions/%00%ff/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /v1/events HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    bytes(random.Random(7).randrange(256) for _ in range(4096)),
]


async def _raw(url: str, payload: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(payload)
        await writer.drain()
        async with asyncio.timeout(3):  # some garbage gets no answer: the server waits for the rest
            return await reader.read(65536)
    except (ConnectionError, TimeoutError):
        return b""
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except ConnectionError:
            pass


@pytest.mark.parametrize("payload", GARBAGE, ids=range(len(GARBAGE)))
async def test_garbage_requests_leave_the_server_serving(tmp_path: Path, payload: bytes) -> None:
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt:
        async with live(create_app(rt, token=TOKEN)) as (_, url):
            answer = await _raw(url, payload)
            if answer:
                assert answer.startswith(b"HTTP/1.1 4"), answer[:200]  # refused, never a 5xx
            async with httpx.AsyncClient(base_url=url) as client:
                assert (await client.get("/v1/health")).status_code == 200
        assert rt.store.list() == []  # nothing was created by any of them
