"""The memory, knowledge, tools and settings pages in a real browser, against the routes behind them.

No model is loaded: memories come from a scripted extractor, vectors from ``HashEmbedder``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from kairos.knowledge import HashEmbedder, KnowledgeBase
from kairos.memory import UserMemory
from kairos.models.types import Message
from kairos.testing import ScriptedModel, call, reply
from tests.ui.conftest import serve


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[UserMemory]:
    """Two memories the user said in session ``s-old``."""
    extractor = ScriptedModel([reply("", call("save_memories", {"operations": [
        {"op": "add", "content": "The user lives in Oslo", "importance": 0.9},
        {"op": "add", "content": "The user likes green tea"},
    ]}))])  # fmt: skip
    mem = UserMemory.open(tmp_path / "mem", HashEmbedder(), extractor)
    said = [Message.user("I live in Oslo and I like green tea.")]
    await mem.ingest_session(said, session_id="s-old", at=datetime(2026, 1, 5, tzinfo=UTC))
    yield mem
    mem.close()


def _card(page: Any, text: str) -> Any:
    return page.locator("article.memory", has_text=text)


async def _focused(page: Any) -> str:
    return str(await page.evaluate("document.activeElement.className"))


async def _focused_id(page: Any) -> str:
    return str(await page.evaluate("document.activeElement.id"))


async def _contents(url: str) -> list[str]:
    async with httpx.AsyncClient() as client:
        return [m["content"] for m in (await client.get(url + "/v1/memory")).json()["memories"]]


async def test_a_memory_is_forgotten_after_a_confirm_step(tmp_path: Path, page: Any, memory: UserMemory) -> None:
    async with serve(tmp_path, ScriptedModel(), memory=memory) as (_, url):
        await page.goto(url + "/#/memory")
        oslo = _card(page, "The user lives in Oslo")
        await oslo.wait_for()
        assert "said by the user" in await oslo.inner_text() and "s-old" in await oslo.inner_text()
        await oslo.locator("button.forget").click()
        await oslo.locator("button.cancel").click()  # changed their mind: nothing happens
        assert await _contents(url) == ["The user lives in Oslo", "The user likes green tea"]
        # by keyboard: the confirm step takes the focus on Cancel, Escape goes back, Shift+Tab reaches the danger
        await oslo.locator("button.forget").focus()
        await page.keyboard.press("Enter")
        assert await _focused(page) == "cancel"
        await page.keyboard.press("Escape")
        assert await _focused(page) == "danger forget" and not await oslo.locator(".confirm").count()
        await page.keyboard.press("Enter")
        await page.keyboard.press("Shift+Tab")
        assert await _focused(page) == "danger confirm-forget"
        await page.keyboard.press("Enter")
        await oslo.wait_for(state="detached")
        await _card(page, "green tea").wait_for()
        assert await _contents(url) == ["The user likes green tea"]
        # the filter narrows the list; nothing matching says so
        await page.fill("input[aria-label='Filter memories']", "walrus")
        await page.get_by_text("No memory matches “walrus”.").wait_for()


async def test_a_memory_is_edited_into_a_new_version_with_its_history(
    tmp_path: Path, page: Any, memory: UserMemory
) -> None:
    async with serve(tmp_path, ScriptedModel(), memory=memory) as (_, url):
        await page.goto(url + "/#/memory")
        oslo = _card(page, "The user lives in Oslo")
        await oslo.locator("button.edit").click()
        editor = oslo.locator("textarea")
        await editor.fill("")
        await oslo.locator("button.save").click()
        await oslo.get_by_text("A memory needs some text").wait_for()  # refused before it reaches the server
        await editor.fill("The user lives in Bergen")
        await editor.press("Control+Enter")
        bergen = page.locator("article.memory", has=page.locator("p.mem-content", has_text="Bergen"))
        await bergen.get_by_text("version 2").first.wait_for()
        assert "edited by the user" in await bergen.locator(".mem-prov").first.inner_text()
        assert "The user lives in Bergen" in await _contents(url)
        assert "The user lives in Oslo" not in await _contents(url)
        await bergen.locator("summary").click()  # the history keeps the old text and where it came from
        versions = bergen.locator(".mem-versions li")
        assert await versions.count() == 2
        first = await versions.nth(0).inner_text()
        assert "The user lives in Oslo" in first and "superseded" in first and "s-old" in first


async def test_knowledge_search_shows_passages_with_their_ranks(tmp_path: Path, page: Any) -> None:
    kb = KnowledgeBase.open(tmp_path / "kb", HashEmbedder())
    (tmp_path / "deploy.md").write_text("# Deploy\n\nDeploys run every Friday at noon.\n")
    (tmp_path / "later.md").write_text("# Later\n\nThe walrus meeting moved to Tuesday.\n")
    kb.ingest([tmp_path / "deploy.md"])
    kb.ingest([tmp_path / "later.md"], vectors=False)
    try:
        async with serve(tmp_path, ScriptedModel(), knowledge=kb) as (_, url):
            await page.goto(url + "/#/knowledge")
            await page.locator("table.kb-table tbody tr").nth(1).wait_for()
            assert "1 chunk still waits" in await page.locator(".kb-vectors").inner_text()
            await page.fill("#kb-q", "when do deploys run")
            await page.press("#kb-q", "Enter")
            hit = page.locator("li.hit").first
            await hit.wait_for()
            text = await hit.inner_text()
            assert "deploy.md" in text and "Deploys run every Friday at noon." in text and "BM25 rank 1" in text
            assert "#/knowledge/when%20do%20deploys%20run/hybrid/5" in page.url  # a reload shows it again
            await page.select_option("#kb-mode", "bm25")
            await page.fill("#kb-q", "walrus")
            await page.click("form.kb-search button[type=submit]")
            await page.locator("li.hit", has_text="later.md").wait_for()
            await page.fill("#kb-q", "zebra")
            await page.press("#kb-q", "Enter")
            await page.get_by_text("No passage matches “zebra”.").wait_for()
    finally:
        kb.close()


async def test_a_passage_found_through_its_context_shows_the_context(tmp_path: Path, page: Any) -> None:
    from kairos.knowledge.contextual import ContextWriter, add_paths

    kb = KnowledgeBase.open(tmp_path / "kb", HashEmbedder())
    (tmp_path / "ops.md").write_text("# Ops\n\nThe rota lists Sam for Saturday.\n")
    writer = ContextWriter(ScriptedModel([reply("From the ops handbook, weekend on-call duty.")]))
    await add_paths(kb, writer, [tmp_path / "ops.md"])
    try:
        async with serve(tmp_path, ScriptedModel(), knowledge=kb) as (_, url):
            await page.goto(url + "/#/knowledge/weekend%20on-call/bm25/5")
            hit = page.locator("li.hit").first
            await hit.wait_for()
            text = await hit.inner_text()
            assert "The rota lists Sam for Saturday." in text and "context rank 1" in text and "BM25 –" in text
            assert await hit.locator(".hit-context").inner_text() == (
                "Context: From the ops handbook, weekend on-call duty."
            )
            rows = page.locator("table.kb-table tbody tr")
            await rows.first.wait_for()
            assert await rows.count() == 1 and "ops.md" in await rows.first.inner_text()  # the twin is no document
    finally:
        kb.close()


async def test_the_documents_are_paged(tmp_path: Path, page: Any) -> None:
    kb = KnowledgeBase.open(tmp_path / "kb", HashEmbedder())
    notes = [tmp_path / f"note{i:02}.md" for i in range(51)]
    for i, note in enumerate(notes):
        note.write_text(f"# Note {i}\n\nThis is note number {i}.\n")
    kb.ingest(notes)
    try:
        async with serve(tmp_path, ScriptedModel(), knowledge=kb) as (_, url):
            await page.goto(url + "/#/knowledge")
            rows = page.locator("table.kb-table tbody tr")
            await rows.nth(49).wait_for()
            assert await rows.count() == 50 and await page.locator(".pager button", has_text="Previous").is_disabled()
            await page.locator(".pager button", has_text="Next").click()
            await page.locator(".pager", has_text="51–51").wait_for()
            assert await rows.count() == 1 and await _focused_id(page) == "kb-docs-title"
            assert await page.locator(".pager button", has_text="Next").is_disabled()
            await page.locator(".pager button", has_text="Previous").click()
            await rows.nth(49).wait_for()
    finally:
        kb.close()


async def test_a_changed_mcp_server_shows_its_diff_and_is_approved(tmp_path: Path, workspace: Path, page: Any) -> None:
    from kairos.mcp.client import McpServerSource
    from kairos.mcp.review import McpReview
    from kairos.security.review import ApprovalStore
    from tests.mcp.conftest import stdio_config

    review = McpReview(ApprovalStore(tmp_path / "approvals.json"))
    source = McpServerSource(stdio_config(timeout_s=20), workspace, review=review)
    try:
        await source.list_tools()
        echo = next(t for t in source.listing if t.name == "echo")
        before = [t for t in source.listing if t.name not in ("echo", "boom")]
        before += [dataclasses.replace(echo, description="Echo."), dataclasses.replace(echo, name="retired")]
        review.approve(source.name, source.config.target, before)  # what the user approved back then
        async with serve(tmp_path, ScriptedModel(), mcp=[source]) as (_, url):
            await page.goto(url + "/#/tools")
            server = page.locator("section.mcp-server[data-name='bad']")
            await server.wait_for()
            assert await server.locator(".approval").inner_text() == "changed since approval"
            review_box = await server.locator(".mcp-review").inner_text()
            assert "Added (1)" in review_box and "Removed (1)" in review_box and "Changed (1)" in review_box
            assert "-tool retired" in await server.locator("pre.diff").inner_text()
            assert await server.locator("tr[data-tool='boom']").get_by_text("withheld").count() == 1
            await server.locator("button.approve").click()
            await server.locator(".approval", has_text="approved").wait_for()
            assert await server.locator(".approval").inner_text() == "approved"
            assert not await server.locator(".mcp-review").count()
            await server.locator("summary", has_text="Tools").click()
            assert await server.get_by_text("withheld").count() == 0
            assert await server.locator("tr[data-tool='boom']").get_by_text("offered").count() == 1
            assert {t.name for t in await source.list_tools()} >= {"bad__boom", "bad__echo"}  # the agent's next turn
    finally:
        await source.aclose()


async def test_settings_show_sections_and_highlight_the_ignored_ones(tmp_path: Path, page: Any) -> None:
    settings = {
        "settings": {"model": "local", "max_tokens": 1024, "sandbox": {"mode": "bwrap", "network": "ask"},
                     "compression": {"enabled": True, "spill": {"max_chars": 6000}}, "mcp": {"servers": []}},
        "sources": ["defaults", "/home/u/.config/kairos/config.toml", "/ws/.kairos/config.toml"],
        "notices": ["/ws/.kairos/config.toml: sandbox.mode ignored (a workspace cannot turn the sandbox off)"],
    }  # fmt: skip
    async with serve(tmp_path, ScriptedModel(), settings=settings) as (_, url):
        await page.goto(url + "/#/settings")
        notices = page.locator("section.notices")
        await notices.wait_for()
        assert "sandbox.mode ignored" in await notices.inner_text()
        assert "1 setting ignored" in await notices.inner_text()
        assert "/ws/.kairos/config.toml" in await page.locator(".settings-sources").inner_text()
        spill = page.locator("tr", has=page.locator("code", has_text="spill.max_chars"))
        assert "6000" in await spill.inner_text()
        await page.fill("input[aria-label='Filter settings']", "network")
        assert await page.locator("details[data-name='compression']").is_hidden()
        assert await page.locator("tr", has_text="network").is_visible()


async def test_each_page_says_when_its_part_does_not_run_here(tmp_path: Path, page: Any) -> None:
    async with serve(tmp_path, ScriptedModel()) as (_, url):
        await page.goto(url + "/#/memory")
        await page.get_by_text("User memory does not run in this server.").wait_for()
        assert "[memory] enabled = false" in await page.locator(".unavailable").inner_text()
        await page.goto(url + "/#/knowledge")
        await page.get_by_text("The knowledge base does not run in this server.").wait_for()
        assert not await page.locator("#kb-q").count()
        await page.goto(url + "/#/tools")
        await page.get_by_text("No MCP servers in this server.").wait_for()
        await page.goto(url + "/#/settings")
        await page.get_by_text("This server was started without its settings.").wait_for()


class _DamagedMemory:
    """A memory whose store cannot be read (a 503 that is a failure, not a part switched off)."""

    def current(self) -> list[Any]:
        from kairos.memory.records import MemoryStoreError

        raise MemoryStoreError("the memory database is damaged")

    history = current


async def test_a_failing_store_is_an_error_with_a_retry_not_a_part_switched_off(tmp_path: Path, page: Any) -> None:
    async with serve(tmp_path, ScriptedModel(), memory=_DamagedMemory()) as (_, url):
        await page.goto(url + "/#/memory")
        failed = page.locator(".failed")
        await failed.wait_for()
        assert "User memory could not be loaded: the memory database is damaged" in await failed.inner_text()
        assert not await page.locator(".unavailable").count()
        await failed.locator("button", has_text="Try again").click()
        await page.locator(".failed").wait_for()


async def test_the_pages_fit_a_phone(tmp_path: Path, browser: Any, memory: UserMemory) -> None:
    """At 390×844 nothing is wider than the screen (long paths and tables wrap or scroll inside their box)."""
    kb = KnowledgeBase.open(tmp_path / "kb", HashEmbedder())
    deep = tmp_path / "a-rather-long-folder-name" / "with-another-long-folder-inside-it"
    deep.mkdir(parents=True)
    (deep / "deployment-procedures-for-the-production-cluster.md").write_text("# Deploy\n\nDeploys run on Friday.\n")
    kb.ingest([deep / "deployment-procedures-for-the-production-cluster.md"])
    context = await browser.new_context(viewport={"width": 390, "height": 844})
    pg = await context.new_page()
    settings = {"settings": {"tools": {"builtins": ["bash", "read_file"]}}, "sources": ["defaults"], "notices": []}
    try:
        async with serve(tmp_path, ScriptedModel(), memory=memory, knowledge=kb, settings=settings) as (_, url):
            for view, shown in (("memory", "article.memory"), ("settings", "table.settings-table"),
                                ("knowledge/deploys/hybrid/5", "li.hit"), ("tools", ".empty")):  # fmt: skip
                await pg.goto(f"{url}/#/{view}")
                await pg.locator(f"main[data-ready='{view.split('/')[0]}']").wait_for(state="attached")
                await pg.locator(shown).first.wait_for()
                width = await pg.evaluate("document.documentElement.scrollWidth")
                assert width <= 390, (view, width)
    finally:
        await context.close()
        kb.close()
