"""The ``voice`` bench's audio: the script, the voices that say it, pink noise, padded clips.

Split from :mod:`kairos_bench.voice` (the run and its measurements).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from kairos.voice.audio import FRAME_SAMPLES, SAMPLE_RATE, Pcm, from_float, read_wav, silence
from kairos.voice.stack import VoiceStack

SCRIPT_FILE = Path(__file__).parent / "data" / "voice_script.json"
SNR_DB = 15.0
PAD_BEFORE_MS = 300
PAD_AFTER_MS = 1500
Probe = Literal["bargein", "backchannel"]


@dataclass(frozen=True)
class VoiceSpec:
    """A synthetic speaker: hibari (``rate``: speed factor) or espeak-ng (``rate``: words per minute)."""

    engine: Literal["hibari", "espeak"]
    voice: str
    rate: float

    @property
    def label(self) -> str:
        """E.g. ``hibari:heart@1.2x`` or ``espeak:en-gb@200wpm``."""
        unit = f"{self.rate:g}x" if self.engine == "hibari" else f"{self.rate:g}wpm"
        return f"{self.engine}:{self.voice}@{unit}"


VOICES = (
    VoiceSpec("hibari", "heart", 1.0),
    VoiceSpec("hibari", "heart", 1.2),
    VoiceSpec("espeak", "en-us", 165),
    VoiceSpec("espeak", "en-us", 200),
    VoiceSpec("espeak", "en-gb", 165),
    VoiceSpec("espeak", "en-gb", 200),
)


@dataclass(frozen=True)
class Utterance:
    """One measured utterance: what is said, by whom, clean or noisy, and the probe that follows it."""

    index: int
    text: str
    voice: VoiceSpec
    noisy: bool
    probe: Probe | None = None
    probe_text: str = ""
    revised: bool = False
    """The final transcript is made to differ from the pause's (as when Whisper revises a word): a forced
    speculation miss, to measure what the restart costs."""


def load_script() -> dict[str, Any]:
    """The fixed script: ``system``, ``utterances``, ``bargein``, ``backchannels``."""
    script: dict[str, Any] = json.loads(SCRIPT_FILE.read_text(encoding="utf-8"))
    return script


def plan(script: dict[str, Any], voices: tuple[VoiceSpec, ...], n: int) -> list[Utterance]:
    """``n`` utterances cycling the (voice, noise) configurations and, independently, the requests.

    With 12 configurations and 8 requests, 24 utterances give every configuration twice, with
    different requests. Utterance k gets a backchannel probe when k % 4 == 0, a barge-in when k % 4 == 1,
    a revised final transcript when k % 4 == 2.
    """
    configs = [(v, noisy) for v in voices for noisy in (False, True)]
    texts: list[str] = script["utterances"]
    out = []
    for k in range(n):
        voice, noisy = configs[k % len(configs)]
        probe: Probe | None = None
        probe_text = ""
        if k % 4 == 0:
            probe, probe_text = "backchannel", script["backchannels"][(k // 4) % len(script["backchannels"])]
        elif k % 4 == 1:
            probe, probe_text = "bargein", script["bargein"]
        out.append(Utterance(k, texts[k % len(texts)], voice, noisy, probe, probe_text, revised=k % 4 == 2))
    return out


# -- audio -------------------------------------------------------------------------------------


def frame_energy(pcm: Pcm) -> npt.NDArray[np.float64]:
    """Mean square per 30 ms frame."""
    n = len(pcm) // FRAME_SAMPLES * FRAME_SAMPLES
    x = pcm[:n].astype(np.float64).reshape(-1, FRAME_SAMPLES)
    out: npt.NDArray[np.float64] = np.mean(x * x, axis=1)
    return out


def voiced_frames(pcm: Pcm, floor: float = 0.05) -> tuple[int, int]:
    """First and one-past-last frame whose energy is above ``floor`` of the loudest frame's ((0, 0): none)."""
    e = frame_energy(pcm)
    if not len(e) or e.max() <= 0:
        return 0, 0
    loud = np.flatnonzero(e > floor * e.max())
    return int(loud[0]), int(loud[-1]) + 1


def numpy_pink_noise(n: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """``n`` samples of pink (1/f power) noise at unit RMS, shaped in the frequency domain."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
    f[0] = f[1] if len(f) > 1 else 1.0
    noise = np.fft.irfft(spectrum / np.sqrt(f), n)
    rms = float(np.sqrt(np.mean(noise * noise))) or 1.0
    out: npt.NDArray[np.float64] = noise / rms
    return out


def sox_pink_noise(n: int, seed: int) -> npt.NDArray[np.float64] | None:
    """``n`` samples of sox's pink noise at unit RMS, or None when sox is missing or fails."""
    exe = shutil.which("sox")
    if exe is None:
        return None
    seconds = f"{n / SAMPLE_RATE + 0.1:.3f}"
    try:
        done = subprocess.run(
            [exe, "-R", "-n", "-r", str(SAMPLE_RATE), "-b", "16", "-c", "1", "-t", "wav", "-",
             "synth", seconds, "pinknoise", "vol", "0.5"],
            capture_output=True, check=True, timeout=60,
        )  # fmt: skip
        pcm, _ = read_wav(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError, EOFError):
        return None
    if len(pcm) < n:
        return None
    noise = pcm[:n].astype(np.float64)
    rms = float(np.sqrt(np.mean(noise * noise)))
    return None if rms == 0 else noise / rms


def add_noise(
    padded: Pcm, speech: Pcm, snr_db: float, seed: int, mixer: Literal["sox", "numpy"]
) -> tuple[Pcm, Literal["sox", "numpy"]]:
    """``padded`` with pink noise at ``snr_db`` below the power of the voiced frames of ``speech``."""
    first, last = voiced_frames(speech)
    e = frame_energy(speech)[first:last]
    power = float(np.mean(e)) if len(e) else 0.0
    noise = sox_pink_noise(len(padded), seed) if mixer == "sox" else None
    used: Literal["sox", "numpy"] = "sox" if noise is not None else "numpy"
    if noise is None:
        noise = numpy_pink_noise(len(padded), np.random.default_rng(seed))
    scale = np.sqrt(power / 10 ** (snr_db / 10))
    return from_float((padded.astype(np.float64) + noise * scale) / 32768.0), used


def synthesizer_for(spec: VoiceSpec, stack: VoiceStack) -> Callable[[str], Pcm]:
    """A text-to-16-kHz function speaking as ``spec``."""
    if spec.engine == "hibari":
        from kairos.voice.tts import HibariSynthesizer

        synth = stack.synthesizer if isinstance(stack.synthesizer, HibariSynthesizer) else HibariSynthesizer()
        return lambda text: synth.synthesize(text, spec.rate)
    from kairos.voice.tts import EspeakSynthesizer

    espeak = EspeakSynthesizer(voice=spec.voice, words_per_minute=round(spec.rate))
    return espeak.synthesize


def available_voices() -> tuple[VoiceSpec, ...]:
    """The voices whose engine is installed here."""
    out: list[VoiceSpec] = []
    try:
        import hibari  # noqa: F401

        out += [v for v in VOICES if v.engine == "hibari"]
    except ImportError:
        pass
    if shutil.which("espeak-ng") is not None:
        out += [v for v in VOICES if v.engine == "espeak"]
    return tuple(out)


@dataclass
class Clip:
    """An utterance's audio, padded (and noisy), with where its speech is (frame indices, clean audio)."""

    pcm: Pcm
    onset_frame: int
    end_frame: int
    mixer: str = "none"


def make_clip(
    say: Callable[[str], Pcm], text: str, noisy: bool, seed: int, mixer: Literal["sox", "numpy"] = "numpy"
) -> Clip:
    """``text`` spoken, 300 ms of silence before and 1.5 s after, pink noise at 15 dB SNR when ``noisy``."""
    speech = say(text)
    padded = np.concatenate([silence(PAD_BEFORE_MS), speech, silence(PAD_AFTER_MS)])
    first, last = voiced_frames(padded)
    used = "none"
    if noisy:
        padded, used = add_noise(padded, speech, SNR_DB, seed, mixer)
    return Clip(padded, first, last, used)
