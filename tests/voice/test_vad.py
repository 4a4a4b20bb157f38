import numpy as np
import pytest

from kairos.voice.audio import FRAME_SAMPLES, Pcm, frames, silence
from kairos.voice.tts import EspeakSynthesizer, HibariSynthesizer
from kairos.voice.vad import Endpointer, SileroConfirmer, VadEvent, WebRtcGate, looks_unfinished


class EnergyGate:
    """Test double: a frame is speech when it is loud."""

    def is_speech(self, frame: Pcm) -> bool:
        return bool(np.abs(frame.astype(np.int32)).mean() > 500)


def _tone(ms: int) -> Pcm:
    t = np.arange(16 * ms) / 16_000
    return np.asarray(3000 * np.sin(2 * np.pi * 220 * t), dtype=np.int16)


def _kinds(events: list[VadEvent]) -> list[str]:
    return [e.kind for e in events]


def test_end_of_speech_comes_after_the_silence_and_uses_no_later_audio() -> None:
    ep = Endpointer(EnergyGate(), silence_ms=600)
    audio = np.concatenate([silence(300), _tone(900), silence(300), _tone(600), silence(2000)])
    events: list[VadEvent] = []
    for i in range(0, len(audio) - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        fed_ms = (i + FRAME_SAMPLES) // 16
        for e in ep.feed(audio[i : i + FRAME_SAMPLES]):
            assert e.at_ms == fed_ms  # decided on the frame just fed: no look-ahead
            events.append(e)
    assert _kinds(events) == ["speech_start", "pause", "resume", "pause", "end_of_speech"]  # the 300 ms gap is no end
    end = events[-1]
    assert end.segment_start_ms == 300 and end.speech_end_ms == 2100 and end.at_ms == 2700


def test_the_hold_applies_only_while_the_transcript_looks_unfinished() -> None:
    audio = np.concatenate([_tone(600), silence(990), _tone(600), silence(2520)])
    assert _kinds(Endpointer(EnergyGate()).feed_pcm(audio)).count("end_of_speech") == 2
    held = Endpointer(EnergyGate(), hold_ms=2000, unfinished=lambda: True).feed_pcm(audio)
    ends = [e for e in held if e.kind == "end_of_speech"]
    assert len(ends) == 1 and ends[0].held
    assert ends[0].speech_end_ms is not None and 2000 <= ends[0].at_ms - ends[0].speech_end_ms < 2030


@pytest.mark.parametrize(
    ("text", "unfinished"),
    [
        ("My number is 555.", True),
        ("my number is five five five", True),
        ("My name is spelled J O H", True),
        ("Call me at 555-", True),
        ("Please call me tomorrow.", False),
        ("I have one question.", False),
        ("", False),
    ],
)
def test_looks_unfinished(text: str, unfinished: bool) -> None:
    assert looks_unfinished(text) is unfinished


def test_webrtc_and_silero_end_a_spoken_sentence_once_after_its_end(espeak: EspeakSynthesizer) -> None:
    pytest.importorskip("webrtcvad", reason="webrtcvad is not installed: pip install -e '.[voice]'")
    speech = espeak.synthesize("Well, when I get home tonight, I will call you, and then we can decide.")
    audio = np.concatenate([silence(500), speech, silence(1500)])
    events = Endpointer(WebRtcGate(), SileroConfirmer(), silence_ms=600).feed_pcm(audio)
    ends = [e for e in events if e.kind == "end_of_speech"]
    assert len(ends) == 1  # the commas' short pauses do not end the turn
    speech_ms = 500 + len(speech) // 16
    assert ends[0].at_ms >= speech_ms - 300  # not inside the sentence
    assert ends[0].at_ms - ends[0].speech_end_ms == 600


def test_silence_never_starts_speech() -> None:
    pytest.importorskip("webrtcvad", reason="webrtcvad is not installed: pip install -e '.[voice]'")
    assert Endpointer(WebRtcGate(), SileroConfirmer()).feed_pcm(silence(3000)) == []


def test_the_onnx_silero_tells_speech_from_silence(espeak: EspeakSynthesizer) -> None:
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: pip install -e '.[voice]'")
    silero = SileroConfirmer("onnx")
    speech = espeak.synthesize("Hello there, how are you doing today?")
    quiet = [silero.probability(f) for f in frames(silence(600))]
    voiced = [silero.probability(f) for f in frames(speech)]
    assert max(quiet) < 0.2 and max(voiced) > 0.9


def test_hibari_synthesizer_fixture_is_usable(hibari: HibariSynthesizer) -> None:
    assert hibari.sample_rate == 16_000
