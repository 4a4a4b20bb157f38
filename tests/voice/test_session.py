"""The voice session on a real runtime with a scripted model, a scripted listener and a fake synthesiser.

What is heard is scripted frame by frame, and playback runs on a clock the test moves, so every
turn-taking decision (speculation hit/miss/abort, barge-in cut, backchannel) is deterministic.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.models.types import ModelRequest, ModelResponse
from kairos.runtime import Runtime
from kairos.testing import ScriptedModel, reply
from kairos.voice.audio import FRAME_SAMPLES, Pcm
from kairos.voice.listen import Heard
from kairos.voice.playback import Playback, words_heard
from kairos.voice.session import VoiceEvent, VoiceSession, is_backchannel, normalise

SILENT = np.zeros(FRAME_SAMPLES, dtype=np.int16)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class ScriptedEar:
    """A listener whose output per frame is scripted; frames past the script hear nothing."""

    class _Endpointer:
        in_speech = False
        fed_ms = 0

    def __init__(self) -> None:
        self.script: list[list[Heard]] = []
        self.endpointer = self._Endpointer()

    def feed(self, frame: Pcm) -> list[Heard]:
        self.endpointer.fed_ms += 30
        out = self.script.pop(0) if self.script else []
        for h in out:
            self.endpointer.in_speech = h.kind in ("speech_start", "resume", "interim") or (
                self.endpointer.in_speech and h.kind != "final"
            )
        return out


class WordSynth:
    """0.5 s of tone per word: what was heard is a count of words."""

    sample_rate = 16_000

    def __init__(self) -> None:
        self.said: list[str] = []

    def synthesize(self, text: str, rate: float = 1.0) -> Pcm:
        self.said.append(text)
        return np.full(8000 * len(text.split()), 1000, dtype=np.int16)


class Voice:
    """A runtime, a session and a voice session on it, with the test's clock."""

    def __init__(self, rt: Runtime, sid: str, speculate: bool = True) -> None:
        self.clock = Clock()
        self.ear = ScriptedEar()
        self.synth = WordSynth()
        self.events: list[VoiceEvent] = []
        self.playback = Playback(clock=self.clock)
        self.vs = VoiceSession(
            rt, sid, self.ear, self.synth, self.playback, speculate=speculate, on_event=self.events.append,
            clock=self.clock,
        )  # fmt: skip

    async def hear(self, *heard: Heard) -> None:
        self.ear.script.append(list(heard))
        await self.vs.feed(SILENT)

    async def until(self, test, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
        async with asyncio.timeout(timeout_s):
            while not test():  # noqa: ASYNC110 - the state is the session's, nothing signals it
                await asyncio.sleep(0.01)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


def user_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "user" and not m.content.startswith("<agent_status>")]


async def test_a_spoken_question_is_answered_aloud_and_control_tokens_are_never_spoken_or_shown(tmp_path: Path) -> None:
    model = ScriptedModel([reply("[THINKING] It is noon. [SPEED:0.8x] Anything else?")], chunk=4)
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        sid = rt.create_session("voice")
        v = Voice(rt, sid)
        async with v.vs:
            await v.hear(Heard("speech_start", 90))
            await v.hear(Heard("final", 1500, "What time is it?", 0, 900))
            await v.until(lambda: len(v.vs.turns) == 1 and not v.vs._running and len(v.synth.said) == 2)
    assert len(model.requests) == 1 and user_texts(model.requests[0])[-1] == "What time is it?"
    assert v.synth.said == ["It is noon.", "Anything else?"]
    shown = " ".join(e.text for e in v.events if e.kind == "reply_text")
    assert "[" not in shown and "It is noon." in shown
    turn = v.vs.turns[0]
    assert turn.text == "What time is it?" and turn.eos_wait_ms == 600 and turn.speech_ms == 900
    assert turn.speculation == "none" and turn.first_audio_ms is not None


async def test_speculation_hit_answers_the_interim_once_and_holds_its_audio_until_the_final(tmp_path: Path) -> None:
    model = ScriptedModel([reply("Sure, at nine.")])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        sid = rt.create_session("voice")
        v = Voice(rt, sid)
        async with v.vs:
            await v.hear(Heard("speech_start", 90))
            await v.hear(Heard("interim", 1140, "Remind me at nine.", 0, 900))  # a VAD pause: speculate
            await v.until(lambda: not v.vs._running and v.vs._reply is not None and len(v.vs._reply.held) >= 1)
            assert not v.playback.pending  # generated and synthesised, but not played before the end of speech
            await v.hear(Heard("final", 1500, "remind me at nine", 0, 900))  # same words: a hit
            await v.until(lambda: len(v.vs.turns) == 1)
    assert len(model.requests) == 1  # no second call
    assert v.vs.turns[0].speculation == "hit"
    assert v.vs.turns[0].llm_first_token_ms is not None and v.vs.turns[0].llm_first_token_ms <= 0
    assert v.playback.pending


async def test_speculation_miss_reruns_on_the_final_text_and_only_its_reply_is_spoken(tmp_path: Path) -> None:
    started = asyncio.Event()

    def slow_first(request: ModelRequest) -> ModelResponse:
        started.set()
        return reply("Calling your mother now, and I will let you know how it goes.")

    model = ScriptedModel([slow_first, reply("Dialing the dentist.")], chunk=6, delay_s=0.05)
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        sid = rt.create_session("voice")
        v = Voice(rt, sid)
        async with v.vs:
            await v.hear(Heard("speech_start", 90))
            await v.hear(Heard("interim", 1140, "Call my mother.", 0, 900))
            await asyncio.wait_for(started.wait(), 5)
            await v.hear(Heard("final", 1500, "Call my dentist.", 0, 900))  # Whisper changed its mind
            await v.until(lambda: len(v.vs.turns) == 1)
    assert len(model.requests) == 2 and user_texts(model.requests[1])[-1] == "Call my dentist."
    assert v.synth.said == ["Dialing the dentist."]
    assert v.vs.turns[0].speculation == "miss"


async def test_speech_resuming_after_the_pause_aborts_the_speculative_turn(tmp_path: Path) -> None:
    model = ScriptedModel([reply("Which number?"), reply("Saved five five five, one two three four.")], delay_s=0.05)
    store = SessionStore(tmp_path)
    async with Runtime(Agent(model), store) as rt:
        sid = rt.create_session("voice")
        v = Voice(rt, sid)
        async with v.vs:
            await v.hear(Heard("speech_start", 90))
            await v.hear(Heard("interim", 1140, "Save my number.", 0, 900))
            await v.hear(Heard("resume", 1300))
            await v.until(lambda: not v.vs._running)
            await v.hear(Heard("final", 4000, "Save my number. Five five five one two three four.", 0, 3400))
            await v.until(lambda: len(v.vs.turns) == 1)
            await v.until(lambda: not v.vs._running)
    assert " ".join(v.synth.said) == "Saved five five five, one two three four."
    assert v.vs.turns[0].speculation == "aborted"
    stored = [m for m in SessionStore(tmp_path).resume(sid).messages if m.role == "assistant"]
    assert [m.content for m in stored] == ["Saved five five five, one two three four."]  # nothing of the aborted one


async def _speak_a_long_reply(v: Voice, rt: Runtime) -> None:
    await v.hear(Heard("speech_start", 90))
    await v.hear(Heard("final", 1500, "Tell me about the weather.", 0, 900))
    await v.until(lambda: v.playback.pending)


LONG = "Tomorrow will be sunny in the morning. Clouds come in the afternoon. Rain is likely in the evening."


async def test_a_barge_in_after_the_reply_was_stored_leaves_a_note_of_what_was_heard(tmp_path: Path) -> None:
    model = ScriptedModel([reply(LONG), reply("Yes, take an umbrella.")])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        sid = rt.create_session("voice")
        v = Voice(rt, sid)
        async with v.vs:
            await _speak_a_long_reply(v, rt)
            await v.until(lambda: not v.vs._running and len(v.synth.said) == 3)
            v.clock.t += 4.5  # the first sentence (7 words: 3.5 s) and 2 words of the second were played
            await v.hear(Heard("speech_start", 6000, start_ms=5910))
            assert v.kinds()[-1] == "paused" and not v.playback.speaking
            await v.hear(Heard("interim", 7400, "Wait, do I need an umbrella?", 5910, 7160))
            assert v.kinds()[-1] == "cut"
            await v.hear(Heard("final", 7760, "Wait, do I need an umbrella?", 5910, 7160))
            await v.until(lambda: len(model.requests) == 2 and not v.vs._running)
    heard = "Tomorrow will be sunny in the morning. Clouds come"
    assert [e.text for e in v.events if e.kind == "cut"] == [heard]
    said = user_texts(model.requests[1])[-1]
    assert said.startswith("<speech_cut>") and repr(heard) in said and said.endswith("\nWait, do I need an umbrella?")
    assert v.vs.bargein_ms and v.vs.bargein_ms[0] < 150


async def test_a_barge_in_while_the_reply_streams_keeps_only_the_heard_part_in_the_trajectory(tmp_path: Path) -> None:
    model = ScriptedModel([reply(LONG * 3), reply("Yes.")], chunk=10, delay_s=0.03)
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        sid = rt.create_session("voice")
        v = Voice(rt, sid)
        async with v.vs:
            await _speak_a_long_reply(v, rt)
            v.clock.t += 1.0  # two words played
            await v.hear(Heard("speech_start", 3000, start_ms=2910))
            assert v.vs._running  # still generating
            await v.hear(Heard("interim", 4400, "Stop, is it cold?", 2910, 4160))
            await v.hear(Heard("final", 4760, "Stop, is it cold?", 2910, 4160))
            await v.until(lambda: len(model.requests) == 2 and not v.vs._running)
    stored = [m.content for m in SessionStore(tmp_path).resume(sid).messages if m.role == "assistant"]
    assert stored == ["Tomorrow will", "Yes."]
    said = user_texts(model.requests[1])[-1]  # and the model is told the reply was cut, not finished
    assert said.startswith("<speech_cut>") and "'Tomorrow will'" in said and said.endswith("\nStop, is it cold?")


async def test_a_backchannel_while_the_agent_speaks_pauses_and_resumes_without_a_turn(tmp_path: Path) -> None:
    model = ScriptedModel([reply(LONG)])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        sid = rt.create_session("voice")
        v = Voice(rt, sid)
        async with v.vs:
            await _speak_a_long_reply(v, rt)
            v.clock.t += 1.0
            await v.hear(Heard("speech_start", 3000, start_ms=2910))
            assert v.playback.paused
            await v.hear(Heard("interim", 3500, "Mm-hm.", 2910, 3260))
            assert not v.playback.paused and v.kinds()[-1] == "resumed"
            await v.hear(Heard("final", 3860, "Mm-hm.", 2910, 3260))
            await asyncio.sleep(0.1)
    assert len(model.requests) == 1 and v.kinds()[-1] == "backchannel"
    v.clock.t += 60
    assert v.playback.heard() == LONG  # nothing of the reply was lost


def test_backchannel_rule() -> None:
    assert is_backchannel("Mm-hm.", 300) and is_backchannel("yeah, okay", 600) and is_backchannel("", 200)
    assert not is_backchannel("Yeah, but what about tomorrow?", 600)
    assert not is_backchannel("yeah", 1500)  # long: not a backchannel
    assert normalise("Remind me, at NINE!") == "remind me at nine"


def test_playback_clock_knows_what_was_heard() -> None:
    from kairos.voice.tts import AudioBlock

    clock = Clock()
    pb = Playback(clock=clock)
    for text in ("one two three four.", "five six."):
        pb.add(AudioBlock(np.zeros(16_000 * len(text.split()), dtype=np.int16), 16_000, text))
    clock.t += 2.5
    pb.pause()
    clock.t += 10  # paused: nothing more is played
    assert pb.paused and not pb.speaking
    pb.resume()
    clock.t += 2.6  # the rest of the first block (1.5 s), then 1.1 s of the second: one of its two words
    assert pb.cut() == "one two three four. five"
    assert words_heard("a b c d", 0.5) == "a b"


@pytest.mark.parametrize("text", ["", "   "])
async def test_an_empty_final_transcript_starts_no_turn(tmp_path: Path, text: str) -> None:
    model = ScriptedModel([])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        v = Voice(rt, rt.create_session("voice"))
        async with v.vs:
            await v.hear(Heard("speech_start", 90))
            await v.hear(Heard("final", 1500, text, 0, 900))
    assert model.requests == [] and not v.vs.busy


async def test_every_turn_is_spoken_not_only_the_first(tmp_path: Path) -> None:
    model = ScriptedModel([reply("First answer."), reply("Second answer.")])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        v = Voice(rt, rt.create_session("voice"))
        async with v.vs:
            for n, text in enumerate(["One?", "Two?"], start=1):
                await v.hear(Heard("speech_start", 90))
                await v.hear(Heard("final", 1500, text, 0, 900))
                await v.until(lambda n=n: len(v.vs.turns) == n and not v.vs.generating)  # type: ignore[misc]
                v.clock.t += 30  # the reply was played to its end
                assert not v.vs.busy
    assert v.synth.said == ["First answer.", "Second answer."]


async def test_wait_stop_over_the_reply_waits_for_the_question_and_goes_in_with_it(tmp_path: Path) -> None:
    model = ScriptedModel([reply(LONG), reply("Friday is sunny.")])
    async with Runtime(Agent(model), SessionStore(tmp_path)) as rt:
        v = Voice(rt, rt.create_session("voice"))
        async with v.vs:
            await _speak_a_long_reply(v, rt)
            await v.until(lambda: not v.vs.generating)
            v.clock.t += 1.0
            await v.hear(Heard("speech_start", 3000, start_ms=2910))
            await v.hear(Heard("interim", 4100, "Wait, stop.", 2910, 3860))
            await v.hear(Heard("final", 4460, "Wait, stop.", 2910, 3860))
            await asyncio.sleep(0.1)
            assert len(model.requests) == 1 and v.kinds()[-2:] == ["cut", "final"]  # quiet, waiting
            await v.hear(Heard("speech_start", 5000, start_ms=4910))
            await v.hear(Heard("final", 6500, "What about Friday?", 4910, 5900))
            await v.until(lambda: len(model.requests) == 2 and not v.vs.generating)
    said = user_texts(model.requests[1])[-1]
    assert said.startswith("<speech_cut>") and said.endswith("\nWait, stop. What about Friday?")
    assert v.vs.turns[-1].text == "Wait, stop. What about Friday?" and v.vs.turns[-1].user_wait_ms is not None
