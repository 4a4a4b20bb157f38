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
    await page.locator("#sync-task-cover").click()
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


def _clicker(mode: str) -> Any:
    """A scripted model step: click the button the click-button instruction names, by number or selector."""
    from kairos.models.types import ModelRequest
    from kairos.testing import call, reply

    def step(request: ModelRequest) -> Any:
        text = next(m.content for m in request.messages if m.role == "user" and "The page:" in m.content)
        label = _label(text.split("\n", 1)[0])
        if mode == "indexed":
            found = re.search(rf'\[(\d+)\] button "{re.escape(label)}"', text)
            assert found, text
            return reply("", call("click", {"index": int(found.group(1))}))
        return reply("", call("click", {"selector": f'#area button:text-is("{label}") >> nth=0'}))

    return step


def test_the_bench_runs_and_scores_a_scripted_agent(tmp_path: Any, server: MiniWoBServer) -> None:
    """The bench's plumbing on click-button in both modes: a scripted agent that clicks right succeeds."""
    pytest.importorskip("kairos.browser.tools", reason="the browser agent is not installed")
    from rich.console import Console

    from kairos.testing import ScriptedModel, reply
    from kairos_bench import miniwob

    model = ScriptedModel([_clicker("indexed"), _clicker("indexed"), _clicker("raw_html"), reply("done")])
    out = miniwob.run(
        console=Console(quiet=True),
        trials=2,
        limit=1,
        model=model,
        modes="indexed,raw_html",
        checkpoint=tmp_path / "mw.partial.jsonl",
    )
    assert out["bench"] == "miniwob"
    rows = out["rows"]
    assert [(r["mode"], r["task"], r["seed"]) for r in rows] == [
        ("indexed", "click-button", 0),
        ("indexed", "click-button", 1),
        ("raw_html", "click-button", 0),
        ("raw_html", "click-button", 1),
    ]
    # the episode ends as soon as the task is judged: one step each, no further model call
    assert [r["success"] for r in rows[:3]] == [True, True, True], [r["calls"] for r in rows]
    assert all(r["steps"] == 1 and r["stop"] == "task_done" for r in rows[:3])
    assert all(" -> Clicked " in r["calls"][0] for r in rows[:3]), [r["calls"] for r in rows]
    assert rows[3]["steps"] == 0
    assert not rows[3]["success"]
    summary = out["summary"]
    for key in ("success_indexed", "success_raw_html", "steps_mean", "tokens_per_step", "reverify_catches"):
        assert key in summary
    assert summary["success_indexed"] == 1.0
    assert summary["success_raw_html"] == 0.5
    assert summary["per_task"]["click-button"] == {"indexed": 1.0, "raw_html": 0.5}
    assert out["params"]["published"]
    # a rerun resumes from the checkpoint: no model call, same rows
    again = miniwob.run(
        console=Console(quiet=True),
        trials=2,
        limit=1,
        model=ScriptedModel([]),
        modes="indexed,raw_html",
        checkpoint=tmp_path / "mw.partial.jsonl",
    )
    assert again["rows"] == rows
