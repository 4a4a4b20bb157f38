from pathlib import Path

import numpy as np

from kairos.voice.audio import FRAME_SAMPLES, duration_s, frames, load_wav, resample, silence, write_wav


def _tone(freq: float, rate: int, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return np.asarray(np.round(8000 * np.sin(2 * np.pi * freq * t)), dtype=np.int16)


def _peak_hz(pcm: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(pcm.astype(np.float64)))
    return float(np.fft.rfftfreq(len(pcm), 1 / rate)[int(np.argmax(spectrum))])


def test_resampling_keeps_a_tone_and_the_length() -> None:
    for src in (24_000, 22_050, 48_000):
        out = resample(_tone(440, src), src, 16_000)
        assert abs(len(out) - 16_000) <= 1
        assert abs(_peak_hz(out, 16_000) - 440) < 2


def test_resampling_removes_what_the_lower_rate_cannot_hold() -> None:
    out = resample(_tone(10_000, 24_000), 24_000, 16_000)  # above 8 kHz: would alias to 6 kHz
    assert np.abs(out[200:-200].astype(np.float64)).max() < 800  # 8000 in: at least 20 dB down (edges aside)


def test_wav_round_trip_and_frames(tmp_path: Path) -> None:
    pcm = np.concatenate([_tone(300, 16_000, 0.5), silence(100)])
    write_wav(tmp_path / "a.wav", pcm)
    back = load_wav(tmp_path / "a.wav")
    assert np.array_equal(back, pcm)
    assert duration_s(back) == 0.6
    chunks = list(frames(back))
    assert all(len(f) == FRAME_SAMPLES for f in chunks)
    assert len(chunks) == 20
