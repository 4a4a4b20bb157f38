"""What a memory may rest on: what the user said in the session, or a statement the user confirmed.

A memory is a fact about the user, so it must come from the user (issue 24): the assistant's own
answers and guesses, tool output, and the memory's own output fed back to the model (the
``<user_memory>`` block, ``memory_search`` results) are never facts about the user. A statement of
the assistant or of a tool counts only when the user's next message confirms it ("Yes, that's
right"), and then the memory is marked as confirmed, not as the user's words.

:func:`support` is deterministic, so a small extractor that copies the assistant's reply or the
memory it was shown cannot get past it. "Supported" means, per sentence of the candidate:

* its content words overlap the user's own statements (questions do not count: "is a snack bar
  with nuts OK?" states nothing) by at least :data:`ANCHOR` of its words,
* at most :data:`BORROWED` of its words come from the other side of the conversation and not from
  the user (a paraphrase of the assistant's reply is the assistant's claim),
* every number in it appears in what supports it (an account number, an amount, a date), and
* a negation in it ("is not OK") is backed by a negation in the user's words.

"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kairos.models.types import Message
from kairos.retrieval.lexical import tokens

ANCHOR = 0.3
"""Share of a sentence's content words that the user's statements must contain."""
BORROWED = 0.34
"""Largest share of a sentence's content words taken from the assistant's or tools' text and not the user's."""

MEMORY_TOOLS = frozenset({"memory_search", "kb_search", "kb_get_document", "kb_list"})
"""Tools whose results are recalled memory or documents: never a fact about the user, never confirmed."""

_STAMP = re.compile(r"^\s*\[\d{4}-\d{2}-\d{2}[^\]]{0,40}\]\s*")
"""The harness's arrival time in front of a message ("[2026-12-03 08:47:37] ...")."""
_CLAUSE = re.compile(r"(?<=[.!?;])\s+|\n+|\s+[—–]\s+|\s-\s")
_NEGATION = frozenset({"not", "no", "never", "nor", "none", "nothing", "cannot", "without"})
_NOT = re.compile(r"n't\b|\bnot\b|\bno\b|\bnever\b|\bnone\b|\bnothing\b|\bcannot\b|\bwithout\b", re.IGNORECASE)
_EXTRA_STOP = frozenset({
    "user", "users", "their", "they", "them", "theirs", "he", "she", "his", "her", "hers", "him", "am", "been",
    "being", "im", "ive", "id", "ll", "s", "t", "re", "ve", "d", "m", "we", "our", "us", "its", "also", "about",
    "into", "just", "so", "very", "had", "did", "said", "says", "told", "mentioned", "stated", "currently",
})  # fmt: skip
_AFFIRM = re.compile(
    r"^\W*(?:yes|yeah|yep|yup|correct|exactly|right|confirmed?|i confirm|that'?s (?:right|correct|it)|that is "
    r"(?:right|correct)|sounds (?:right|correct)|(?:it'?s |that'?s )?all (?:right|correct)|please do|go ahead|"
    r"do it|book it)\b",
    re.IGNORECASE,
)
"""A reply that confirms what was just said. Not "ok", "thanks" or "great": those acknowledge, they do not confirm."""
_MONTHS = {m: str(i) for i, m in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november",
     "december"), 1)}  # fmt: skip


def _month(name: str) -> str:
    """A month by name ("March", "Mar. 5", "mar 5"); "may" alone is a verb, so only "May 5" counts."""
    if name == "may":
        return r"\bmay\.? ?\d"
    return rf"\b(?:{name}|{name[:3]}\.)(?=\W|$)|\b{name[:3]}\.? ?\d"


_NAME = re.compile(r"(?<=[\w,)] )([A-Z][\w-]*[a-z][\w-]*)")
"""A capitalised word that does not start a sentence (a name, a place, a product)."""
_COUNTS = {w: str(i) for i, w in enumerate(
    ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"), 1
)}  # fmt: skip

Source = Literal["user", "confirmed"]


@dataclass(frozen=True, slots=True)
class Support:
    """Why a candidate memory may be stored: whose words it rests on and which messages."""

    source: Source
    """``user``: the user said it; ``confirmed``: the assistant or a tool said it and the user confirmed it."""
    messages: tuple[int, ...]
    """The session's messages it rests on (for a confirmed one: the statement, then the confirmation)."""
    note: str = ""
    """Who made a confirmed statement ("assistant", or the tool's name)."""


@dataclass(frozen=True, slots=True)
class _Text:
    words: frozenset[str]
    numbers: frozenset[str]
    negated: bool
    names: frozenset[str] = frozenset()
    """Capitalised words inside a sentence (a project, a person, a city): like numbers, they must be backed."""


def plain(message: Message) -> str:
    """A message's text without the harness's arrival stamp."""
    return _STAMP.sub("", message.content).strip()


def clauses(text: str) -> list[str]:
    """``text`` cut into sentences and clauses (notes are lines joined by "; ")."""
    return [c.strip() for c in _CLAUSE.split(text) if c and c.strip(" .;,")]


def statements(text: str) -> str:
    """``text`` without its questions: what it states."""
    return " ".join(c for c in clauses(text) if not c.rstrip().endswith("?"))


def _numbers(text: str) -> set[str]:
    low = text.lower()
    found = {n.lstrip("0") or "0" for n in re.findall(r"\d+", low.replace(",", ""))}
    found |= {num for name, num in _MONTHS.items() if re.search(_month(name), low)}
    found |= {num for word, num in _COUNTS.items() if re.search(rf"\b{word}\b", low)}
    return found


def _analyse(text: str) -> _Text:
    words = frozenset(w for w in tokens(text) if w not in _EXTRA_STOP and w not in _NEGATION and not w.isdigit())
    names = {w for m in _NAME.finditer(text) for w in tokens(m.group(1))} & words
    return _Text(words, frozenset(_numbers(text)), bool(_NOT.search(text)), frozenset(names))


def is_memory_output(message: Message) -> bool:
    """A message of the memory itself (the cards block, a recall tool's result): never a source."""
    if message.role == "tool":
        return (message.name or "") in MEMORY_TOOLS
    return (
        message.role == "user"
        and not message.from_user
        and message.origin is not None
        and (message.origin.kind == "harness")
    )


def _sentence_ok(sentence: _Text, backing: _Text, other: frozenset[str]) -> bool:
    if not sentence.words:
        return bool(sentence.numbers) and sentence.numbers <= backing.numbers
    anchor = len(sentence.words & backing.words) / len(sentence.words)
    borrowed = len((sentence.words - backing.words) & other) / len(sentence.words)
    return (
        anchor >= ANCHOR
        and borrowed <= BORROWED
        and sentence.numbers <= backing.numbers
        and sentence.names <= backing.words
        and (backing.negated or not sentence.negated)
    )


def _confirmations(messages: Sequence[Message]) -> list[tuple[tuple[int, ...], int]]:
    """(statements, confirming user message) pairs.

    The statements are what the assistant and tools said since the user's last message; they count
    when the user's next message affirms them.
    """
    out: list[tuple[tuple[int, ...], int]] = []
    last_user = -1
    for i, m in enumerate(messages):
        if not m.from_user:
            continue
        if _AFFIRM.match(plain(m)):
            stated = tuple(
                j
                for j in range(last_user + 1, i)
                if messages[j].role in ("assistant", "tool")
                and not is_memory_output(messages[j])
                and plain(messages[j])
            )
            if stated:
                out.append((stated, i))
        last_user = i
    return out


def support(candidate: str, messages: Sequence[Message], *, date_numbers: frozenset[str] = frozenset()) -> (
    Support | None
):  # fmt: skip
    """Whether ``candidate`` may be stored as a memory of this session, and on what (None: it may not).

    ``date_numbers``: numbers the candidate may carry besides the conversation's (the session's date,
    which notes are headed with).
    """
    sentences = [_analyse(s) for s in clauses(candidate)]
    sentences = [s for s in sentences if s.words or s.numbers]
    if not sentences:
        return None
    said = [(i, _analyse(statements(plain(m)))) for i, m in enumerate(messages) if m.from_user]
    user = _merge([t for _, t in said], date_numbers)
    others = [(i, _analyse(plain(m))) for i, m in enumerate(messages) if not m.from_user and not is_memory_output(m)]
    other_words = frozenset().union(*(t.words for _, t in others)) if others else frozenset()
    if all(_sentence_ok(s, user, other_words) for s in sentences):
        words = frozenset().union(*(s.words for s in sentences))
        numbers = frozenset().union(*(s.numbers for s in sentences))
        cited = tuple(i for i, t in said if t.words & words or (t.numbers & numbers))
        return Support("user", cited or tuple(i for i, _ in said[:1]))
    texts = dict(others)
    for stated, confirming in _confirmations(messages):
        backing = _merge([user, *(texts[j] for j in stated)], date_numbers)
        rest = frozenset().union(*(t.words for i, t in others if i not in stated), frozenset())
        if all(_sentence_ok(s, backing, rest) for s in sentences):
            who = {"assistant" if messages[j].role == "assistant" else (messages[j].name or "tool") for j in stated}
            return Support("confirmed", (*stated, confirming), ", ".join(sorted(who)))
    return None


def _merge(texts: Sequence[_Text], extra_numbers: frozenset[str] = frozenset()) -> _Text:
    return _Text(
        frozenset().union(*(t.words for t in texts)) if texts else frozenset(),
        frozenset().union(extra_numbers, *(t.numbers for t in texts)),
        any(t.negated for t in texts),
    )


__all__ = [
    "ANCHOR", "BORROWED", "MEMORY_TOOLS", "Support", "clauses", "is_memory_output", "plain", "statements", "support",
]  # fmt: skip
