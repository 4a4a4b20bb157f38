"""``kairos voice``: talk to the agent of the event runtime, offline: a WAV file in and out, or the microphone.

The session is the chat's (same runtime, tools and sources, the voice prompt added); speech goes in as
``user.input`` events and the reply's text stream is spoken (:mod:`kairos.voice.session`). A file is
played in real time, so the cascade's timing (speculation at the VAD pause, barge-in) is the live one.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kairos.cli._console import _text, console, err_console
from kairos.cli._options import BaseUrlOpt, ModelOpt, WorkspaceOpt
from kairos.cli._workspace import _fail, _model, _open
from kairos.errors import ConfigError, KairosError

if TYPE_CHECKING:
    from kairos.config import VoiceConfig
    from kairos.runtime import Runtime
    from kairos.voice.audio import Pcm
    from kairos.voice.session import VoiceEvent, VoiceSession

InputOpt = Annotated[
    Path | None, typer.Option("--input", "-i", help="a WAV file to say (16-bit PCM, any rate); default: the microphone")
]
OutputOpt = Annotated[Path | None, typer.Option("--output", "-o", help="write the replies' audio, as played, here")]
SpeculateOpt = Annotated[
    bool | None,
    typer.Option("--speculate/--no-speculate", help="start the answer at a pause, before the end of speech ([voice])"),
]
WAIT_AFTER_S = 120.0
"""After a file ends: how long to wait for the reply to be spoken before giving up."""
MIC_INSTALL = "pip install sounddevice (and sudo apt-get install libportaudio2), or use --input FILE.wav"


class _Printer:
    """Transcripts, the spoken reply and each turn's waterfall, as they happen."""

    def __init__(self) -> None:
        self._replying = False

    def __call__(self, event: VoiceEvent) -> None:
        kind = event.kind
        if kind == "final" and event.text.strip():
            self._end_reply()
            console.print(f"[bold]you:[/] {_text(event.text)}")
        elif kind == "reply_text":
            if not self._replying:
                console.print("[bold cyan]agent:[/] ", end="")
                self._replying = True
            console.print(_text(event.text), end=" ")
        elif kind in ("cut", "resumed", "backchannel"):
            self._end_reply()
            said = {"cut": "you cut in; heard: ", "resumed": "(backchannel: going on) ", "backchannel": ""}[kind]
            if said:
                console.print(f"[dim]{said}{_text(event.text)}[/]")
        elif kind == "turn":
            d = event.data
            parts = [f"end of speech waited {d['eos_wait_ms']} ms", f"ASR {d['asr_final_ms']:.0f} ms"]
            if d.get("llm_first_token_ms") is not None:
                parts.append(f"first token {d['llm_first_token_ms']:.0f} ms")
            parts.append(f"first audio {d['first_audio_ms']:.0f} ms")
            if d.get("speculation") != "none":
                parts.append(f"speculation: {d['speculation']}")
            self._end_reply()
            console.print(f"[dim]  {' · '.join(parts)} (from the end of your speech)[/]")
        elif kind == "error":
            self._end_reply()
            err_console.print(f"[red]{_text(event.text)}[/]")

    def _end_reply(self) -> None:
        if self._replying:
            console.print()
            self._replying = False


def voice(
    input: InputOpt = None,
    output: OutputOpt = None,
    speculate: SpeculateOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    workspace: WorkspaceOpt = Path("."),
    session: Annotated[str | None, typer.Option("--session", "-s", help="resume this session id")] = None,
) -> None:
    """Talk with the agent: speech in, speech out, offline (Whisper tiny.en, Silero VAD, hibari or espeak-ng).

    With --input the file is heard in real time (then silence until the reply has been spoken); --output
    writes the replies' audio as it was played. Without --input the microphone is used (speak over the
    agent to cut it off; "mm-hm" does not). Ctrl-C quits.
    """
    from kairos.cli._runtime import build_runtime
    from kairos.context.store import new_session_id
    from kairos.voice.audio import read_wav, resample

    pcm: Pcm | None = None
    if input is not None:
        try:
            raw, rate = read_wav(input)
        except Exception as e:  # OSError, wave.Error, EOFError, a wrong sample width: all say the same
            raise _fail(f"cannot read {input} as a 16-bit PCM WAV file: {e}") from e
        pcm = resample(raw, rate)
    full, store = _open(workspace, model, base_url, session)
    config = full.for_voice()  # few tools: every prompt token is read before the first word is spoken
    llm = _model(config, store)
    try:
        from kairos.voice.prompt import VoicePrompt
        from kairos.voice.stack import voice_stack

        with console.status("loading speech recognition and synthesis"):
            stack = voice_stack()
        _warm(llm, config)
        sid = session or new_session_id()
        runtime = build_runtime(
            llm, workspace, config, store, default_session=sid, plugins=[VoicePrompt()], background_config=full
        )
        if not session:
            store.trajectories.create_session("voice", session_id=sid)
    except KairosError as e:
        store.close()
        raise _fail(str(e)) from e
    console.print(
        f"[dim]session {sid}. {'Listening to ' + str(input) if pcm is not None else 'Speak; Ctrl-C quits.'}[/]"
    )
    try:
        played = asyncio.run(_talk(runtime, sid, stack, pcm, config.voice, speculate))
    except KeyboardInterrupt:
        played = None
    except ConfigError as e:
        store.close()
        raise _fail(str(e)) from e
    if output is not None and played is not None:
        from kairos.voice.audio import write_wav

        write_wav(output, played)
        console.print(f"[dim]wrote {output} ({len(played) / 16000:.1f} s)[/]")
    console.print(f"[dim]session {sid} saved.[/]")
    store.close()


def _warm(llm: Any, config: Any) -> None:
    """Read the voice agent's system turn once (the local model keeps its KV state on disk for next time)."""
    from kairos.app import prewarm
    from kairos.runtime.toolsets import runtime_tools
    from kairos.voice.prompt import VoicePrompt

    with console.status("reading the voice agent's prompt (once: its KV state is kept on disk)"):
        prewarm(llm, config, tools=runtime_tools(config.runtime.toolsets), plugins=[VoicePrompt()])


async def _talk(
    runtime: Runtime, sid: str, stack: Any, pcm: Pcm | None, cfg: VoiceConfig, speculate: bool | None
) -> Pcm:
    """Run the conversation; returns the replies' audio as played."""
    import numpy as np

    from kairos.voice.playback import Playback
    from kairos.voice.session import VoiceSession

    sink = None if pcm is not None else _speaker()
    playback = Playback(sink)
    async with runtime:
        listener = stack.listener(silence_ms=cfg.silence_ms, hold_ms=cfg.hold_ms)
        vs = VoiceSession(
            runtime, sid, listener, stack.synthesizer, playback, on_event=_Printer(),
            speculate=cfg.speculate if speculate is None else speculate, backchannel_ms=cfg.backchannel_ms,
        )  # fmt: skip
        async with vs:
            if pcm is not None:
                await _say_file(vs, pcm)
            else:
                await _listen(vs)
        await runtime.aclose(5.0)
    playback.new_reply()
    audio = [a for timeline in playback.history for a in timeline.audio]
    return np.concatenate(audio) if audio else np.zeros(0, dtype=np.int16)


async def _say_file(vs: VoiceSession, pcm: Pcm) -> None:
    """Feed ``pcm`` in real time, then silence until the agent is done speaking."""
    import time

    import numpy as np

    from kairos.voice.audio import FRAME_MS, FRAME_SAMPLES, frames

    start = time.monotonic()
    n = 0

    async def feed(frame: Pcm) -> None:
        nonlocal n
        await asyncio.sleep(max(0.0, start + n * FRAME_MS / 1000 - time.monotonic()))
        await vs.feed(frame)
        n += 1

    for frame in frames(pcm):
        await feed(frame)
    quiet = np.zeros(FRAME_SAMPLES, dtype=np.int16)
    deadline = time.monotonic() + WAIT_AFTER_S
    for _ in range(1000 // FRAME_MS):  # a second of silence: the end of speech is decided
        await feed(quiet)
    while vs.busy and time.monotonic() < deadline:
        await feed(quiet)


class _SoundCard:
    """The default output device through sounddevice (PortAudio): blocks play back to back; stop drops them."""

    def __init__(self, sd: Any) -> None:
        import collections
        import threading

        import numpy as np

        from kairos.voice.audio import SAMPLE_RATE

        self._np = np
        self._lock = threading.Lock()
        self._queue: collections.deque[Pcm] = collections.deque()
        self._stream = sd.OutputStream(samplerate=SAMPLE_RATE, channels=1, dtype="int16", callback=self._fill)
        self._stream.start()

    def _fill(self, out: Any, frames: int, _time: Any, _status: Any) -> None:
        filled = 0
        with self._lock:
            while filled < frames and self._queue:
                head = self._queue[0]
                n = min(frames - filled, len(head))
                out[filled : filled + n, 0] = head[:n]
                filled += n
                if n == len(head):
                    self._queue.popleft()
                else:
                    self._queue[0] = head[n:]
        out[filled:, 0] = 0

    def play(self, pcm: Pcm, sample_rate: int) -> None:
        from kairos.voice.audio import SAMPLE_RATE, resample

        with self._lock:
            self._queue.append(resample(pcm, sample_rate, SAMPLE_RATE) if sample_rate != SAMPLE_RATE else pcm)

    def stop(self) -> None:
        with self._lock:
            self._queue.clear()


def _sounddevice() -> Any:
    try:
        import sounddevice
    except (ImportError, OSError) as e:
        raise ConfigError(f"no microphone support here ({e}): {MIC_INSTALL}") from e
    return sounddevice


def _speaker() -> _SoundCard:
    return _SoundCard(_sounddevice())


async def _listen(vs: VoiceSession) -> None:
    """Microphone frames to the session until Ctrl-C."""
    from kairos.voice.audio import FRAME_SAMPLES, SAMPLE_RATE

    sd = _sounddevice()
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Pcm] = asyncio.Queue()

    def heard(data: Any, _frames: int, _time: Any, _status: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, data[:, 0].copy())

    mic = sd.InputStream(samplerate=SAMPLE_RATE, channels=1, dtype="int16", blocksize=FRAME_SAMPLES, callback=heard)
    with mic, contextlib.suppress(asyncio.CancelledError):
        while True:
            await vs.feed(await queue.get())
