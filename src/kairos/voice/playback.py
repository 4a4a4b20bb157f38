"""Reply audio on a clock: what has been played is what the clock says, so a barge-in knows what was heard.

A speaker (or a browser) plays audio in real time from the moment it gets it; :class:`Playback` keeps
that timeline for the blocks it was given: each starts when the previous one ends (or now, if the
speaker was idle). :meth:`Playback.pause` silences it at once and says how much of each block was
played; :meth:`Playback.resume` goes on from there (a backchannel was not a barge-in);
:meth:`Playback.cut` drops the rest. Sinks receive the audio to play (a WAV writer, a sound card,
a WebSocket) and a ``stop`` when the rest must not be played.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kairos.voice.audio import Pcm
from kairos.voice.tts import AudioBlock


class Sink(Protocol):
    """Where reply audio goes to be played."""

    def play(self, pcm: Pcm, sample_rate: int) -> None:
        """Queue ``pcm`` behind what is playing."""
        ...

    def stop(self) -> None:
        """Silence now and drop what is queued."""
        ...


@dataclass
class _Queued:
    block: AudioBlock
    start: float = 0.0  # clock time its first sample plays
    played: int = 0  # samples played before a pause (the rest plays after resume)

    @property
    def duration_s(self) -> float:
        return len(self.block.pcm) / self.block.sample_rate


@dataclass
class PlayedTimeline:
    """The played part of one reply, in order: the text that was heard and the audio it was."""

    text: list[str] = field(default_factory=list)
    audio: list[Pcm] = field(default_factory=list)


def words_heard(text: str, fraction: float) -> str:
    """The first ``fraction`` of ``text``'s words (a block cut in the middle: the words already said)."""
    words = re.findall(r"\S+\s*", text)
    return "".join(words[: int(len(words) * max(0.0, min(1.0, fraction)))]).rstrip()


class Playback:
    """The timeline of reply audio handed to a :class:`Sink`.

    Args:
        sink: plays the audio (None: only the clock, e.g. in a benchmark that writes the file itself).
        clock: seconds, monotonic (a test passes its own).
    """

    def __init__(self, sink: Sink | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.sink = sink
        self.clock = clock
        self._queue: list[_Queued] = []
        self._paused_at: float | None = None
        self.played = PlayedTimeline()
        self.history: list[PlayedTimeline] = []
        """Earlier replies, as played (``kairos voice --output`` writes them)."""

    def add(self, block: AudioBlock) -> None:
        """Play ``block`` after what is queued (at once when nothing is)."""
        now = self.clock()
        self._settle(now)
        item = _Queued(block)
        if self._paused_at is None:
            item.start = max(now, self._end())
            if self.sink is not None:
                self.sink.play(block.pcm, block.sample_rate)
        self._queue.append(item)

    def _end(self) -> float:
        return max((q.start + q.duration_s for q in self._queue), default=0.0)

    def _settle(self, now: float) -> None:
        """Move blocks that finished playing from the queue to :attr:`played`."""
        while self._queue and self._paused_at is None and self._queue[0].start + self._queue[0].duration_s <= now:
            self._record(self._queue.pop(0).block, 1.0)

    def _record(self, block: AudioBlock, fraction: float) -> None:
        n = int(len(block.pcm) * fraction)
        if n:
            self.played.audio.append(block.pcm[:n])
        if block.text:
            said = block.text if fraction >= 1.0 else words_heard(block.text, fraction)
            if said:
                self.played.text.append(said)

    @property
    def speaking(self) -> bool:
        """Whether audio is playing now (a paused reply is not)."""
        self._settle(self.clock())
        return self._paused_at is None and any(q.start <= self.clock() for q in self._queue)

    @property
    def paused(self) -> bool:
        """Whether a reply is paused (waiting to resume or to be cut)."""
        return self._paused_at is not None

    @property
    def pending(self) -> bool:
        """Whether any reply audio is queued or paused (the reply is not over)."""
        self._settle(self.clock())
        return bool(self._queue)

    def pause(self) -> None:
        """Silence now; the played position of the current block is kept for :meth:`resume` or :meth:`cut`."""
        now = self.clock()
        self._settle(now)
        if self._paused_at is not None or not self._queue:
            return
        self._paused_at = now
        head = self._queue[0]
        if head.start <= now:
            head.played = head.played + int((now - head.start) * head.block.sample_rate)
        if self.sink is not None:
            self.sink.stop()

    def resume(self) -> None:
        """Go on from where :meth:`pause` stopped."""
        if self._paused_at is None:
            return
        self._paused_at = None
        now = self.clock()
        start = now
        for i, q in enumerate(self._queue):
            rest = q.block.pcm[q.played :] if i == 0 else q.block.pcm
            # the head's start moves back by what it had played, so its timeline stays one block
            q.start = start - (q.played / q.block.sample_rate if i == 0 else 0.0)
            start += len(rest) / q.block.sample_rate
            if self.sink is not None and len(rest):
                self.sink.play(rest, q.block.sample_rate)

    def cut(self) -> str:
        """Stop for good: the rest of the reply is dropped. Returns the reply's text that was heard."""
        now = self.clock()
        self._settle(now)
        if self._paused_at is None and self._queue:
            self.pause()
        if self._queue:
            head = self._queue[0]
            self._record(head.block, head.played / max(1, len(head.block.pcm)))
        self._queue.clear()
        self._paused_at = None
        return self.heard()

    def heard(self) -> str:
        """The text played so far in this reply."""
        self._settle(self.clock())
        return " ".join(t.strip() for t in self.played.text if t.strip())

    def new_reply(self) -> PlayedTimeline:
        """Start a new reply's record; returns the finished one."""
        self._settle(self.clock())
        done, self.played = self.played, PlayedTimeline()
        if done.audio or done.text:
            self.history.append(done)
        return done
