"""The perception toolset: read_document (PDF, DOCX, PPTX, HTML, Markdown, text), fetch_url, web_search."""

from __future__ import annotations

import json
import os
from pathlib import Path

import docx
import pptx
import pytest

from kairos.tools.base import Tool, ToolContext
from kairos.tools.toolsets import perception_tools
from kairos.tools.toolsets.config import FetchConfig, ToolsConfig, WebSearchConfig

from .conftest import HttpFixture, Route, make_pdf, run


def tools(**cfg: object) -> dict[str, Tool]:
    return {t.name: t for t in perception_tools(ToolsConfig.model_validate(cfg))}


LONG = (
    "\n\n".join(f"Paragraph {i}. " + ("The weather was mild and the garden quiet. " * 6) for i in range(60))
    + "\n\nThe secret launch code of the rocket is AURORA-7, kept in the vault.\n\n"
    + "\n\n".join(f"Tail {i}. " + ("Nothing else happened that day in the village. " * 6) for i in range(60))
)


# --- read_document ----------------------------------------------------------------------------


async def test_pdf_pages_are_read_with_page_markers(ctx: ToolContext) -> None:
    (ctx.workspace / "r.pdf").write_bytes(make_pdf(["Quarterly report\nRevenue grew 12 percent", "Second page text"]))
    res = await run(tools()["read_document"], ctx, path="r.pdf")
    assert not res.is_error, res.content
    assert "PDF, 2 pages" in res.content and "end of text" in res.content
    assert "--- page 1 ---" in res.content and "Revenue grew 12 percent" in res.content
    assert "--- page 2 ---\nSecond page text" in res.content


async def test_pdf_without_text_says_so(ctx: ToolContext) -> None:
    (ctx.workspace / "scan.pdf").write_bytes(make_pdf(["Words", ""]))
    res = await run(tools()["read_document"], ctx, path="scan.pdf")
    assert "no text on page(s) 2" in res.content and "no OCR" in res.content


async def test_docx_headings_lists_and_tables(ctx: ToolContext) -> None:
    d = docx.Document()
    d.add_heading("Project plan", level=1)
    d.add_paragraph("First milestone is in May.")
    d.add_paragraph("buy parts", style="List Bullet")
    table = d.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "owner", "task"
    table.cell(1, 0).text, table.cell(1, 1).text = "Ana", "design"
    d.save(str(ctx.workspace / "plan.docx"))
    res = await run(tools()["read_document"], ctx, path="plan.docx")
    assert not res.is_error, res.content
    assert "## Project plan" in res.content
    assert "First milestone is in May." in res.content
    assert "- buy parts" in res.content
    assert "| Ana | design |" in res.content


async def test_pptx_slides_and_notes(ctx: ToolContext) -> None:
    pres = pptx.Presentation()
    for title, body in [("Intro", "Welcome"), ("Results", "Sales up 30%")]:
        slide = pres.slides.add_slide(pres.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    pres.slides[1].notes_slide.notes_text_frame.text = "mention the new region"
    pres.save(str(ctx.workspace / "deck.pptx"))
    res = await run(tools()["read_document"], ctx, path="deck.pptx")
    assert "PPTX, 2 slides" in res.content
    assert "## Slide 2\nResults\nSales up 30%" in res.content
    assert "Speaker notes: mention the new region" in res.content


async def test_html_main_content_and_markdown(ctx: ToolContext) -> None:
    article = "<p>" + "Kairos reads documents carefully and reports what it dropped. " * 8 + "</p>"
    html = (
        "<html><head><title>News</title></head><body><nav>Home | About</nav>"
        f"<article><h1>Big news</h1>{article}</article></body></html>"
    )
    (ctx.workspace / "page.html").write_text(html)
    (ctx.workspace / "notes.md").write_text("# Notes\n\n- one\n- two\n")
    t = tools()["read_document"]
    res = await run(t, ctx, path="page.html")
    assert "Kairos reads documents carefully" in res.content and "HTML" in res.content
    assert "main content only" in res.content
    md = await run(t, ctx, path="notes.md")
    assert "(MARKDOWN)" in md.content and "# Notes\n\n- one" in md.content


async def test_pagination_is_explicit_and_reads_on(ctx: ToolContext) -> None:
    (ctx.workspace / "long.txt").write_text(LONG)
    t = tools(page_chars=2000)["read_document"]
    first = await run(t, ctx, path="long.txt")
    assert f"of {len(LONG)} (page 1 of" in first.content and "TRUNCATED" in first.content
    nxt = first.metadata["end"]
    assert f"offset={nxt}" in first.content
    seen = first.content.split("\n\n", 1)[1]
    second = await run(t, ctx, path="long.txt", offset=nxt)
    assert f"characters {nxt}–" in second.content and "(page 2 of" in second.content
    # every character is on exactly one page
    text, offset = "", 0
    while True:
        r = await run(t, ctx, path="long.txt", offset=offset)
        body = r.content.split("\n\n", 1)[1]
        text += body
        if r.metadata["end"] >= len(LONG):
            break
        offset = r.metadata["end"]
    assert text == LONG and seen
    past = await run(t, ctx, path="long.txt", offset=len(LONG) + 5)
    assert past.is_error and f"has {len(LONG)} characters" in past.content
    negative = await run(t, ctx, path="long.txt", offset=-1)
    assert negative.is_error and "offset=-1 is outside the text" in negative.content
    os.mkfifo(ctx.workspace / "pipe.txt")
    fifo = await run(t, ctx, path="pipe.txt")  # refused at once, never blocks
    assert fifo.is_error and "named pipe" in fifo.content


async def test_focus_compresses_with_pointer_to_full_text(ctx: ToolContext) -> None:
    (ctx.workspace / "long.md").write_text(LONG)
    t = tools(page_chars=2000, compress_over_chars=5000)["read_document"]
    res = await run(t, ctx, path="long.md", focus="rocket launch code")
    assert res.metadata["compressed"] and "COMPRESSED" in res.content
    assert "AURORA-7" in res.content and "characters omitted" in res.content
    assert len(res.content) < 4000
    saved = res.metadata["spill"]
    assert saved.startswith(".kairos/spill/") and (ctx.workspace / saved).read_text() == LONG
    # the [offset=K] marks point into the full text, readable through the spill file
    k = int(res.content.split("[offset=")[2].split("]")[0])
    back = await run(t, ctx, path=saved, offset=k, focus="ignored for spill files")
    assert back.content.split("\n\n", 1)[1].startswith(LONG[k : k + 20])
    # no match: the first page, and it says so
    miss = await run(t, ctx, path="long.md", focus="zebra")
    assert "no paragraph matches" in miss.content and "TRUNCATED" in miss.content


async def test_bad_documents_give_clear_errors(ctx: ToolContext) -> None:
    ws = ctx.workspace
    (ws / "bad.pdf").write_bytes(b"%PDF-1.4 garbage")
    (ws / "bad.docx").write_bytes(b"not a zip")
    (ws / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0")
    (ws / "img.bin").write_bytes(bytes(range(256)) * 10)
    t = tools()["read_document"]
    for path, words in [
        ("bad.pdf", "cannot read it as PDF"),
        ("bad.docx", "cannot read it as DOCX"),
        ("old.doc", "convert it to DOCX"),
        ("img.bin", "binary file"),
        ("missing.pdf", "not found"),
        ("../outside.pdf", "outside the workspace"),
    ]:
        res = await run(t, ctx, path=path)
        assert res.is_error, path
        assert words.lower() in res.content.lower(), (path, res.content)


async def test_invalid_utf8_is_reported(ctx: ToolContext) -> None:
    (ctx.workspace / "latin.txt").write_bytes("café".encode("latin-1"))
    res = await run(tools()["read_document"], ctx, path="latin.txt")
    assert "1 byte sequence(s) were not UTF-8" in res.content


# --- fetch_url --------------------------------------------------------------------------------


def _article(n: int) -> bytes:
    paras = "".join(
        f"<p>Section {i}: the harbour bridge opened to traffic in spring. More words here.</p>" for i in range(n)
    )
    head = "<html><head><title>Bridge</title></head><body><nav>menu menu</nav>"
    return f"{head}<article>{paras}</article></body></html>".encode()


async def test_fetch_html_readable_and_paginated(ctx: ToolContext, http_fixture: HttpFixture) -> None:
    http_fixture.routes["/a"] = Route(body=_article(200))
    t = tools(page_chars=2000)["fetch_url"]
    assert t.external and t.read_only
    first = await run(t, ctx, url=http_fixture.url("/a"))
    assert not first.is_error, first.content
    assert "Section 0: the harbour bridge" in first.content and "TRUNCATED" in first.content
    end = first.metadata["end"]
    second = await run(t, ctx, url=http_fixture.url("/a"), offset=end)
    assert f"characters {end}–" in second.content
    assert len(http_fixture.requests) == 1  # reading on uses the text already fetched


async def test_fetch_types_and_errors(ctx: ToolContext, http_fixture: HttpFixture) -> None:
    r = http_fixture.routes
    r["/plain"] = Route(content_type="text/plain", body=b"just text")
    r["/doc.pdf"] = Route(content_type="application/pdf", body=make_pdf(["pdf over http"]))
    r["/img"] = Route(content_type="image/png", body=b"\x89PNG" + bytes(100))
    r["/gone"] = Route(status=410, content_type="text/plain", body=b"gone")
    r["/loop"] = Route(status=302, headers={"Location": "/loop"})
    r["/moved"] = Route(status=301, headers={"Location": "/plain"})
    t = tools()["fetch_url"]
    assert "just text" in (await run(t, ctx, url=http_fixture.url("/plain"))).content
    assert "pdf over http" in (await run(t, ctx, url=http_fixture.url("/doc.pdf"))).content
    moved = await run(t, ctx, url=http_fixture.url("/moved"))
    assert "redirected to" in moved.content and "just text" in moved.content
    for path, words in [("/img", "is not text (image/png"), ("/gone", "HTTP 410"), ("/loop", "redirects more than")]:
        res = await run(t, ctx, url=http_fixture.url(path))
        assert res.is_error and words in res.content, (path, res.content)
    for url in ["file:///etc/passwd", "ftp://x/y", "not a url"]:
        res = await run(t, ctx, url=url)
        assert res.is_error and "http://" in res.content, url
    closed = await run(t, ctx, url="http://127.0.0.1:9/")
    assert closed.is_error and "Cannot fetch" in closed.content


async def test_fetch_size_limit_is_explicit(ctx: ToolContext, http_fixture: HttpFixture) -> None:
    http_fixture.routes["/big"] = Route(content_type="text/plain", body=b"word " * 10_000)
    t = tools(fetch={"max_bytes": 10_000})["fetch_url"]
    res = await run(t, ctx, url=http_fixture.url("/big"))
    assert "TRUNCATED download: only the first" in res.content
    assert res.metadata["total_chars"] == 10_000


# --- web_search -------------------------------------------------------------------------------


async def test_web_search_through_configured_endpoint(
    ctx: ToolContext, http_fixture: HttpFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_SEARCH_KEY", "sk-very-secret")
    results = [
        {"title": f"Result {i}", "link": f"https://e.com/{i}", "content": "about sk-very-secret " * 40}
        for i in range(7)
    ]
    http_fixture.routes["/search"] = Route(
        content_type="application/json", body=json.dumps({"results": results}).encode()
    )
    ts = tools(web_search={"url": http_fixture.url("/search"), "api_key_env": "TEST_SEARCH_KEY"})
    t = ts["web_search"]
    assert t.external
    res = await run(t, ctx, query="harbour bridge", count=3)
    data = json.loads(res.content)
    assert [r["url"] for r in data["results"]] == ["https://e.com/0", "https://e.com/1", "https://e.com/2"]
    assert "showing 3 of 7" in data["note"]
    assert "sk-very-secret" not in res.content and "[redacted]" in res.content
    assert "snippet cut at 500 characters" in data["results"][0]["snippet"]
    req = http_fixture.requests[-1]
    assert req["headers"]["Authorization"] == "Bearer sk-very-secret"
    assert "q=harbour+bridge" in req["path"] and "n=3" in req["path"]


async def test_web_search_errors_and_absence(ctx: ToolContext, http_fixture: HttpFixture) -> None:
    assert "web_search" not in tools()  # not configured: not offered (no schema tokens for nothing)
    http_fixture.routes["/bad"] = Route(content_type="application/json", body=b"{not json")
    http_fixture.routes["/err"] = Route(status=503, content_type="text/plain", body=b"down")
    for path, words in [("/bad", "cannot read"), ("/err", "HTTP 503")]:
        t = tools(web_search={"url": http_fixture.url(path)})["web_search"]
        res = await run(t, ctx, query="x")
        assert res.is_error and words in res.content


def test_config_rejects_bad_urls_and_env_names() -> None:
    with pytest.raises(ValueError):
        WebSearchConfig(url="file:///etc/passwd")
    with pytest.raises(ValueError):
        WebSearchConfig(url="https://x", api_key_env="NOT A NAME")
    assert FetchConfig().max_bytes > 0 and os.environ is not None


def test_descriptions_say_when_and_what_not(ctx: ToolContext) -> None:
    for t in perception_tools(ToolsConfig(web_search=WebSearchConfig(url="https://s.example"))):
        d = t.spec.description
        assert "Cannot" in d and "Example" in d, t.name


async def test_latest_user_request_is_the_default_focus(ctx: ToolContext) -> None:
    from kairos.tools.toolsets.perception import FOCUS_RESOURCE

    (ctx.workspace / "long.md").write_text(LONG)
    t = tools(page_chars=2000, compress_over_chars=5000)["read_document"]
    ctx.put(FOCUS_RESOURCE, "What is the rocket's launch code?")
    res = await run(t, ctx, path="long.md")
    assert res.metadata["compressed"] and "AURORA-7" in res.content
    assert "rocket's launch code" in res.content  # the focus used is named
    page2 = await run(t, ctx, path="long.md", offset=2000)
    assert "compressed" not in page2.metadata  # reading on by offset is never compressed


async def test_a_hanging_server_ends_in_a_clear_timeout(ctx: ToolContext, http_fixture: HttpFixture) -> None:
    import threading

    release = threading.Event()

    def hang() -> Route:
        release.wait(60)
        return Route(content_type="text/plain", body=b"late")

    http_fixture.routes["/hang"] = hang
    t = tools(fetch={"timeout_s": 0.5})["fetch_url"]
    try:
        res = await run(t, ctx, url=http_fixture.url("/hang"))
    finally:
        release.set()
    assert res.is_error and "did not answer within 0.5 s" in res.content


async def test_an_agent_turn_sets_the_focus_so_a_long_document_is_cut_around_the_request(tmp_path: Path) -> None:
    from kairos.agent import Agent
    from kairos.context.session import SessionStore
    from kairos.testing import ScriptedModel, call, reply

    (tmp_path / "long.md").write_text(LONG)
    model = ScriptedModel([reply("", call("read_document", {"path": "long.md"})), reply("It is AURORA-7.")])
    agent = Agent(model, tools=[tools(page_chars=2000, compress_over_chars=5000)["read_document"]])
    store = SessionStore(tmp_path)
    try:
        session = store.new()
        async for _ in agent.run(session, "What is the rocket's launch code?"):
            pass
        result = next(m for m in session.messages if m.role == "tool")
        await session.aclose()
    finally:
        store.close()
    assert "AURORA-7" in result.content and "rocket's launch code" in result.content  # cut around the question
    assert "Paragraph 30." not in result.content  # not the first pages
