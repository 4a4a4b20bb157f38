"""The listening half of the cascade: endpointer and streaming ASR wired together on one frame stream.

Frames go to the endpointer; once speech starts they also go to the streaming transcriber. At each VAD
pause an interim transcript is taken, and that is the text the endpointer's dictation hold reads, so a
pause after "my number is five five five" keeps the floor with the user. When nothing but silence
follows the pause, that transcript is the final one: it already read all of the turn's speech, and
running Whisper again on the same words (while the reply is being prefilled on the same 2 cores) would
only delay the answer.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

from kairos.voice.asr import StreamingTranscriber, Transcriber
from kairos.voice.audio import FRAME_MS, Pcm
from kairos.voice.vad import Endpointer, SpeechConfirmer, SpeechGate, looks_unfinished

PREROLL_MS = 150
"""Audio kept from before the VAD's onset: the gate fires inside the first phoneme, and Whisper given the
segment from there dropped or mangled first words ("Set a timer" -> "at a timer"; WER 0.28 -> 0.13 with it)."""


@dataclass(frozen=True)
class Heard:
    """What the listener heard: speech start, an interim or final transcript, or speech resumed after a pause.

    ``resume``: the interim taken at the pause is out of date.


    ``at_ms`` is the audio time (from the first frame) at which it was decided.
    """

    kind: Literal["speech_start", "interim", "resume", "final"]
    at_ms: int
    text: str = ""
    start_ms: int = 0
    """Where the turn's speech began (audio time)."""
    end_ms: int = 0
    """End of the last voiced frame, for an interim taken at a VAD pause and for the final (0 for an interim
    taken on the interval while the user speaks): ``at_ms - end_ms`` is the silence waited."""


class Listener:
    """Frames in, speech start / interim / final transcripts out.

    Args:
        transcriber: the ASR engine.
        gate: the endpointer's cheap test (webrtcvad).
        confirmer: the endpointer's accurate test (Silero), or None.
        silence_ms: silence that ends a turn.
        hold_ms: silence that ends a turn while the interim transcript looks like dictation.
        interval_ms: audio between interim transcripts.
    """

    def __init__(
        self,
        transcriber: Transcriber,
        gate: SpeechGate,
        confirmer: SpeechConfirmer | None = None,
        *,
        silence_ms: int = 600,
        hold_ms: int = 2000,
        interval_ms: int = 1000,
    ) -> None:
        self.stream = StreamingTranscriber(transcriber, interval_ms)
        self.endpointer = Endpointer(
            gate,
            confirmer,
            silence_ms=silence_ms,
            hold_ms=hold_ms,
            unfinished=lambda: looks_unfinished(self.stream.interim),
        )
        # the frames the endpointer saw before confirming a start belong to the segment (its start_ms)
        self._recent: deque[Pcm] = deque(maxlen=max(1, 1000 // FRAME_MS))
        self._at_pause: str | None = None  # the transcript taken at a pause that no speech has followed yet

    def feed(self, frame: Pcm) -> list[Heard]:
        """What this 30 ms frame completed."""
        heard: list[Heard] = []
        if self.endpointer.in_speech:  # no interval pass during a pause: the pause's transcript is current
            interim = self.stream.feed(frame, passes=self._at_pause is None)
            if interim is not None:
                heard.append(Heard("interim", 0, interim))
        self._recent.append(frame)
        for event in self.endpointer.feed(frame):
            if event.kind == "speech_start":
                frames_back = (event.at_ms - event.segment_start_ms + PREROLL_MS) // FRAME_MS
                self.stream.start(np.concatenate(list(self._recent)[-frames_back:]))
                self._at_pause = None
                heard.append(Heard("speech_start", event.at_ms, start_ms=event.segment_start_ms))
            elif event.kind == "pause":
                text = self._at_pause = self.stream.refresh()
                heard.append(Heard("interim", event.at_ms, text, event.segment_start_ms, event.speech_end_ms or 0))
            elif event.kind == "resume":
                self._at_pause = None
                heard.append(Heard("resume", event.at_ms))
            else:
                text = self.stream.finish(reuse=self._at_pause)
                self._at_pause = None
                heard.append(Heard("final", event.at_ms, text, event.segment_start_ms, event.speech_end_ms or 0))
        at = self.endpointer.fed_ms
        return [dataclasses.replace(h, at_ms=h.at_ms or at) for h in heard]
