"""The chat view in a real browser: what a user sees while talking to a scripted agent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.plugins.defences import InjectionDefences
from kairos.runtime import Runtime
from kairos.runtime.integrations.outbox import Outbox, OutboxApprover, ask_user, notify_user
from kairos.security.defences import DefencesConfig
from kairos.server import create_app
from kairos.server.outbox import RuntimeOutbox
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.base import Tool
from kairos.tools.function import tool
from tests.server.conftest import live, until
from tests.ui.conftest import SHOTS, serve


@asynccontextmanager
async def serve_outbox(
    tmp_path: Path, model: ScriptedModel, tools: list[Tool] | None = None, *, approvals: bool = False
) -> AsyncIterator[tuple[Runtime, str]]:
    """Like ``serve``, with the outbox (ask_user, notify_user, questions) and, with ``approvals``, side-effecting
    calls approved through it (as ``kairos serve`` does with ``confirm_side_effects``)."""
    outbox = Outbox()
    plugins = []
    if approvals:
        plugins.append(InjectionDefences(DefencesConfig(confirm_side_effects=True), approver=OutboxApprover(outbox)))
    agent = Agent(model, tools=[*(tools or []), ask_user, notify_user], plugins=plugins)
    rt = Runtime(agent, SessionStore(tmp_path), components=[outbox])
    async with rt, live(create_app(rt, outbox=RuntimeOutbox(outbox))) as (_, url):
        await outbox.wait_ready()
        yield rt, url


async def open_chat(page: Any, url: str, sid: str) -> None:
    await page.goto(f"{url}/#/chat/{sid}")
    await page.wait_for_selector("main[data-ready]")


async def say(page: Any, text: str) -> None:
    await page.fill("#composer-text", text)
    await page.press("#composer-text", "Enter")


async def test_a_message_gets_a_streamed_answer(tmp_path: Path, page: Any) -> None:
    model = ScriptedModel([reply("Hello there, nice to meet you.")], chunk=3)
    async with serve(tmp_path, model) as (rt, url):
        sid = rt.create_session("greetings")
        await open_chat(page, url, sid)
        assert await page.text_content("#chat-title") == "greetings"
        await say(page, "hi")
        answer = page.locator(".msg.assistant .body")
        await answer.filter(has_text="Hello there, nice to meet you.").wait_for()
        assert await page.locator(".msg.user .body").all_text_contents() == ["hi"]
        assert await page.input_value("#composer-text") == ""
        await page.locator("#composer-status", has_text="Sent").wait_for()
        await page.locator(".msg.streaming").wait_for(state="detached")


def _gate() -> tuple[asyncio.Event, Tool]:
    """A tool that runs until the test releases it (so the page can be looked at while it runs)."""
    release = asyncio.Event()

    @tool
    async def lookup(city: str) -> str:
        """Look up the weather in a city.

        Args:
            city: the city.
        """
        await release.wait()
        return f"{city}: 21 °C, sunny; wind 3 m/s from the west"

    return release, lookup


async def test_a_tool_call_shows_as_a_card_with_its_arguments_then_its_result(tmp_path: Path, page: Any) -> None:
    release, lookup = _gate()
    model = ScriptedModel(
        [reply("Let me look that up.", call("lookup", {"city": "Oslo"})), reply("It is sunny in Oslo, 21 °C.")],
        chunk=4,
    )
    async with serve_outbox(tmp_path, model, [lookup]) as (rt, url):
        sid = rt.create_session("weather in Oslo")
        await open_chat(page, url, sid)
        await say(page, "What is the weather in Oslo?")
        card = page.locator(".tool[data-state=running]")
        await card.wait_for()
        assert await card.locator(".tool-name").text_content() == "lookup"
        assert '"city": "Oslo"' in await card.locator("pre.args").text_content()
        await page.locator("#chat-activity", has_text="running lookup").wait_for()
        assert await page.locator("#chat-stop").is_visible()
        release.set()
        done = page.locator(".tool[data-state=ok]")
        await done.wait_for()
        assert "Oslo: 21 °C, sunny" in await done.locator("pre.result").text_content()
        assert await done.locator(".tool-time").text_content()  # its duration
        await page.locator(".msg.assistant .body", has_text="It is sunny in Oslo").wait_for()
        await page.locator("#chat-stop").wait_for(state="hidden")
        await page.locator(".outbox-list li", has_text="It is sunny in Oslo").wait_for()
        SHOTS.mkdir(parents=True, exist_ok=True)
        await page.locator("#composer-text").blur()
        await page.screenshot(path=str(SHOTS / "chat.png"))


async def test_a_long_result_is_folded_and_its_spill_file_is_marked(tmp_path: Path, page: Any) -> None:
    @tool
    async def grep_logs(pattern: str) -> str:
        """Search the logs.

        Args:
            pattern: what to look for.
        """
        lines = "\n".join(f"app.log:{i}: {pattern} timed out" for i in range(40))
        return f"{lines}\n[40 of 900 matches; all of them are in .kairos/spill/grep-1f2e.txt]"

    model = ScriptedModel([reply("", call("grep_logs", {"pattern": "ERROR"})), reply("Forty timeouts.")])
    async with serve(tmp_path, model, [grep_logs]) as (rt, url):
        sid = rt.create_session("logs")
        await open_chat(page, url, sid)
        await say(page, "any errors?")
        fold = page.locator(".tool[data-state=ok] details.fold")
        await fold.wait_for()
        assert not await fold.locator("pre.result").is_visible()  # folded until opened
        await fold.locator("summary", has_text="41 lines").click()
        assert await fold.locator("code.spill").text_content() == ".kairos/spill/grep-1f2e.txt"
        assert await fold.locator("pre.result").is_visible()


async def test_a_call_that_needs_approval_runs_once_approved_in_the_chat(tmp_path: Path, page: Any) -> None:
    notes: list[str] = []

    @tool(side_effects=True)
    async def save_note(text: str) -> str:
        """Save a note.

        Args:
            text: the note.
        """
        notes.append(text)
        return "saved"

    model = ScriptedModel([reply("", call("save_note", {"text": "buy milk"})), reply("Noted: buy milk.")])
    async with serve_outbox(tmp_path, model, [save_note], approvals=True) as (rt, url):
        sid = rt.create_session("notes")
        await open_chat(page, url, sid)
        await say(page, "note that I need milk")
        question = page.locator(".question", has_text="Allow save_note(")
        await question.wait_for()
        assert await question.locator(".badge").text_content() == "approval needed"
        assert await page.locator(".tool .badge").text_content() == "waiting for approval"
        assert notes == []  # nothing runs before the answer
        await question.get_by_role("button", name="approve").click()
        await page.locator(".tool[data-state=ok] pre.result", has_text="saved").wait_for()
        await page.locator(".msg.assistant .body", has_text="Noted: buy milk.").wait_for()
        assert await question.locator(".q-status").text_content() == "Answered: approve"
        assert notes == ["buy milk"]


async def test_a_denied_call_does_not_run_and_its_card_says_why(tmp_path: Path, page: Any) -> None:
    @tool(side_effects=True)
    async def delete_backups() -> str:
        """Delete the backups."""
        raise AssertionError("a denied call must not run")

    model = ScriptedModel([reply("", call("delete_backups")), reply("I left the backups alone.")])
    async with serve_outbox(tmp_path, model, [delete_backups], approvals=True) as (rt, url):
        sid = rt.create_session("cleanup")
        await open_chat(page, url, sid)
        await say(page, "clean up")
        await page.locator(".question", has_text="Allow delete_backups(").get_by_role("button", name="deny").click()
        card = page.locator(".tool[data-state=error]")
        await card.locator("pre.result", has_text="the user said no").wait_for()
        await page.locator(".msg.assistant .body", has_text="I left the backups alone.").wait_for()


async def test_questions_of_ask_user_are_answered_inline(tmp_path: Path, page: Any) -> None:
    model = ScriptedModel([
        reply("", call("ask_user", {"question": "Which branch?", "timeout_s": 0})),
        reply("", call("ask_user", {"question": "Merge now?", "options": ["yes", "no"], "timeout_s": 0})),
        reply("Merging main now."),
    ])  # fmt: skip
    async with serve_outbox(tmp_path, model) as (rt, url):
        sid = rt.create_session("merge")
        await open_chat(page, url, sid)
        await say(page, "merge it")
        free = page.locator(".question", has_text="Which branch?")
        await free.get_by_label("Your answer").fill("main")
        await free.get_by_role("button", name="Answer").click()
        await page.locator(".tool pre.result", has_text="The user answered: main").wait_for()
        options = page.locator(".question", has_text="Merge now?")
        await options.get_by_role("button", name="yes").click()
        await page.locator(".tool pre.result", has_text="The user answered: yes").wait_for()
        await page.locator(".msg.assistant .body", has_text="Merging main now.").wait_for()
        assert await free.locator(".q-status").text_content() == "Answered: main"


async def test_a_question_asked_before_the_page_opened_is_shown_once_and_answered(tmp_path: Path, page: Any) -> None:
    model = ScriptedModel([
        reply("", call("ask_user", {"question": "Deploy now?", "options": ["yes", "no"], "timeout_s": 0})),
        reply("Deploying."),
    ])  # fmt: skip
    async with serve_outbox(tmp_path, model) as (rt, url):
        sid = rt.create_session("deploy")
        await rt.submit(_user("ship it", sid))
        await until_record(rt, sid, "outbox.message")
        await open_chat(page, url, sid)
        question = page.locator(".question", has_text="Deploy now?")
        assert await question.count() == 1  # from the records and from /v1/questions: one card
        await question.get_by_role("button", name="yes").click()
        await page.locator(".msg.assistant .body", has_text="Deploying.").wait_for()
        assert await question.locator(".q-status").text_content() == "Answered: yes"


async def test_stop_interrupts_a_running_tool(tmp_path: Path, page: Any) -> None:
    _, lookup = _gate()  # never released: only Stop ends it
    model = ScriptedModel([reply("Looking.", call("lookup", {"city": "Bergen"}))])
    async with serve(tmp_path, model, [lookup]) as (rt, url):
        sid = rt.create_session("slow")
        await open_chat(page, url, sid)
        await say(page, "weather in Bergen?")
        await page.locator(".tool[data-state=running]").wait_for()
        await page.click("#chat-stop")
        card = page.locator(".tool[data-state=interrupted]")
        await card.wait_for()
        assert await card.locator(".badge").text_content() == "interrupted"
        await page.locator(".msg.stopped .badge", has_text="interrupted").wait_for()
        await page.locator("#chat-stop").wait_for(state="hidden")
        assert not rt.busy(sid)


async def test_a_message_typed_while_the_agent_works_joins_at_the_next_safe_point(tmp_path: Path, page: Any) -> None:
    release, lookup = _gate()

    def answer(request: Any) -> Any:
        seen = any("Bergen" in m.content for m in request.messages if m.role == "user")
        return reply("Oslo and Bergen are both sunny." if seen else "Only Oslo.")

    model = ScriptedModel([reply("", call("lookup", {"city": "Oslo"})), answer])
    async with serve(tmp_path, model, [lookup]) as (rt, url):
        sid = rt.create_session("two cities")
        await open_chat(page, url, sid)
        await say(page, "weather in Oslo?")
        await page.locator(".tool[data-state=running]").wait_for()
        await say(page, "and Bergen too")
        await page.locator("#composer-status", has_text="joins at the next safe point (queue)").wait_for()
        joined = page.locator(".msg.user", has_text="and Bergen too")
        await joined.locator(".badge", has_text="joins at the next safe point").wait_for()
        assert await page.input_value("#composer-text") == ""
        assert await page.locator("#composer-text").is_enabled()
        release.set()
        await page.locator(".msg.assistant .body", has_text="Oslo and Bergen are both sunny.").wait_for()


async def test_history_reloads_from_the_stored_messages_without_doubles(tmp_path: Path, page: Any) -> None:
    release, lookup = _gate()
    release.set()
    model = ScriptedModel([
        reply("Looking.", call("lookup", {"city": "Oslo"})), reply("Sunny in Oslo."), reply("You are welcome."),
    ])  # fmt: skip
    async with serve(tmp_path, model, [lookup]) as (rt, url):
        sid = rt.create_session("reload")
        await open_chat(page, url, sid)
        await say(page, "weather?")
        await page.locator(".msg.assistant .body", has_text="Sunny in Oslo.").wait_for()
        await page.reload()
        await page.wait_for_selector("main[data-ready]")
        assert await page.locator(".msg.user .body").all_text_contents() == ["weather?"]
        assert await page.locator(".msg.assistant .body").all_text_contents() == ["Looking.", "Sunny in Oslo."]
        assert await page.locator(".tool[data-state=ok] pre.result").count() == 1
        await say(page, "thanks")
        await page.locator(".msg.assistant .body", has_text="You are welcome.").wait_for()
        assert await page.locator(".msg.user .body").all_text_contents() == ["weather?", "thanks"]
        assert await page.locator(".msg.assistant .body").count() == 3


async def test_a_long_session_shows_its_last_turns_and_earlier_ones_on_demand(tmp_path: Path, page: Any) -> None:
    model = ScriptedModel([reply(f"answer {i}") for i in range(80)])
    async with serve(tmp_path, model) as (rt, url):
        sid = rt.create_session("long")
        for i in range(80):
            await rt.submit(_user(f"question {i}", sid))
            await rt.wait_idle(sid)
        await open_chat(page, url, sid)
        users = page.locator(".msg.user .body")
        assert await users.last.text_content() == "question 79"
        assert await users.first.text_content() != "question 0"
        await page.get_by_role("button", name="Show earlier messages").click()
        await page.locator(".msg.user .body", has_text="question 0").first.wait_for()
        assert await users.count() == 80
        await page.get_by_role("button", name="Show earlier messages").wait_for(state="hidden")


def _user(text: str, sid: str) -> Any:
    from kairos.runtime import Event

    return Event("user.input", text, {"type": "user"}, "test", session=sid)


async def test_the_sessions_sidebar_searches_and_starts_a_session(tmp_path: Path, page: Any) -> None:
    async with serve(tmp_path, ScriptedModel()) as (rt, url):
        first = rt.create_session("groceries")
        second = rt.create_session("taxes 2025")
        await page.goto(url + "/#/chat")
        await page.wait_for_url("**/#/chat/*")
        links = page.locator(".sessions a.session-link")
        await links.first.wait_for()
        assert await links.count() == 2
        await page.fill("#session-search", "groc")
        assert await links.all_text_contents() == [f"groceries{first}"]
        await page.fill("#session-search", first[:6])
        assert await links.count() == 1
        await page.press("#session-search", "Enter")
        await page.wait_for_url(f"**/#/chat/{first}")
        await page.click("#new-session")
        await page.locator("#chat-title", has_text="Untitled").wait_for()
        (fresh,) = [s.id for s in rt.sessions(10) if s.id not in (first, second)]
        await page.wait_for_url(f"**/#/chat/{fresh}")
        await page.locator(f".sessions li[data-session='{fresh}'] a[aria-current=page]").wait_for()


async def test_a_session_is_renamed_inline_with_the_keyboard(tmp_path: Path, page: Any) -> None:
    async with serve(tmp_path, ScriptedModel()) as (rt, url):
        sid = rt.create_session("draft")
        await open_chat(page, url, sid)
        item = page.locator(f".sessions li[data-session='{sid}']")
        await item.get_by_role("button", name="Rename draft").focus()
        await page.keyboard.press("Enter")
        field = page.get_by_label(f"New title for {sid}")
        assert await field.evaluate("el => el === document.activeElement")
        await field.fill("never mind")
        await page.keyboard.press("Escape")  # cancelled: nothing changes
        await item.get_by_role("button", name="Rename draft").wait_for()
        assert rt.session_info(sid).title == "draft"
        await item.get_by_role("button", name="Rename draft").click()
        await field.fill("Trip to Oslo")
        await page.keyboard.press("Enter")
        await item.locator(".title", has_text="Trip to Oslo").wait_for()
        assert await page.text_content("#chat-title") == "Trip to Oslo"
        assert rt.session_info(sid).title == "Trip to Oslo"


async def test_the_outbox_shows_unread_messages_and_marks_them_read(tmp_path: Path, page: Any) -> None:
    model = ScriptedModel([reply("", call("notify_user", {"message": "the backup finished"})), reply("Done.")])
    async with serve_outbox(tmp_path, model) as (rt, url):
        sid = rt.create_session("backup")
        await open_chat(page, url, sid)
        await say(page, "run the backup")
        note = page.locator(".outbox-list li.unread", has_text="the backup finished")
        await note.wait_for()
        await page.locator(".outbox-list li", has_text="Done.").wait_for()  # the run's answer is kept too
        assert await page.text_content(".outbox .badge") == "2 unread"
        await note.get_by_role("button", name="Mark read").click()
        await page.locator(".outbox-list li.read", has_text="the backup finished").wait_for()
        assert await page.text_content(".outbox .badge") == "1 unread"
        await page.get_by_role("button", name="Mark all read").click()
        await page.locator(".outbox .badge", has_text="0 unread").wait_for()


async def test_an_unknown_session_says_so_in_the_page(tmp_path: Path, page: Any) -> None:
    async with serve(tmp_path, ScriptedModel()) as (_, url):
        await page.goto(url + "/#/chat/nope")
        await page.get_by_text("There is no session nope.").wait_for()


async def test_the_chat_fits_a_phone(tmp_path: Path, page: Any) -> None:
    await page.set_viewport_size({"width": 390, "height": 844})
    release, lookup = _gate()
    release.set()
    long_word = "x" * 300
    model = ScriptedModel([reply(f"Looking {long_word}.", call("lookup", {"city": long_word})), reply("Sunny.")])
    async with serve(tmp_path, model, [lookup]) as (rt, url):
        sid = rt.create_session("phone " + long_word)
        await open_chat(page, url, sid)
        await say(page, "weather?")
        await page.locator(".msg.assistant .body", has_text="Sunny.").wait_for()
        wide = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 0, f"the page is {wide}px wider than a phone"
        assert await page.locator("#composer-text").is_visible()
        assert await page.locator(".timeline").is_visible()


async def test_a_session_opened_mid_run_shows_the_running_call_and_what_waits_then_goes_on_live(
    tmp_path: Path, page: Any
) -> None:
    release, lookup = _gate()
    model = ScriptedModel([reply("Checking the weather.", call("lookup", {"city": "Oslo"})), reply("Sunny in both.")])
    async with serve(tmp_path, model, [lookup]) as (rt, url):
        sid = rt.create_session("mid-run")
        await rt.submit(_user("weather in Oslo?", sid))
        await until_record(rt, sid, "agent.tool_started")
        await rt.submit(_user("and in Bergen?", sid))  # waits for the next safe point
        await open_chat(page, url, sid)
        assert await page.locator(".tool[data-state=running]").count() == 1
        assert await page.locator("#chat-stop").is_visible()
        await page.locator("#chat-activity", has_text="running lookup").wait_for()
        waiting = page.locator(".msg.user", has_text="and in Bergen?")
        assert await waiting.locator(".badge").text_content() == "queued: joins at the next safe point"
        release.set()
        await page.locator(".msg.assistant .body", has_text="Sunny in both.").wait_for()
        await page.locator("#chat-stop").wait_for(state="hidden")
        assert await page.locator(".msg.user .body").all_text_contents() == ["weather in Oslo?", "and in Bergen?"]
        assert await page.locator(".msg.assistant .body").all_text_contents() == [
            "Checking the weather.", "Sunny in both.",
        ]  # fmt: skip
        assert await page.locator(".tool[data-state=ok]").count() == 1


async def test_an_answer_streaming_when_the_page_opens_is_shown_once_and_whole(tmp_path: Path, page: Any) -> None:
    text = "The forecast for the whole week is sunny and warm."
    model = ScriptedModel([reply(text)], chunk=2, delay_s=0.05)
    async with serve(tmp_path, model) as (rt, url):
        sid = rt.create_session("streaming")
        await rt.submit(_user("forecast?", sid))
        await until_record(rt, sid, "agent.text")
        await open_chat(page, url, sid)
        await page.locator(".msg.assistant:not(.streaming) .body", has_text=text).wait_for()
        assert await page.locator(".msg.assistant .body").all_text_contents() == [text]


async def until_record(rt: Runtime, sid: str, type: str) -> None:
    """Until the session's stream has a record of ``type``."""
    await until(lambda: any(r.type == type for r in rt.timeline(sid, 0, 5000)))
