"""A voice front end on a runtime session: speech in as ``UserInput`` events, the agent's text stream out as speech.

Voice is not a second agent loop. Each final transcript goes to :meth:`Runtime.submit` like typed
input; the reply is the agent's text stream (control tokens become pauses, rate and style, never
sound or text); a barge-in is a preempting interrupt that keeps only the played part of the reply.

Streaming, stage by stage (book ch6 §3.4, requirement 32):

- **Speculation.** At a VAD pause (240 ms of silence) the interim transcript of the whole segment is
  submitted at once, 360 ms before the end of speech is certain. Its reply is generated and
  synthesised but held. At the end of speech the final transcript decides: the same words (a hit)
  release the held audio, no second model call; other words (a miss) go in as an urgent input, so
  the runner drops the cut reply at its safe point and answers again, the stable prefix still in the
  KV cache. Speech that resumes after the pause aborts the speculative turn (nothing of it is kept).
  The trajectory is append-only: a miss leaves the early transcript in it, followed by the full one.
- **Barge-in.** Speech during playback pauses the audio at once. A short backchannel ("mm-hm",
  "yeah") resumes it where it stopped; anything longer, or other words, cuts the reply: a reply still
  streaming is interrupted with the heard text (the runner keeps only that), a reply already stored
  is marked by the user's next input (:attr:`~kairos.context.inbox.UserInput.cut_reply`), which is
  the words that cut it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from kairos.agent.events import Activity, AgentEvent, FinalAnswer, ModelDeltaEvent, RunError
from kairos.models.types import TextDelta
from kairos.runtime.events import CUT_REPLY, Event
from kairos.runtime.runtime import Runtime
from kairos.voice.audio import Pcm
from kairos.voice.listen import Heard, Listener
from kairos.voice.playback import Playback
from kairos.voice.speaker import Speaker
from kairos.voice.speech_text import SpeechItem, SpeechTextStream
from kairos.voice.tts import AudioBlock, Synthesizer
from kairos.voice.vad import looks_unfinished

_BACKCHANNELS = "mm mmm mhm hm hmm uh huh yeah yep yes yup ok okay right sure aha ah oh i see got it"
BACKCHANNEL_WORDS = frozenset(_BACKCHANNELS.split())
"""Words of a listener's feedback that mean "go on", not "stop" ("mm-hm", "uh-huh": the parts)."""

STOP_WORDS = frozenset(
    ["wait", "stop", "hold", "on", "hang", "sorry", "sec", "second", "one", "moment", "please", "no"]
)
"""Words that only take the floor ("wait, stop."): after a barge-in the question usually follows."""


def only_stop_words(text: str) -> bool:
    """Whether ``text`` says nothing but "wait", "stop", "hold on" and the like."""
    words = normalise(text).split()
    return bool(words) and all(w in STOP_WORDS for w in words)


VoiceEventKind = Literal[
    "speech_start", "interim", "final", "reply_text", "paused", "resumed", "cut", "backchannel", "turn", "error"
]


@dataclass(frozen=True)
class VoiceEvent:
    """What a front end shows: transcripts, the reply's speakable text, the floor changing hands, timings."""

    kind: VoiceEventKind
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class TurnTiming:
    """One turn's latency waterfall, in ms from the end-of-speech decision (negative: before it)."""

    text: str
    speech_ms: int
    """The user's speech, start to the end of its last voiced frame (audio time)."""
    eos_wait_ms: int
    """Silence the endpointer waited before deciding the turn was over (audio time)."""
    asr_final_ms: float = 0.0
    llm_first_token_ms: float | None = None
    first_chunk_ms: float | None = None
    first_audio_ms: float | None = None
    speculation: Literal["hit", "miss", "aborted", "none"] = "none"

    @property
    def user_wait_ms(self) -> float | None:
        """What the user waits: from the end of their speech (the VAD's silence included) to the first audio."""
        return None if self.first_audio_ms is None else self.eos_wait_ms + self.first_audio_ms

    def to_record(self) -> dict[str, Any]:
        """JSON-able, rounded to 0.1 ms."""
        record = {**self.__dict__, "user_wait_ms": self.user_wait_ms}
        return {k: round(v, 1) if isinstance(v, float) else v for k, v in record.items()}


def normalise(text: str) -> str:
    """Words only, lower case: two transcripts that say the same thing compare equal."""
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


def is_backchannel(text: str, voiced_ms: int, limit_ms: int = 800) -> bool:
    """Short feedback while the agent speaks: at most ``limit_ms`` of speech and nothing but backchannel words.

    An empty transcript of a short sound (a cough, a click the VAD took for speech) counts too.
    """
    words = normalise(text).split()
    return voiced_ms <= limit_ms and len(words) <= 3 and all(w in BACKCHANNEL_WORDS for w in words)


@dataclass
class _Reply:
    """One run's reply: its text stream, its synthesis, whether its audio may play yet."""

    speech: SpeechTextStream
    gated: bool
    speaker: Speaker | None = None
    closed: bool = False
    """The run ended: its text is all there (its audio may still be on the way)."""
    held: list[AudioBlock] = field(default_factory=list)
    spoken: list[str] = field(default_factory=list)
    first_token_at: float | None = None
    first_chunk_at: float | None = None


class VoiceSession:
    """Speech in, speech out, on one session of a running :class:`Runtime`.

    Args:
        runtime: a started runtime (``async with Runtime(...)``).
        session_id: the session the voice talks to.
        listener: VAD + streaming ASR.
        synth: the synthesiser.
        playback: the reply audio's timeline and sink.
        speculate: start the turn on the interim transcript at a VAD pause.
        backchannel_ms: speech during playback at most this long, of backchannel words only, does not cut it.
        on_event: called with every :class:`VoiceEvent` (on the runtime's loop).
        clock: seconds, for the waterfall.
    """

    def __init__(
        self,
        runtime: Runtime,
        session_id: str,
        listener: Listener,
        synth: Synthesizer,
        playback: Playback,
        *,
        speculate: bool = True,
        backchannel_ms: int = 800,
        on_event: Callable[[VoiceEvent], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.runtime = runtime
        self.session_id = session_id
        self.listener = listener
        self.synth = synth
        self.playback = playback
        self.speculate = speculate
        self.backchannel_ms = backchannel_ms
        self.on_event = on_event
        self.clock = clock
        self.turns: list[TurnTiming] = []
        self.bargein_ms: list[float] = []
        """Per barge-in: from the frame that showed speech to the audio paused (ms)."""
        self.replies = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reply: _Reply | None = None  # the reply being written
        self._live: list[_Reply] = []  # replies whose audio is not all handed to playback yet
        self._running = False  # a turn of ours runs (submitted, no final answer yet)
        self._stored = ""  # text of the last reply the runner finished (stored in the trajectory)
        self._spec: str | None = None  # the transcript a speculative turn went in with
        self._spec_state: Literal["none", "open", "aborted"] = "none"
        self._discard = False  # drop reply text until the runner starts its next model call
        self._barge: int | None = None  # speech start (audio ms) of speech that paused the reply
        self._ignore_final = False  # the utterance under way was a backchannel
        self._floor_taken = False  # the user cut the reply and has not asked anything since
        self._taking_floor = ""  # "wait, stop." said since: goes in front of the question that follows
        self._timing: TurnTiming | None = None
        self._cut_note: str | None = None  # a stored reply the user cut: heard up to here (goes with the next input)
        self._eos_at = 0.0
        self._frame_at = 0.0

    async def __aenter__(self) -> VoiceSession:
        self._loop = asyncio.get_running_loop()
        self.runtime.agent_listeners.append(self._on_agent_event)
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(ValueError):
            self.runtime.agent_listeners.remove(self._on_agent_event)
        speakers = [r.speaker for r in self._live if r.speaker is not None]
        self._drop_reply()
        for speaker in speakers:  # not while one is inside the synthesiser: an exit then can abort
            await asyncio.to_thread(speaker.join, 30.0)

    def _emit(self, kind: VoiceEventKind, text: str = "", data: dict[str, Any] | None = None) -> None:
        if self.on_event is not None:
            self.on_event(VoiceEvent(kind, text, data or {}))

    @property
    def busy(self) -> bool:
        """Whether the agent holds the floor: a turn runs, or its audio plays or waits to."""
        return self._running or bool(self._live) or self.playback.pending

    @property
    def generating(self) -> bool:
        """Whether a turn of the session runs (the reply is being written)."""
        return self._running

    # -- input ---------------------------------------------------------------------------------

    async def feed(self, frame: Pcm) -> None:
        """One 30 ms microphone frame (16 kHz mono int16)."""
        self._frame_at = self.clock()
        heard = await asyncio.to_thread(self.listener.feed, frame)
        for h in heard:
            await self._on_heard(h)
        ear = self.listener.endpointer
        if self._barge is not None and ear.in_speech and ear.fed_ms - self._barge > self.backchannel_ms:
            await self._cut("the user went on speaking")

    async def _on_heard(self, h: Heard) -> None:
        if h.kind == "speech_start":
            self._emit("speech_start")
            if self.playback.pending and not self.playback.paused:
                self.playback.pause()
                self.bargein_ms.append((self.clock() - self._frame_at) * 1000)
                self._barge = h.start_ms
                self._emit("paused")
            elif self.busy:
                self._barge = h.start_ms  # the reply is not audible yet: decided like a barge-in
        elif h.kind == "interim":
            self._emit("interim", h.text)
            if h.end_ms and self._barge is not None:
                await self._decide_barge(h.text, h.end_ms - h.start_ms)
            elif h.end_ms and self._barge is None and not self._ignore_final:
                await self._maybe_speculate(h.text)
        elif h.kind == "resume":
            if self._spec_state == "open":
                self._abort_speculation()
        else:
            await self._on_final(h)

    async def _decide_barge(self, text: str, voiced_ms: int) -> None:
        if is_backchannel(text, voiced_ms, self.backchannel_ms):
            self._barge = None
            self._ignore_final = True
            self.playback.resume()
            self._emit("resumed", text)
        else:
            await self._cut("the user spoke")

    async def _cut(self, reason: str) -> None:
        """A barge-in: silence the reply for good and keep only what was heard."""
        self._barge = None
        self._floor_taken = True
        heard = self.playback.cut()
        whole = " ".join(self._reply.spoken) if self._reply is not None else ""
        self._drop_reply()
        self._emit("cut", heard)
        if self._running:  # the reply is kept up to the heard part; the note says it was cut, not finished
            self._discard = True
            self.runtime.interrupt(self.session_id, reason, heard=heard)
            self._cut_note = heard
        elif self._stored and normalise(heard) != normalise(whole or self._stored):
            self._cut_note = heard

    async def _maybe_speculate(self, text: str) -> None:
        if not self.speculate or self.busy or not text.strip() or looks_unfinished(text) or only_stop_words(text):
            return
        self._spec, self._spec_state = text, "open"
        await self._submit(text, gated=True)

    def _abort_speculation(self) -> None:
        """Speech resumed after the pause: the speculative turn answers a question not yet asked."""
        self._spec_state = "aborted"
        self._drop_reply()
        if self._running:
            self._discard = True
            self.runtime.interrupt(self.session_id, "the user went on speaking", heard="")
        elif self._stored:
            self._cut_note = ""

    async def _on_final(self, h: Heard) -> None:
        self._eos_at = self._frame_at
        timing = TurnTiming(h.text, h.end_ms - h.start_ms, h.at_ms - h.end_ms, (self.clock() - self._eos_at) * 1000)
        if self._ignore_final or self._barge is not None and is_backchannel(h.text, h.end_ms - h.start_ms):
            if self._barge is not None:
                self._barge = None
                self.playback.resume()
                self._emit("resumed", h.text)
            self._ignore_final = False
            self._emit("backchannel", h.text)
            return
        if self._barge is not None:
            await self._cut("the user spoke")
        self._emit("final", h.text)
        if not h.text.strip():
            self._reset_speculation()
            return
        if self._floor_taken and only_stop_words(h.text):  # "wait, stop." over the reply: the question follows
            self._taking_floor = f"{self._taking_floor} {h.text}".strip()
            self._reset_speculation()
            return
        if self._taking_floor:
            h = dataclasses.replace(h, text=f"{self._taking_floor} {h.text}")
            timing.text = h.text
            self._taking_floor = ""
        spec, state = self._spec, self._spec_state
        self._reset_speculation()
        self._timing = timing
        if spec is not None and state == "open" and normalise(spec) == normalise(h.text):
            timing.speculation = "hit"
            reply = next((r for r in self._live if r.gated), None)
            if reply is not None:
                reply.gated = False
                held, reply.held = reply.held, []
                for block in held:
                    self._play(reply, block)
                if reply.speaker is not None and reply.speaker.finished:
                    self._speaker_done(reply)
            return
        if spec is not None:
            timing.speculation = "aborted" if state == "aborted" else "miss"
            if state == "open":  # the speculative turn may still run: the final text preempts it
                self._drop_reply()
                if self._running:
                    self._discard = True
                    await self._submit(h.text, gated=False, strategy="interrupt")
                    return
                if self._stored:
                    self._cut_note = ""
        await self._submit(h.text, gated=False)

    def _reset_speculation(self) -> None:
        self._spec, self._spec_state = None, "none"

    async def _submit(self, text: str, *, gated: bool, strategy: Literal["interrupt"] | None = None) -> None:
        self._running = True
        self._floor_taken = False
        self._stored = ""
        self._open_reply(gated)
        context = {} if self._cut_note is None else {CUT_REPLY: self._cut_note}
        self._cut_note = None
        event = Event("user.input", text, {"type": "user"}, "voice", context, self.session_id, strategy=strategy)
        try:
            await self.runtime.submit(event)
        except Exception as exc:  # a refused input is said, not raised into the audio loop
            self._running = False
            self._drop_reply()
            self._emit("error", str(exc))

    # -- output --------------------------------------------------------------------------------

    def _start_reply(self, gated: bool) -> _Reply:
        assert self._loop is not None
        self.playback.new_reply()
        reply = _Reply(SpeechTextStream(), gated)
        reply.speaker = Speaker(
            self.synth, self._loop, functools.partial(self._on_block, reply), functools.partial(self._emit, "error"),
            functools.partial(self._speaker_done, reply),
        )  # fmt: skip
        self._reply = reply
        self._live.append(reply)
        self.replies += 1
        return reply

    def _open_reply(self, gated: bool = False) -> _Reply:
        """The reply being written, or a new one (the last one's run ended)."""
        reply = self._reply
        return reply if reply is not None and not reply.closed else self._start_reply(gated)

    def _speaker_done(self, reply: _Reply) -> None:
        if reply in self._live and not reply.held:  # held audio keeps a speculative reply until the final decides
            self._live.remove(reply)

    def _drop_reply(self) -> None:
        """Silence every reply on the way (a cut, an aborted or missed speculation): nothing more of them plays."""
        for reply in self._live:
            if reply.speaker is not None:
                reply.speaker.cancel()
        self._live.clear()
        self._reply = None

    def _on_agent_event(self, session_id: str, event: AgentEvent) -> None:
        if session_id != self.session_id:
            return
        if isinstance(event, Activity) and event.kind == "waiting":
            if self._discard:  # the runner starts a new model call: its text is the new reply
                self._discard = False
                self._drop_reply()
            return
        if isinstance(event, ModelDeltaEvent) and isinstance(event.delta, TextDelta):
            if self._discard:
                return
            reply = self._open_reply()
            reply.first_token_at = reply.first_token_at or self.clock()
            self._say(reply, reply.speech.feed(event.delta.text))
        elif isinstance(event, FinalAnswer | RunError):
            self._running = False
            if isinstance(event, FinalAnswer) and event.stop_reason != "interrupted":
                self._stored = event.text
            if self._discard:
                self._discard = False
                return
            if isinstance(event, RunError):
                self._emit("error", event.message)
            ending = self._reply
            if ending is not None and not ending.closed:
                self._say(ending, ending.speech.flush())
                ending.closed = True
                if ending.speaker is not None:
                    ending.speaker.close()

    def _say(self, reply: _Reply, items: list[SpeechItem]) -> None:
        chunks = [i for i in items if isinstance(i, str)]
        if chunks:
            reply.spoken.extend(chunks)
            self._emit("reply_text", " ".join(chunks))
            reply.first_chunk_at = reply.first_chunk_at or self.clock()
        if items and reply.speaker is not None:
            reply.speaker.say(items)

    def _on_block(self, reply: _Reply, block: AudioBlock) -> None:
        if reply.speaker is None or reply.speaker.cancelled:
            return
        if reply.gated:
            reply.held.append(block)
        else:
            self._play(reply, block)

    def _play(self, reply: _Reply, block: AudioBlock) -> None:
        self.playback.add(block)
        timing = self._timing
        if timing is None:
            return
        self._timing = None
        timing.first_audio_ms = self._since_eos(self.clock())
        timing.llm_first_token_ms = self._since_eos(reply.first_token_at)
        timing.first_chunk_ms = self._since_eos(reply.first_chunk_at)
        self.turns.append(timing)
        self._emit("turn", timing.text, timing.to_record())

    def _since_eos(self, at: float | None) -> float | None:
        return None if at is None else (at - self._eos_at) * 1000
