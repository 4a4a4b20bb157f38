"""The reply's text stream made speakable: control tokens out, speakable chunks as early as possible.

Control-token syntax: an upper-case name in square brackets, with an optional ``:value`` —
``[THINKING]``, ``[PAUSE:500ms]``, ``[SPEED:0.8x]``, ``[EMO:happy]``. Tokens become directives for the
synthesiser (pause, rate, style); they are never spoken and never shown. A token of that shape with an
unknown name is dropped; bracketed text of any other shape (``[1]``, ``[see note]``) is ordinary text.
Tokens may arrive split across deltas, so the parser holds back a possible token until it closes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

_TOKEN = re.compile(r"\[([A-Z][A-Z_]*)(?::([^\]\s]{1,24}))?\]")
_MAX_TOKEN = 40  # longer than any token: a '[' held this long is text
_TOKEN_PREFIX = re.compile(r"\[(?:[A-Z][A-Z_]*(?::[^\]\s]{0,24})?)?")


@dataclass(frozen=True)
class Pause:
    """Silence of ``ms`` milliseconds (``[THINKING]``, ``[PAUSE:500ms]``): a human-sounding hesitation."""

    ms: int


@dataclass(frozen=True)
class Rate:
    """Speaking rate for what follows (``[SPEED:0.8x]``), 1.0 is normal, clamped to 0.5-2.0."""

    factor: float


@dataclass(frozen=True)
class Style:
    """Voice style or emotion for what follows (``[EMO:happy]``); the synthesiser maps it as it can."""

    name: str


Directive: TypeAlias = Pause | Rate | Style
SpeechItem: TypeAlias = str | Directive

THINKING_PAUSE_MS = 600


def _directive(name: str, value: str | None) -> Directive | None:
    try:
        if name == "THINKING":
            return Pause(THINKING_PAUSE_MS)
        if name == "PAUSE" and value:
            ms = float(value.removesuffix("ms").removesuffix("s")) * (1 if value.endswith("ms") else 1000)
            return Pause(int(min(max(ms, 0), 5000)))
        if name == "SPEED" and value:
            return Rate(min(max(float(value.rstrip("xX")), 0.5), 2.0))
        if name in ("EMO", "STYLE") and value:
            return Style(value.lower())
    except ValueError:
        return None
    return None  # unknown name: dropped, not spoken


def strip_control_tokens(text: str) -> str:
    """The text without control tokens (what is shown and stored)."""
    return _TOKEN.sub("", text)


class ControlTokenParser:
    """Splits a stream of text deltas into text and directives, in order."""

    def __init__(self) -> None:
        self._held = ""
        self.dropped: list[str] = []  # unknown tokens seen (for logs and tests)

    def feed(self, delta: str) -> list[SpeechItem]:
        """Items complete so far; a possible token still open at the end is held back."""
        buf = self._held + delta
        self._held = ""
        items: list[SpeechItem] = []
        text = ""
        i = 0
        while i < len(buf):
            j = buf.find("[", i)
            if j < 0:
                text += buf[i:]
                break
            text += buf[i:j]
            m = _TOKEN.match(buf, j)
            if m:
                if text:
                    items.append(text)
                    text = ""
                d = _directive(m.group(1), m.group(2))
                if d is None:
                    self.dropped.append(m.group(0))
                else:
                    items.append(d)
                i = m.end()
                continue
            rest = buf[j:]
            prefix = _TOKEN_PREFIX.match(rest)
            if prefix and prefix.end() == len(rest) and len(rest) < _MAX_TOKEN:
                self._held = rest  # may still become a token
                break
            text += "["
            i = j + 1
        if text:
            items.append(text)
        return items

    def flush(self) -> list[SpeechItem]:
        """End of stream: an unclosed ``[`` is text after all."""
        held, self._held = self._held, ""
        return [held] if held else []


_ABBREVIATIONS = ("mr.", "mrs.", "ms.", "dr.", "st.", "e.g.", "i.e.", "etc.", "vs.")
_CLAUSE_END = ",;:—"
_SENTENCE_END = ".!?"


class SpeakableChunker:
    """Cuts streamed text into chunks a synthesiser can speak.

    The first chunk goes out as soon as a clause ends (``,;:`` or a sentence end) or ``first_words``
    words have arrived, so audio can start while the model is still writing; later chunks are whole
    sentences (or ``max_words`` words at a clause end, for run-on text). Punctuation counts as an end
    only once the next character is whitespace, so "3.5" and "e.g." are not cut.
    """

    def __init__(self, first_words: int = 8, max_words: int = 40) -> None:
        self.first_words = first_words
        self.max_words = max_words
        self._buf = ""
        self._first_sent = False

    def _cut(self) -> int | None:
        """Index just past where the next chunk ends in the buffer, or None to keep waiting."""
        words = 0
        in_word = False
        for i, ch in enumerate(self._buf):
            if ch.isspace():
                in_word = False
                continue
            if not in_word:
                words += 1
                in_word = True
            nxt = self._buf[i + 1] if i + 1 < len(self._buf) else None
            if nxt is None or not nxt.isspace():
                continue
            word = self._buf[: i + 1].rsplit(None, 1)[-1].lower()
            sentence_end = ch in _SENTENCE_END and word not in _ABBREVIATIONS
            clause_end = ch in _CLAUSE_END
            if sentence_end or (clause_end and (not self._first_sent or words >= self.max_words)):
                return i + 1
            if not self._first_sent and words >= self.first_words:
                return i + 1
            if words >= self.max_words * 2:  # no punctuation at all: do not hold text forever
                return i + 1
        return None

    def feed(self, text: str) -> list[str]:
        """Chunks completed by ``text``."""
        self._buf += text
        out: list[str] = []
        while (cut := self._cut()) is not None:
            chunk, self._buf = self._buf[:cut].strip(), self._buf[cut:].lstrip()
            if chunk:
                out.append(" ".join(chunk.split()))
                self._first_sent = True
        return out

    def flush(self) -> list[str]:
        """What is left, at the end of the text or before a directive."""
        chunk, self._buf = self._buf.strip(), ""
        if chunk:
            self._first_sent = True
            return [" ".join(chunk.split())]
        return []


class SpeechTextStream:
    """Reply deltas in, speakable chunks and directives out, in spoken order.

    A directive flushes the text before it, so "Let me see [THINKING] right" pauses after "Let me see".
    """

    def __init__(self, first_words: int = 8, max_words: int = 40) -> None:
        self._tokens = ControlTokenParser()
        self._chunker = SpeakableChunker(first_words, max_words)

    def _route(self, items: list[SpeechItem]) -> list[SpeechItem]:
        out: list[SpeechItem] = []
        for item in items:
            if isinstance(item, str):
                out.extend(self._chunker.feed(item))
            else:
                out.extend(self._chunker.flush())
                out.append(item)
        return out

    def feed(self, delta: str) -> list[SpeechItem]:
        """Items ready after ``delta``."""
        return self._route(self._tokens.feed(delta))

    def flush(self) -> list[SpeechItem]:
        """End of the reply: everything still held."""
        return [*self._route(self._tokens.flush()), *self._chunker.flush()]

    @property
    def dropped(self) -> list[str]:
        """Unknown control tokens seen and dropped."""
        return self._tokens.dropped
