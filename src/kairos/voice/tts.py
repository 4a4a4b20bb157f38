"""Text to speech: hibari (voice "heart", bundled in the wheel) by default, Debian espeak-ng as fallback.

Synthesisers return 16 kHz mono int16 by default (hibari's 24 kHz is resampled with
:func:`kairos.voice.audio.resample`), so every stage shares one format; pass ``sample_rate`` to keep
another. :func:`speak` renders a stream of speakable chunks and directives block by block, so playback
of the first sentence can start while the rest is still being written or synthesised.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kairos.errors import ConfigError
from kairos.voice.audio import SAMPLE_RATE, Pcm, from_float, read_wav, resample, silence
from kairos.voice.speech_text import Pause, Rate, SpeechItem, Style


class Synthesizer(Protocol):
    """Text in, audio out at :attr:`sample_rate`."""

    sample_rate: int

    def synthesize(self, text: str, rate: float = 1.0) -> Pcm:
        """Mono int16 speech for ``text``; ``rate`` > 1 speaks faster."""
        ...


class HibariSynthesizer:
    """hibari-tts (Apache-2.0, 24 kHz). Only the bundled voice "heart" is offline: others download.

    Args:
        voice: a voice the wheel carries.
        threads: onnxruntime threads (one is ~100x real time; a second would only take a core from the LLM).
        sample_rate: output rate (the model's 24 kHz is resampled to it).
        seed: fixed for repeatable audio.
    """

    def __init__(self, voice: str = "heart", threads: int = 1, sample_rate: int = SAMPLE_RATE, seed: int = 0) -> None:
        try:
            import hibari
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise ConfigError("hibari-tts is not installed: pip install -e '.[voice]'") from exc
        self._tts = hibari.Hibari(voice=voice, threads=threads)
        self._native_rate = int(hibari.SAMPLE_RATE)
        self.sample_rate = sample_rate
        self.seed = seed

    def synthesize(self, text: str, rate: float = 1.0) -> Pcm:
        """Speech for ``text`` at :attr:`sample_rate`."""
        if not text.strip():
            return np.zeros(0, dtype=np.int16)
        audio = np.asarray(self._tts(text, speed=rate, seed=self.seed), dtype=np.float32)
        return resample(from_float(audio), self._native_rate, self.sample_rate)


class EspeakSynthesizer:
    """Debian's espeak-ng in a subprocess: robotic, but instant and always there (``apt-get install espeak-ng``).

    The text goes in on stdin, so nothing in it is read as an option.
    """

    def __init__(self, voice: str = "en-us", words_per_minute: int = 165, sample_rate: int = SAMPLE_RATE) -> None:
        exe = shutil.which("espeak-ng")
        if exe is None:
            raise ConfigError("espeak-ng is not installed: sudo apt-get install espeak-ng")
        self._exe = exe
        self.voice = voice
        self.words_per_minute = words_per_minute
        self.sample_rate = sample_rate

    def synthesize(self, text: str, rate: float = 1.0) -> Pcm:
        """Speech for ``text`` at :attr:`sample_rate`."""
        if not text.strip():
            return np.zeros(0, dtype=np.int16)
        wpm = str(max(80, min(450, round(self.words_per_minute * rate))))
        done = subprocess.run(
            [self._exe, "-v", self.voice, "-s", wpm, "--stdout", "--stdin"],
            input=text.encode(),
            capture_output=True,
            check=True,
            timeout=60,
        )
        pcm, file_rate = read_wav(done.stdout)
        return resample(pcm, file_rate, self.sample_rate)


def default_synthesizer(sample_rate: int = SAMPLE_RATE) -> Synthesizer:
    """Hibari when installed, else espeak-ng; says how to get either when neither is there."""
    try:
        return HibariSynthesizer(sample_rate=sample_rate)
    except ConfigError:
        try:
            return EspeakSynthesizer(sample_rate=sample_rate)
        except ConfigError as exc:
            raise ConfigError(
                "no speech synthesiser: pip install -e '.[voice]' (hibari) or sudo apt-get install espeak-ng"
            ) from exc


@dataclass(frozen=True)
class AudioBlock:
    """One block of reply audio: a spoken chunk (``text``) or a pause (``text`` empty)."""

    pcm: Pcm
    sample_rate: int
    text: str = ""
    rate: float = 1.0
    style: str | None = None


def speak(synth: Synthesizer, items: Iterable[SpeechItem], rate: float = 1.0) -> Iterator[AudioBlock]:
    """Render chunks and directives lazily, one block per chunk, in order.

    ``Pause`` becomes silence, ``Rate`` multiplies the rate of what follows, ``Style`` is carried on the
    blocks (a synthesiser with several reference voices can pick one; hibari's one offline voice cannot).
    """
    style: str | None = None
    current = rate
    for item in items:
        if isinstance(item, Pause):
            yield AudioBlock(silence(item.ms, synth.sample_rate), synth.sample_rate, style=style)
        elif isinstance(item, Rate):
            current = rate * item.factor
        elif isinstance(item, Style):
            style = item.name
        elif item.strip():
            yield AudioBlock(synth.synthesize(item, current), synth.sample_rate, item, current, style)
