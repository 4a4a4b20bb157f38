"""16 kHz mono int16 PCM: the one format every voice stage speaks, plus WAV I/O and resampling."""

from __future__ import annotations

import io
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

SAMPLE_RATE = 16_000
FRAME_MS = 30
FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000  # 480: webrtcvad accepts 10, 20 or 30 ms frames

Pcm: TypeAlias = npt.NDArray[np.int16]


def to_float(pcm: Pcm) -> npt.NDArray[np.float32]:
    """Int16 samples as float32 in [-1, 1] (what Whisper and Silero read)."""
    return (pcm.astype(np.float32) / 32768.0).astype(np.float32)


def from_float(samples: npt.NDArray[np.floating]) -> Pcm:
    """Float samples in [-1, 1] as int16, clipped rather than wrapped."""
    return np.asarray(np.clip(np.round(samples * 32767.0), -32768, 32767), dtype=np.int16)


def duration_s(pcm: Pcm, rate: int = SAMPLE_RATE) -> float:
    """Seconds of audio in ``pcm``."""
    return len(pcm) / rate


def silence(ms: int, rate: int = SAMPLE_RATE) -> Pcm:
    """Digital silence of ``ms`` milliseconds."""
    return np.zeros(rate * ms // 1000, dtype=np.int16)


def frames(pcm: Pcm, frame_samples: int = FRAME_SAMPLES) -> Iterator[Pcm]:
    """Consecutive whole frames of ``pcm`` (a trailing partial frame is zero-padded)."""
    for start in range(0, len(pcm), frame_samples):
        frame = pcm[start : start + frame_samples]
        if len(frame) < frame_samples:
            frame = np.concatenate([frame, np.zeros(frame_samples - len(frame), dtype=np.int16)])
        yield frame


def resample(pcm: Pcm, src_rate: int, dst_rate: int = SAMPLE_RATE, half_width: int = 16) -> Pcm:
    """Band-limited resampling by windowed-sinc interpolation (Hann window, ``half_width`` taps a side).

    Why not linear: linear interpolation aliases 24 kHz TTS audio into the speech band, and Whisper
    heard "five" as "time" on it. Each output sample is a low-passed (cutoff at the lower Nyquist)
    weighted sum of the input samples around its position, computed in blocks to bound memory;
    works for any ratio (24k and 22.05k to 16k included).
    """
    if src_rate == dst_rate or len(pcm) == 0:
        return pcm.copy()
    x = pcm.astype(np.float64)
    cutoff = min(1.0, dst_rate / src_rate)
    width = int(np.ceil(half_width / cutoff))
    n_out = int(len(x) * dst_rate // src_rate)
    offsets = np.arange(-width + 1, width + 1)
    out = np.empty(n_out, dtype=np.float64)
    padded = np.concatenate([np.zeros(width), x, np.zeros(width + 1)])
    block = 8192
    for start in range(0, n_out, block):
        pos = np.arange(start, min(n_out, start + block)) * (src_rate / dst_rate)
        base = np.floor(pos).astype(np.int64)
        idx = base[:, None] + offsets[None, :]
        dist = pos[:, None] - idx
        window = 0.5 + 0.5 * np.cos(np.pi * np.clip(dist / width, -1.0, 1.0))
        weights = cutoff * np.sinc(cutoff * dist) * window
        out[start : start + len(pos)] = np.sum(padded[idx + width] * weights, axis=1)
    return np.asarray(np.clip(np.round(out), -32768, 32767), dtype=np.int16)


def _read(wav: wave.Wave_read) -> tuple[Pcm, int]:
    if wav.getsampwidth() != 2:
        raise ValueError(f"only 16-bit WAV is supported, not {8 * wav.getsampwidth()}-bit")
    data = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    channels = wav.getnchannels()
    if channels > 1:  # downmix
        data = data.reshape(-1, channels).mean(axis=1).round()
    return np.asarray(data, dtype=np.int16), wav.getframerate()


def read_wav(path: Path | str | bytes) -> tuple[Pcm, int]:
    """A 16-bit WAV file (or its bytes) as mono int16 samples and the file's own rate."""
    source: io.BytesIO | str = io.BytesIO(path) if isinstance(path, bytes) else str(path)
    with wave.open(source, "rb") as wav:
        return _read(wav)


def load_wav(path: Path | str | bytes, rate: int = SAMPLE_RATE) -> Pcm:
    """A WAV file as mono int16 at ``rate`` (resampled when the file has another rate)."""
    pcm, file_rate = read_wav(path)
    return resample(pcm, file_rate, rate)


def write_wav(path: Path | str, pcm: Pcm, rate: int = SAMPLE_RATE) -> None:
    """Write mono int16 samples as a WAV file."""
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(np.asarray(pcm, dtype="<i2").tobytes())
