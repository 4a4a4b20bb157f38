"""Chunkers: fixed-size with overlap, heading/paragraph-aware, and one chunk per conversation turn.

Token counts are a cheap estimate (about four characters per token, never fewer than the words),
good enough to size chunks for an embedder with a 512-token window; no tokenizer is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kairos.knowledge.records import ChunkHit
from kairos.knowledge.store import ChunkIn

MIN_TOKENS, MAX_TOKENS = 256, 1024
_HEADING = re.compile(r"^(#{1,6})\s+(.*\S)\s*$")
_WORDS = re.compile(r"\S+")


def estimate_tokens(text: str) -> int:
    """About four characters per token, at least one per word."""
    return max(len(text) // 4, len(_WORDS.findall(text)))


@dataclass(frozen=True, slots=True)
class ChunkSpec:
    """How to chunk: ``fixed`` (size + overlap) or ``structure`` (headings and paragraphs, packed up to size).

    Attributes:
        strategy: ``fixed`` or ``structure``.
        size: target tokens per chunk, 256–1024.
        overlap: share of ``size`` repeated at the start of the next fixed chunk, 0.10–0.20.
    """

    strategy: str = "structure"
    size: int = 512
    overlap: float = 0.15

    def __post_init__(self) -> None:
        if self.strategy not in ("fixed", "structure"):
            raise ValueError(f"chunk strategy {self.strategy!r}: use 'fixed' or 'structure'")
        if not MIN_TOKENS <= self.size <= MAX_TOKENS:
            raise ValueError(f"chunk size {self.size} tokens: use {MIN_TOKENS}–{MAX_TOKENS}")
        if not 0.10 <= self.overlap <= 0.20:
            raise ValueError(f"chunk overlap {self.overlap}: use 0.10–0.20 of the size")


DEFAULT_CHUNKING = ChunkSpec()
"""Structure-aware, 512 tokens, 15 % overlap for split paragraphs."""


def fixed_chunks(text: str, size: int = 512, overlap: float = 0.15) -> list[ChunkIn]:
    """Windows of about ``size`` tokens over the words of ``text``, each repeating ``overlap`` of the previous one.

    Windows are cut on word boundaries; the character offset of each window is kept in ``meta``.
    """
    longest = size * 4  # characters: a "word" longer than a whole chunk (base64, a minified line) is cut
    spans = [
        (a, min(a + longest, b)) for m in _WORDS.finditer(text) for a, b in [m.span()] for a in range(a, b, longest)
    ]
    if not spans:
        return []
    avg = max(1.0, estimate_tokens(text) / len(spans))  # tokens per word in this text
    words = max(1, int(size / avg))
    step = max(1, words - int(words * overlap))
    out: list[ChunkIn] = []
    for start in range(0, len(spans), step):
        end = min(len(spans), start + words)
        a, b = spans[start][0], spans[end - 1][1]
        out.append(ChunkIn(text[a:b], len(out), {"start": a, "end": b}))
        if end == len(spans):
            break
    return out


@dataclass(slots=True)
class _Block:
    path: list[str]
    text: str
    start: int
    parts: list[str] = field(default_factory=list)


def structure_chunks(text: str, size: int = 512, overlap: float = 0.15) -> list[ChunkIn]:
    """Chunks that follow Markdown headings and paragraphs, packed up to ``size`` tokens.

    Paragraphs of one section are joined while they fit; a chunk never spans two sections, and it
    starts with its heading path (``# A > ## B``) so it reads on its own. A paragraph larger than
    ``size`` is split by :func:`fixed_chunks`.
    """
    sections: list[_Block] = []
    path: list[str] = []
    offset = 0
    current = _Block([], "", 0)
    for para in re.split(r"\n\s*\n", text):
        at = text.find(para, offset)
        offset = at + len(para) if at >= 0 else offset
        stripped = para.strip()
        if not stripped:
            continue
        first, _, rest = stripped.partition("\n")
        m = _HEADING.match(first)
        if m:
            level = len(m.group(1))
            path = [*path[: level - 1], f"{m.group(1)} {m.group(2)}"]
            if current.parts:
                sections.append(current)
            current = _Block(list(path), "", max(at, 0))
            stripped = rest.strip()
            if not stripped:
                continue
        current.parts.append(stripped)
    if current.parts:
        sections.append(current)
    out: list[ChunkIn] = []
    for section in sections:
        head = " > ".join(section.path)
        budget = size - estimate_tokens(head)
        pack: list[str] = []

        def emit(body: str, section: _Block = section, head: str = head) -> None:
            body_text = f"{head}\n\n{body}" if head else body
            out.append(ChunkIn(body_text, len(out), {"section": head, "start": section.start}))

        for part in section.parts:
            if estimate_tokens(part) > budget:
                if pack:
                    emit("\n\n".join(pack))
                    pack = []
                for piece in fixed_chunks(part, size=max(MIN_TOKENS, budget), overlap=overlap):
                    emit(piece.text)
                continue
            if pack and estimate_tokens("\n\n".join([*pack, part])) > budget:
                emit("\n\n".join(pack))
                pack = []
            pack.append(part)
        if pack:
            emit("\n\n".join(pack))
    return out


@dataclass(frozen=True, slots=True)
class Turn:
    """One conversation turn: who said it, what, when (unix seconds, optional) and its id."""

    speaker: str
    text: str
    turn_id: str = ""
    timestamp: float | None = None
    when: str = ""
    """The date as written in the source (kept in the chunk's text, so BM25 and dense can match it)."""
    meta: dict[str, Any] = field(default_factory=dict)


def conversation_chunks(turns: Sequence[Turn], context_turns: int = 0, first_position: int = 0) -> list[ChunkIn]:
    """One chunk per turn, keeping its id, speaker and date, with ``context_turns`` earlier turns of its session.

    A reply is found through what it answers ("Which breed?" / "A greyhound"), so the turns before
    it in the same session come first in its text. The turn itself is the dated line, last;
    ``meta["context_ids"]`` lists the turns added before it.
    """
    out: list[ChunkIn] = []
    for i, turn in enumerate(turns):
        when = f"[{turn.when}] " if turn.when else ""
        before = [
            t for t in turns[max(0, i - context_turns) : i] if t.when == turn.when and t.timestamp == turn.timestamp
        ]
        meta: dict[str, Any] = {"turn_id": turn.turn_id, "speaker": turn.speaker, **turn.meta}
        if before:
            meta["context_ids"] = [t.turn_id for t in before]
        own = f"{when}{turn.speaker}: {turn.text}"
        meta["words"] = len(own.split())  # a short turn is rarely the evidence (kairos.knowledge.signals)
        lines = [f"{t.speaker}: {t.text}" for t in before] + [own]
        out.append(ChunkIn("\n".join(lines), first_position + len(out), meta, valid_from=turn.timestamp))
    return out


def own_text(chunk: ChunkHit) -> str:
    """A conversation chunk's own dated turn line(s), without the earlier turns indexed with it."""
    if chunk.meta.get("context_ids") and (cut := chunk.text.rfind("\n[")) >= 0:
        return chunk.text[cut + 1 :]
    return chunk.text


def chunk_text(text: str, kind: str, spec: ChunkSpec = DEFAULT_CHUNKING) -> list[ChunkIn]:
    """Chunk a document's text by ``spec`` (``structure`` suits Markdown and prose; ``fixed`` anything)."""
    if spec.strategy == "fixed":
        return fixed_chunks(text, spec.size, spec.overlap)
    return structure_chunks(text, spec.size, spec.overlap)
