"""The MiniWoB++ environment of ``kairos bench miniwob`` in a real Chromium, no model: served, seeded, scored."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kairos_bench._miniwob import CHROMIUM, TASKS, MiniWoBServer, html_root, outcome, start_episode

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (make test installs chromium)")


@pytest.fixture(scope="module")
def server() -> Any:
    pytest.importorskip("playwright", reason="playwright is not installed")
    try:
        html_root()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    with MiniWoBServer() as srv:
        yield srv


@pytest.fixture
async def page() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield await browser.new_page()
        finally:
            await browser.close()


def _label(utterance: str) -> str:
    found = re.search(r'"([^"]+)"', utterance)
    assert found, utterance
    return found.group(1)


def test_every_task_is_in_the_wheel(server: MiniWoBServer) -> None:
    assert len(TASKS) >= 24
    assert len(set(TASKS)) == len(TASKS)
    for task in TASKS:
        with urllib.request.urlopen(server.url(task), timeout=10) as r:
            assert r.status == 200
    with pytest.raises(FileNotFoundError):
        server.url("no-such-task")


async def test_the_right_click_is_rewarded(server: MiniWoBServer, page: Any) -> None:
    utterance = await start_episode(page, server.url("click-button"), 3)
    assert utterance.startswith("Click on the")
    before = await outcome(page)
    assert not before.done
    assert not before.success
    await page.locator("#area button").filter(has_text=re.compile(f"^{re.escape(_label(utterance))}$")).click()
    after = await outcome(page)
    assert after.done
    assert after.raw_reward > 0
    assert after.success
    # a further click does not start a second episode that would overwrite the reward
    await page.locator("#area button").first.click(force=True)
    assert await outcome(page) == after


async def test_a_wrong_click_is_not(server: MiniWoBServer, page: Any) -> None:
    utterance = await start_episode(page, server.url("click-button"), 3)
    label = _label(utterance)
    wrong = page.locator("#area button").filter(has_not_text=re.compile(f"^{re.escape(label)}$"))
    assert await wrong.count() > 0
    await wrong.first.click()
    got = await outcome(page)
    assert got.done
    assert got.raw_reward <= 0
    assert not got.success


async def test_seeds_repeat_and_typing_works(server: MiniWoBServer, page: Any) -> None:
    url = server.url("enter-text")
    first = await start_episode(page, url, 7)
    assert first == await start_episode(page, url, 7)
    assert first != await start_episode(page, url, 8)
    utterance = await start_episode(page, url, 7)
    await page.fill("#tt", _label(utterance))
    await page.click("#subbtn")
    got = await outcome(page)
    assert got.success
    assert got.reason is None or isinstance(got.reason, str)
