"""``/v1/sessions/{id}/browser/*``: the session's latest numbered screenshot and page record, for the web UI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kairos.browser.paths import browser_dir, screen_path
from kairos.testing import ScriptedModel
from tests.server.conftest import TOKEN, api
from tests.support.browser_files import observe, png

AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOX = {"index": 1, "role": "button", "name": "Add to cart", "box": [10, 20, 120, 32]}


def _error(response: Any, status: int, type: str | None = None) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if type is not None:
        assert error["type"] == type
    return str(error["message"])


async def test_the_screenshot_and_page_record_are_served(tmp_path: Path) -> None:
    image = png(64, 40, (200, 30, 30))
    async with api(tmp_path, ScriptedModel(), token=TOKEN) as (rt, client):
        sid = rt.create_session("shopping")
        observe(rt.state_dir, sid, "http://127.0.0.1:9/product.html?id=kettle", "Kettle", image, [BOX], at=1000.5)
        screen = await client.get(f"/v1/sessions/{sid}/browser/screen", headers=AUTH)
        assert screen.status_code == 200
        assert screen.headers["content-type"] == "image/png"
        assert screen.headers["cache-control"] == "no-store"
        assert screen.content == image
        page = await client.get(f"/v1/sessions/{sid}/browser/page", headers=AUTH)
        assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
        record = page.json()
        assert record["url"] == "http://127.0.0.1:9/product.html?id=kettle" and record["title"] == "Kettle"
        assert record["at"] == 1000.5 and record["elements"] == [BOX]
        assert record["screen_at"] == screen_path(rt.state_dir, sid).stat().st_mtime


async def test_a_missing_or_wrong_token_is_refused(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel(), token=TOKEN) as (rt, client):
        sid = rt.create_session()
        observe(rt.state_dir, sid, "http://127.0.0.1:9/", "Home", png(4, 4, (0, 0, 0)))
        for what in ("screen", "page"):
            path = f"/v1/sessions/{sid}/browser/{what}"
            _error(await client.get(path), 401)
            _error(await client.get(path, headers={"Authorization": "Bearer wrong"}), 401)
            assert (await client.get(path, headers=AUTH)).status_code == 200


async def test_a_session_without_a_browser_is_a_404(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel()) as (rt, client):
        sid = rt.create_session()
        for what in ("screen", "page"):
            message = _error(await client.get(f"/v1/sessions/{sid}/browser/{what}"), 404, "no_browser")
            assert "has no browser screenshot" in message
            assert "no session" in _error(await client.get(f"/v1/sessions/nope/browser/{what}"), 404)


async def test_a_front_end_says_the_browser_may_run_on_a_worker(tmp_path: Path) -> None:
    class Workers:
        async def ask(self, session: str, verb: str, **arguments: Any) -> dict[str, Any] | None:
            return None

    async with api(tmp_path, ScriptedModel(), workers=Workers()) as (rt, client):
        sid = rt.create_session()
        message = _error(await client.get(f"/v1/sessions/{sid}/browser/screen"), 404, "no_browser")
        assert "workers" in message and "state directory" in message


async def test_a_session_id_cannot_reach_outside_the_browser_folder(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel()) as (rt, client):
        sid = rt.create_session()
        secret = png(2, 2, (1, 2, 3))
        (rt.state_dir / "screen.png").write_bytes(secret)  # what "<state>/browser/.." would reach
        (rt.state_dir.parent / "screen.png").write_bytes(secret)
        for evil in ("..", "../..", "..%2F..", "%2E%2E", f"{sid}%2F..%2F..", "../../screen.png"):
            response = await client.get(f"/v1/sessions/{evil}/browser/screen")
            assert response.status_code == 404, (evil, response.status_code)
            assert response.content != secret
        assert browser_dir(rt.state_dir, "../..").parent == rt.state_dir / "browser"  # paths sanitises the id
        # and were ".." a session (it cannot be), "<state>/browser/.." is still refused
        rt.has_session = lambda session_id: True  # type: ignore[method-assign]
        response = await client.get("/v1/sessions/%2E%2E/browser/screen")
        assert _error(response, 404, "no_browser") == "session '..' has no browser here"


async def test_a_screenshot_being_written_is_a_503(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel()) as (rt, client):
        sid = rt.create_session()
        observe(rt.state_dir, sid, "http://127.0.0.1:9/", "Home", png(4, 4, (0, 0, 0)))
        path = screen_path(rt.state_dir, sid)
        path.write_bytes(path.read_bytes()[:-6])  # torn: no IEND yet
        response = await client.get(f"/v1/sessions/{sid}/browser/screen")
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
