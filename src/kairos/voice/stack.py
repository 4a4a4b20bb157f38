"""The default engines of a voice session, built once per process and shared by its sessions.

Loading Whisper, Silero and hibari takes seconds and hundreds of MB; a server with several voice
sessions loads them once. A :class:`~kairos.voice.listen.Listener` holds per-session state (the
endpointer, the growing segment), so each session gets its own, on the shared engines.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from kairos.voice.asr import WhisperTranscriber
from kairos.voice.listen import Listener
from kairos.voice.tts import Synthesizer, default_synthesizer
from kairos.voice.vad import SileroConfirmer, WebRtcGate


@dataclass(frozen=True)
class VoiceStack:
    """Shared engines: the ASR model and the synthesiser."""

    transcriber: WhisperTranscriber
    synthesizer: Synthesizer

    def listener(self, *, silence_ms: int = 600, hold_ms: int = 2000, interval_ms: int = 1000) -> Listener:
        """A new listener (its own endpointer and segment) on the shared ASR model."""
        return Listener(
            self.transcriber, WebRtcGate(), SileroConfirmer(), silence_ms=silence_ms, hold_ms=hold_ms,
            interval_ms=interval_ms,
        )  # fmt: skip


@functools.cache
def voice_stack() -> VoiceStack:
    """The process's engines (loaded on first use).

    Raises:
        ConfigError: the ``voice`` extra (or every synthesiser) is missing, with how to install it.
    """
    return VoiceStack(WhisperTranscriber(), default_synthesizer())
