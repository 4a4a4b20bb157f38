import numpy as np
import pytest

from kairos.voice.asr import WhisperTranscriber
from kairos.voice.audio import write_wav
from kairos.voice.speech_text import SpeechTextStream
from kairos.voice.tts import EspeakSynthesizer, HibariSynthesizer, speak
from kairos.voice.wer import word_error_rate

TEXT = "The meeting moved to Thursday afternoon. Bring the quarterly report."


@pytest.mark.parametrize("engine", ["hibari", "espeak"])
def test_synthesised_speech_is_16_bit_audio_that_asr_reads_back(
    engine: str, request: pytest.FixtureRequest, whisper: WhisperTranscriber, tmp_path: object
) -> None:
    synth: HibariSynthesizer | EspeakSynthesizer = request.getfixturevalue(engine)
    pcm = synth.synthesize(TEXT)
    assert pcm.dtype == np.int16 and len(pcm) > synth.sample_rate  # over a second of audio
    assert np.abs(pcm.astype(np.int32)).max() > 1000
    write_wav(f"{tmp_path}/{engine}.wav", pcm, synth.sample_rate)
    assert word_error_rate(TEXT, whisper.transcribe(pcm)) <= (0.15 if engine == "hibari" else 0.35)


def test_rate_changes_the_length(espeak: EspeakSynthesizer) -> None:
    assert len(espeak.synthesize(TEXT, rate=0.7)) > 1.2 * len(espeak.synthesize(TEXT, rate=1.0))


def test_speak_renders_chunks_and_directives_in_order(espeak: EspeakSynthesizer) -> None:
    stream = SpeechTextStream()
    items = [*stream.feed("Sure, one moment. [THINKING][SPEED:1.5x][EMO:calm]It is ready."), *stream.flush()]
    blocks = list(speak(espeak, items))
    assert [b.text for b in blocks] == ["Sure,", "one moment.", "", "It is ready."]
    assert len(blocks[2].pcm) == 600 * 16 and not blocks[2].pcm.any()  # the pause
    assert blocks[3].rate == 1.5 and blocks[3].style == "calm"
    assert all("THINKING" not in b.text for b in blocks)


def test_blocks_come_one_at_a_time(espeak: EspeakSynthesizer) -> None:
    blocks = speak(espeak, ["First sentence.", "Second sentence."])
    first = next(blocks)  # the first block exists before the second is synthesised
    assert first.text == "First sentence." and len(first.pcm) > 0
    assert next(blocks).text == "Second sentence."
