"""The page itself: served from the package, offline, behind its token, with a strict policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kairos.testing import ScriptedModel
from tests.ui.conftest import serve


async def test_page_loads_offline_with_every_asset_from_the_server(tmp_path: Path, page: Any) -> None:
    async with serve(tmp_path, ScriptedModel()) as (_, url):
        loaded: list[str] = []
        page.on("request", lambda r: loaded.append(r.url))
        response = await page.goto(url + "/")
        assert response.status == 200
        assert "script-src 'self'" in response.headers["content-security-policy"]
        await page.wait_for_selector("main[data-ready]")  # the default view (chat) loaded: nothing in flight
        assert loaded and all(u.startswith(url) for u in loaded), loaded


async def test_a_token_protected_server_asks_for_the_token_and_keeps_it_out_of_the_address_bar(
    tmp_path: Path, page: Any
) -> None:
    async with serve(tmp_path, ScriptedModel(), token="ui-secret-token") as (_, url):
        await page.goto(url + "/")
        await page.wait_for_selector("form.login")
        await page.fill("#token", "wrong")
        await page.click("form.login button")
        await page.wait_for_selector("form.login")  # refused: asked again
        await page.goto(url + "/#token=ui-secret-token")
        await page.wait_for_selector("main[data-ready]")
        assert "ui-secret-token" not in page.url
        assert not await page.query_selector("form.login")
