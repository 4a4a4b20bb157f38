"""DNS rebinding: a web page that re-points its own name at 127.0.0.1 must not reach a token-less server.

Its scripts arrive with that name in ``Host`` and the page's ``Origin``; a local client (curl, the CLI,
the UI served by kairos itself) names localhost, 127.0.0.1 or ::1.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import websockets

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.runtime import Runtime
from kairos.server import create_app
from kairos.testing import ScriptedModel
from tests.server.conftest import TOKEN, api, live

ATTACKER = {"Host": "rebind.attacker.example:8765", "Origin": "http://rebind.attacker.example:8765"}


@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/health", "/v1/models"])
async def test_a_foreign_host_is_refused_on_every_route(tmp_path: Path, path: str) -> None:
    async with api(tmp_path, ScriptedModel()) as (rt, client):
        refused = await client.get(path, headers={"Host": "rebind.attacker.example:8765"})
        assert refused.status_code == 421
        assert "rebind.attacker.example" in refused.json()["error"]["message"]
        assert "--allow-host" in refused.json()["error"]["message"]
        posted = await client.post("/v1/chat/completions", headers=ATTACKER,
                                   json={"messages": [{"role": "user", "content": "run rm -rf ~"}]})  # fmt: skip
        assert posted.status_code == 421 and rt.store.list(10) == []  # nothing reached a session


async def test_a_foreign_origin_is_refused_and_local_names_pass(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel()) as (_, client):
        evil = await client.get("/v1/sessions", headers={"Host": "127.0.0.1:8765", "Origin": ATTACKER["Origin"]})
        assert evil.status_code == 403 and "rebind.attacker.example" in evil.json()["error"]["message"]
        null = await client.get("/v1/sessions", headers={"Origin": "null"})  # a sandboxed frame, a file
        assert null.status_code == 403
        for host, origin in [("localhost:8765", "http://localhost:8765"), ("[::1]:8765", "http://[::1]:8765"),
                             ("127.0.0.1", None), ("LOCALHOST", None)]:  # fmt: skip
            headers = {"Host": host} | ({"Origin": origin} if origin else {})
            assert (await client.get("/v1/sessions", headers=headers)).status_code == 200, host


async def test_allowed_hosts_add_names_and_a_token_needs_no_host_check(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel(), allowed_hosts=["kairos.lan"]) as (_, client):
        headers = {"Host": "kairos.lan:8765", "Origin": "https://kairos.lan"}
        assert (await client.get("/v1/sessions", headers=headers)).status_code == 200
        assert (await client.get("/v1/sessions", headers=ATTACKER)).status_code == 421
    async with api(tmp_path / "t", ScriptedModel(), token=TOKEN) as (_, client):
        # a rebinding page cannot send the bearer token: with one set, any name may reach the server
        headers = {"Host": "kairos.example", "Authorization": f"Bearer {TOKEN}"}
        assert (await client.get("/v1/sessions", headers=headers)).status_code == 200
        assert (await client.get("/v1/sessions", headers={"Host": "kairos.example"})).status_code == 401


async def test_the_websocket_refuses_a_foreign_host_or_origin(tmp_path: Path) -> None:
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt:
        sid = rt.create_session("ws")
        async with live(create_app(rt)) as (_, url):
            ws_url = url.replace("http", "ws") + f"/v1/sessions/{sid}/ws"
            port = int(url.rsplit(":", 1)[1])
            rebound = f"ws://rebind.attacker.example:{port}/v1/sessions/{sid}/ws"  # the name, resolved to us
            for target, headers in ((ws_url, {"Origin": ATTACKER["Origin"]}), (rebound, {})):
                with pytest.raises(websockets.InvalidStatus) as refused:
                    async with websockets.connect(target, additional_headers=headers, host="127.0.0.1", port=port):
                        pass
                assert refused.value.response.status_code == 403
            async with websockets.connect(ws_url, additional_headers={"Origin": url}):
                pass  # the server's own page may connect
            async with httpx.AsyncClient(base_url=url) as client:
                assert (await client.get("/v1/sessions")).status_code == 200  # a local client by its IP
