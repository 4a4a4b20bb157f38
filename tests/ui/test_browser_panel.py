"""The session view's browser panel: the live numbered screenshot of a session that uses a browser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kairos.testing import ScriptedModel
from tests.server.conftest import until
from tests.support.browser_files import observe, png
from tests.ui.conftest import serve

TOKEN = "ui-browser-token"
SHOP = "http://127.0.0.1:9/results.html?q=kettle"


async def open_chat(page: Any, url: str, sid: str) -> None:
    await page.goto(f"{url}/#/chat/{sid}")
    await page.wait_for_selector("main[data-ready]")


async def natural_width(page: Any) -> int:
    return int(await page.eval_on_selector("#browser-screen", "img => img.complete ? img.naturalWidth : 0"))


async def test_the_panel_shows_the_screenshot_and_follows_it(tmp_path: Path, page: Any) -> None:
    async with serve(tmp_path, ScriptedModel(), token=TOKEN) as (rt, url):
        sid = rt.create_session("shopping")
        observe(rt.state_dir, sid, SHOP, "Search results – Brightside Home", png(320, 200, (40, 90, 160)), at=100.0)
        await page.goto(f"{url}/#token={TOKEN}")  # the image too comes with the bearer header
        await page.wait_for_selector("main[data-ready]")
        await open_chat(page, url, sid)
        panel = page.locator("#browser-panel")
        await panel.wait_for(state="visible")
        assert await page.text_content("#browser-url") == SHOP
        assert await page.text_content("#browser-title") == "Search results – Brightside Home"
        await page.wait_for_function("document.querySelector('#browser-screen').naturalWidth === 320")
        alt = await page.get_attribute("#browser-screen", "alt")
        assert alt is not None and "Search results – Brightside Home" in alt and SHOP in alt
        box = await page.locator("#browser-screen").bounding_box()
        panel_box = await panel.bounding_box()
        assert box is not None and panel_box is not None and box["width"] <= panel_box["width"]  # scaled to fit

        # the next observation: a new page, a new image
        product = "http://127.0.0.1:9/product.html?id=steel-kettle"
        observe(rt.state_dir, sid, product, "Brushed Steel Kettle", png(400, 250, (200, 60, 40)), at=101.0)
        await page.locator("#browser-url", has_text=product).wait_for()
        await page.wait_for_function("document.querySelector('#browser-screen').naturalWidth === 400")
        assert await panel.get_attribute("data-at") == "101"
        src = await page.get_attribute("#browser-screen", "src")
        assert src is not None and src.startswith("data:image/png;base64,")

        # full size on a click
        await page.click("#browser-screen")
        await page.locator("dialog.bp-dialog[open] img.bp-big").wait_for()
        await page.get_by_role("button", name="Close").click()
        await page.locator("dialog.bp-dialog[open]").wait_for(state="detached")


async def test_no_panel_for_a_session_that_never_used_a_browser(tmp_path: Path, page: Any) -> None:
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/browser/" in r.url else None)
    async with serve(tmp_path, ScriptedModel()) as (rt, url):
        sid = rt.create_session("plain")
        await open_chat(page, url, sid)
        await until(lambda: any(r.endswith("/browser/page") for r in requests))
        assert await page.locator("#browser-panel").is_hidden()
        assert not any(r.endswith("/browser/screen") for r in requests)
        # a browser starts later: the panel appears
        observe(rt.state_dir, sid, SHOP, "Results", png(100, 60, (0, 120, 0)))
        await page.locator("#browser-panel").wait_for(state="visible", timeout=10_000)


async def test_polling_stops_when_the_view_is_left(tmp_path: Path, page: Any) -> None:
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if r.url.endswith("/browser/page") else None)
    async with serve(tmp_path, ScriptedModel()) as (rt, url):
        sid = rt.create_session("shopping")
        observe(rt.state_dir, sid, SHOP, "Results", png(100, 60, (0, 120, 0)))
        await open_chat(page, url, sid)
        await page.locator("#browser-panel").wait_for(state="visible")
        await until(lambda: len(requests) >= 2)  # polled again
        await page.goto(f"{url}/#/memory")
        await page.wait_for_timeout(300)
        seen = len(requests)
        await page.wait_for_timeout(2500)
        assert len(requests) == seen


async def test_the_panel_fits_a_phone(tmp_path: Path, browser: Any) -> None:
    context = await browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2)
    page = await context.new_page()
    try:
        async with serve(tmp_path, ScriptedModel()) as (rt, url):
            sid = rt.create_session("shopping")
            long_url = SHOP + "&" + "x" * 300
            observe(rt.state_dir, sid, long_url, "A page with a rather long title " * 4, png(1280, 800, (9, 9, 9)))
            await open_chat(page, url, sid)
            await page.locator("#browser-panel").wait_for(state="visible")
            await page.wait_for_function("document.querySelector('#browser-screen').naturalWidth === 1280")
            width = await page.evaluate("document.scrollingElement.scrollWidth")
            assert width <= 390
            box = await page.locator("#browser-screen").bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    finally:
        await context.close()


async def test_polling_pauses_while_the_tab_is_hidden(tmp_path: Path, page: Any) -> None:
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if r.url.endswith("/browser/page") else None)
    async with serve(tmp_path, ScriptedModel()) as (rt, url):
        sid = rt.create_session("shopping")
        observe(rt.state_dir, sid, SHOP, "Results", png(100, 60, (0, 120, 0)))
        await open_chat(page, url, sid)
        await page.locator("#browser-panel").wait_for(state="visible")
        await page.evaluate(SET_VISIBILITY, "hidden")
        await page.wait_for_timeout(300)
        seen = len(requests)
        await page.wait_for_timeout(2500)
        assert len(requests) == seen
        observe(rt.state_dir, sid, SHOP + "&page=2", "Results, page 2", png(100, 60, (0, 0, 120)))
        await page.evaluate(SET_VISIBILITY, "visible")  # polled again at once
        await page.locator("#browser-url", has_text="page=2").wait_for(timeout=3000)


SET_VISIBILITY = """state => {
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => state });
  document.dispatchEvent(new Event("visibilitychange"));
}"""
