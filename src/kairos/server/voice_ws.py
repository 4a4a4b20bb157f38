"""Talk to a session: the web UI's microphone over a WebSocket (issue 27 §4).

``/v1/sessions/{id}/voice`` runs a :class:`~kairos.voice.session.VoiceSession` on the session for as
long as the socket is open. The voice session needs the session's agent events in this process
(:attr:`Runtime.agent_listeners`), so a front end that hands turns to workers refuses the socket.

Client → server:

- binary frames: 16 kHz mono int16 little-endian PCM, any length (cut here into 30 ms frames);
- text frames, JSON objects: ``{"type": "hello", "sample_rate": 16000}`` (optional; another rate is
  refused), ``{"type": "ping"}`` (answered ``{"type": "pong"}``).

Server → client:

- ``{"type": "ready", "sample_rate": 16000}`` once the engines are loaded (audio sent before is kept);
- ``{"type": "voice", "kind", "text", "data"}`` for each :class:`~kairos.voice.session.VoiceEvent`
  (``kind``: speech_start, interim, final, reply_text, paused, resumed, cut, backchannel, turn, error;
  a ``turn``'s ``data`` is its latency waterfall in ms);
- binary frames: reply audio to play back to back, 16 kHz mono int16 little-endian;
- ``{"type": "stop"}``: silence now and drop the audio queued (a barge-in);
- ``{"type": "error", "error": {"type", "message"}}``: bad input (the socket stays open), or why it
  closes (unknown session: 4404; voice unavailable here: 4503).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

import numpy as np
from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from kairos.errors import ConfigError
from kairos.server.middleware import error_body
from kairos.server.state import state_of

if TYPE_CHECKING:
    from kairos.voice.audio import Pcm
    from kairos.voice.session import VoiceEvent
    from kairos.voice.stack import VoiceStack

router = APIRouter()
SAMPLE_RATE = 16_000
"""The one rate of the socket's audio, both ways (:data:`kairos.voice.audio.SAMPLE_RATE`)."""
FRAME_BYTES = 960
"""One 30 ms frame of 16 kHz int16 (:data:`kairos.voice.audio.FRAME_SAMPLES` × 2)."""
MAX_BACKLOG_FRAMES = 1000
"""30 s of audio not yet heard: beyond it the server falls behind and drops new audio (saying so)."""
PROTOCOL = "kairos.voice"
"""The subprotocol the page offers (answered when offered; a browser sends its token beside it,
:data:`kairos.server.auth.BEARER_PROTOCOL`)."""
CLOSE_NOT_FOUND = 4404
CLOSE_UNAVAILABLE = 4503

Outgoing = str | bytes


def _frame(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _error(status: int, message: str, type: str | None = None) -> str:
    return _frame({"type": "error", **error_body(status, message, type)})


def voice_event_frame(event: VoiceEvent) -> str:
    """A voice event as the socket sends it."""
    return _frame({"type": "voice", "kind": event.kind, "text": event.text, "data": event.data})


class SocketSink:
    """Where the reply audio goes: binary frames (16 kHz int16) and ``stop`` frames, in order, to the sender."""

    def __init__(self, out: asyncio.Queue[Outgoing]) -> None:
        self.out = out

    def play(self, pcm: Pcm, sample_rate: int) -> None:
        """Queue ``pcm`` for the page (resampled to 16 kHz when the synthesiser speaks another rate)."""
        if sample_rate != SAMPLE_RATE:
            from kairos.voice.audio import resample

            pcm = resample(pcm, sample_rate, SAMPLE_RATE)
        if len(pcm):
            self.out.put_nowait(np.asarray(pcm, dtype="<i2").tobytes())

    def stop(self) -> None:
        """The page silences what plays and drops what is queued."""
        self.out.put_nowait(_frame({"type": "stop"}))


def _load_stack() -> VoiceStack:
    from kairos.voice.stack import voice_stack

    return voice_stack()


def _refusal(websocket: WebSocket, session_id: str) -> tuple[int, str, int] | None:
    """(status, message, close code) when this server cannot run a voice session on ``session_id``."""
    state = state_of(websocket)
    if not state.runtime.has_session(session_id):
        return 404, f"no session {session_id!r}", CLOSE_NOT_FOUND
    if state.runtime.dispatch is not None or state.workers is not None:
        message = (
            "voice needs the session's turns to run in this process, and this server hands them to workers "
            "(scale-out): serve without workers to talk to it"
        )
        return 503, message, CLOSE_UNAVAILABLE
    return None


@router.websocket("/v1/sessions/{session_id}/voice")
async def voice_socket(websocket: WebSocket, session_id: str) -> None:
    """Speech in (binary PCM), the session's reply out as speech, with transcripts and timings as JSON frames."""
    state = state_of(websocket)
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=PROTOCOL if PROTOCOL in offered else None)
    if refused := _refusal(websocket, session_id):
        status, message, code = refused
        with contextlib.suppress(Exception):
            await websocket.send_text(_error(status, message))
            await websocket.close(code=code)
        return
    out: asyncio.Queue[Outgoing] = asyncio.Queue()
    heard: asyncio.Queue[Pcm] = asyncio.Queue()
    sender = asyncio.create_task(_send_all(websocket, out))
    reader = asyncio.create_task(_read_all(websocket, state.max_body, heard, out))
    code = 1000
    try:
        try:
            stack = await asyncio.to_thread(_load_stack)
        except ConfigError as e:
            out.put_nowait(_error(503, f"voice is not available on this server: {e}"))
            code = CLOSE_UNAVAILABLE
            return
        await _converse(websocket, session_id, stack, heard, out, reader)
        if state.stopping.is_set():
            out.put_nowait(_error(503, "the server is stopping; reconnect later"))
            code = 1012
    finally:
        reader.cancel()
        with contextlib.suppress(BaseException):
            await reader
        out.put_nowait(b"")  # the sender's end: what is queued goes first
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(sender, 5)
        sender.cancel()
        with contextlib.suppress(Exception):
            await websocket.close(code=code)


async def _converse(
    websocket: WebSocket,
    session_id: str,
    stack: VoiceStack,
    heard: asyncio.Queue[Pcm],
    out: asyncio.Queue[Outgoing],
    reader: asyncio.Task[None],
) -> None:
    """Feed the frames heard to a voice session until the client leaves or the server stops."""
    from kairos.voice.playback import Playback
    from kairos.voice.session import VoiceSession

    state = state_of(websocket)
    session = VoiceSession(
        state.runtime,
        session_id,
        stack.listener(),
        stack.synthesizer,
        Playback(SocketSink(out)),
        on_event=lambda event: out.put_nowait(voice_event_frame(event)),
    )
    out.put_nowait(_frame({"type": "ready", "sample_rate": SAMPLE_RATE}))

    async def feed() -> None:
        while True:
            frame = await heard.get()
            try:
                await session.feed(frame)
            except Exception as e:  # one bad pass is said, the conversation goes on
                out.put_nowait(_error(500, f"voice processing failed: {e}", "voice_failed"))

    async with session:
        feeder = asyncio.create_task(feed())
        stopping = asyncio.create_task(state.stopping.wait())
        try:
            await asyncio.wait({reader, feeder, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (feeder, stopping):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task


async def _send_all(websocket: WebSocket, out: asyncio.Queue[Outgoing]) -> None:
    """Send what is queued, in order, until the empty bytes that end it (or the client leaves)."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        while True:
            item = await out.get()
            if isinstance(item, str):
                await websocket.send_text(item)
            elif item:
                await websocket.send_bytes(item)
            else:
                return


async def _read_all(
    websocket: WebSocket, max_frame: int, heard: asyncio.Queue[Pcm], out: asyncio.Queue[Outgoing]
) -> None:
    """The client's frames: audio cut into 30 ms frames for the feeder, control frames answered; ends on leaving."""
    pending = bytearray()
    behind = False
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data, text = message.get("bytes"), message.get("text")
            if data is not None:
                if problem := _audio_problem(data, max_frame):
                    out.put_nowait(_error(400, problem))
                    continue
                pending += data
                usable = len(pending) - len(pending) % FRAME_BYTES
                for start in range(0, usable, FRAME_BYTES):
                    if heard.qsize() >= MAX_BACKLOG_FRAMES:
                        if not behind:
                            out.put_nowait(
                                _error(503, "the server falls behind the audio: some was dropped", "too_slow")
                            )
                        behind = True
                        continue
                    behind = False
                    heard.put_nowait(
                        np.frombuffer(bytes(pending[start : start + FRAME_BYTES]), dtype="<i2").astype(np.int16)
                    )
                del pending[:usable]
            elif text is not None and (reply := _control(text)):
                out.put_nowait(reply)


def _audio_problem(data: bytes, max_frame: int) -> str:
    if len(data) > max_frame:
        return f"an audio frame is larger than {max_frame} bytes: send it in pieces"
    if len(data) % 2:
        return "audio must be 16-bit samples: an odd number of bytes is not"
    return ""


def _control(text: str) -> str | None:
    """The reply to one control frame (None: nothing to say)."""
    try:
        frame = json.loads(text)
    except ValueError:
        frame = None
    if not isinstance(frame, dict):
        return _error(400, "a text frame must be a JSON object with a 'type'")
    kind = frame.get("type")
    if kind == "hello":
        rate = frame.get("sample_rate", SAMPLE_RATE)
        if rate != SAMPLE_RATE:
            return _error(400, f"audio must be {SAMPLE_RATE} Hz mono int16 (sample_rate {rate!r} is not)")
        return None
    if kind == "ping":
        return _frame({"type": "pong"})
    return _error(400, f"unknown frame type {kind!r} (hello, ping)")


__all__ = ["SocketSink", "router", "voice_event_frame"]
