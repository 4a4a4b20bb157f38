"""What a memory may rest on: what the user said in the session, or a statement the user confirmed.

A memory is a fact about the user, so it must come from the user (issue 24): the assistant's own
answers and guesses, tool output, and the memory's own output fed back to the model (the
``<user_memory>`` block, ``memory_search`` results) are never facts about the user. A statement of
the assistant or of a tool counts only when the user's next message confirms it ("Yes, that's
right"), and then the memory is marked as confirmed, not as the user's words.

:func:`support` is deterministic, so a small extractor that copies the assistant's reply or the
memory it was shown cannot get past it. "Supported" means, per sentence of the candidate:

* at least :data:`ANCHOR` of its words and numbers come from ONE user message, in what it states
  (questions do not count: "is a snack bar with nuts OK?" states nothing); a long session's words
  taken together would back almost anything,
* at most :data:`BORROWED` of them come from the other side of the conversation and not from the
  user (a paraphrase of the assistant's reply is the assistant's claim),
* every number and name in it was said by the user (an account number, an amount, a project), and
* a negation in it ("is not OK") is backed by a negation in the supporting message.

Questions, exclamations and pleasantries are no facts. It was tuned on a labelled set of notes of the
bundled model (``benchmarks/kairos_bench/data/memory_support_labelled.jsonl``);
``scripts/memory_support_study.py`` compares it there with exact spans and the model's own judgement.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kairos.memory.safety import topics_of
from kairos.models.types import Message
from kairos.retrieval.text import STOPWORDS, tokens

ANCHOR = 0.3
"""Share of a sentence's content words that the user's statements must contain."""
BORROWED = 0.34
"""Largest share of a sentence's content words taken from the assistant's or tools' text and not the user's."""

MEMORY_TOOLS = frozenset({"memory_search", "kb_search", "kb_get_document", "kb_list"})
"""Tools whose results are recalled memory or documents: never a fact about the user, never confirmed."""

_STAMP = re.compile(r"^\s*\[\d{4}-\d{2}-\d{2}[^\]]{0,40}\]\s*")
"""The harness's arrival time in front of a message ("[2026-12-03 08:47:37] ...")."""
_CLAUSE = re.compile(r"(?<=[.!?;])\s+|\n+|\s+[—–]\s+|\s-\s")
_NOT_A_FACT = re.compile(
    r"[?!]\W*$|^\W*(?:thanks?\b|thank you|you'?re welcome|welcome\b|congratulations|enjoy\b|have a (?:great|good|nice)"
    r"|good ?bye|hello\b|hi\b)",
    re.IGNORECASE,
)
"""A question, an exclamation or a pleasantry: nothing to remember."""
_ABBREVIATION = re.compile(r"\b(?:Dr|Mr|Mrs|Ms|Prof|St|Mt|Jr|Sr|No|vs|etc|e\.g|i\.e|[A-Z])\.$")
_NEGATION = frozenset({"not", "no", "never", "nor", "none", "nothing", "cannot", "without"})
_NOT = re.compile(r"n't\b|\bnot\b|\bno\b|\bnever\b|\bnone\b|\bnothing\b|\bcannot\b|\bwithout\b", re.IGNORECASE)
_EXTRA_STOP = STOPWORDS | frozenset({
    "user", "users", "theirs", "hers", "him", "am", "been", "being", "im", "ive", "id", "ll", "s", "t", "re", "ve",
    "d", "m", "we", "us", "about", "into", "so", "said", "says", "told", "mentioned", "stated", "currently",
})  # fmt: skip
"""Words that say nothing about a fact besides the shared stop words: who is spoken of, contractions, reporting."""
_AFFIRM = re.compile(
    r"^\W*(?:yes|yeah|yep|yup|correct|exactly|right|confirmed?|i confirm|perfect|please do|go ahead|do it|book it"
    r"|that'?s (?:all )?(?:right|correct|perfect|it)|that is (?:right|correct)|sounds (?:right|correct)"
    r"|(?:it'?s |that'?s )?all (?:right|correct))\b",
    re.IGNORECASE,
)
"""A reply that confirms what was just said. Not "ok", "thanks" or "great": those acknowledge, they do not confirm."""
# "perfect" counts: it is how a summary is accepted ("That's all perfect."), measured on memory-eval's conversations
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
    topics: frozenset[str] = frozenset()
    """The safety topics it speaks of (an allergy, health, money, access): a claim of one needs a source that does."""


def plain(message: Message) -> str:
    """A message's text without the harness's arrival stamp."""
    return _STAMP.sub("", message.content).strip()


def clauses(text: str) -> list[str]:
    """``text`` cut into sentences and clauses (notes are lines joined by "; "); "Dr. Chen" stays whole."""
    out: list[str] = []
    for piece in _CLAUSE.split(text):
        if out and _ABBREVIATION.search(out[-1]):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return [c.strip() for c in out if c and c.strip(" .;,")]


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
    topics = frozenset(t.name for t in topics_of(text))
    return _Text(words, frozenset(_numbers(text)), bool(_NOT.search(text)), frozenset(names), topics)


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


def _sentence_ok(sentence: _Text, source: _Text, known: _Text, other: frozenset[str]) -> bool:
    """``source`` (one message, or a confirmed statement) says it; names and numbers may come from ``known``.

    A long session's words taken together back almost anything, so the words must come from one
    place; a name or a number is specific enough to count wherever the user (or the source) said it.
    A safety claim must come from a source on that topic: "I take fish oil" does not back "the user
    is allergic to fish oil", though most of its words are there (measured: memory-eval stored it).
    """
    items = len(sentence.words) + len(sentence.numbers)
    specific = sentence.numbers <= known.numbers and sentence.names <= known.words
    anchored = len(sentence.words & source.words) + len(sentence.numbers & source.numbers)
    borrowed = len((sentence.words - source.words - known.words) & other)
    return (
        specific
        and anchored / items >= ANCHOR
        and borrowed / items <= BORROWED
        and (source.negated or not sentence.negated)
        and sentence.topics <= source.topics
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

    Each sentence must be backed by one user message (a long session's words taken together back
    almost anything), or all of them by one statement the user confirmed. ``date_numbers``: numbers
    the candidate may carry besides the conversation's (the session's date, which notes are headed with).
    """
    parts = clauses(candidate)
    if not parts or any(_NOT_A_FACT.search(p) for p in parts):
        return None
    sentences = [t for t in map(_analyse, parts) if t.words or t.numbers]
    if not sentences:
        return None
    date = _Text(frozenset(), date_numbers, False)
    said = {i: _merge([_analyse(statements(plain(m))), date]) for i, m in enumerate(messages) if m.from_user}
    others = {i: _analyse(plain(m)) for i, m in enumerate(messages) if not m.from_user and not is_memory_output(m)}
    other_words = frozenset().union(*(t.words for t in others.values()))
    user = _merge(list(said.values()))
    cited: set[int] = set()
    for sentence in sentences:
        known = _Text(user.words & sentence.names, user.numbers, False)
        backing = next((i for i, t in said.items() if _sentence_ok(sentence, t, known, other_words)), None)
        if backing is None:
            break
        cited.add(backing)
    else:
        return Support("user", tuple(sorted(cited)))
    for stated, confirming in _confirmations(messages):
        source = _merge([said[confirming], *(others[j] for j in stated)])
        known = _merge([source, user])
        rest = frozenset().union(*(t.words for i, t in others.items() if i not in stated))
        if all(_sentence_ok(s, source, known, rest) for s in sentences):
            who = {"assistant" if messages[j].role == "assistant" else (messages[j].name or "tool") for j in stated}
            return Support("confirmed", (*stated, confirming), ", ".join(sorted(who)))
    return None


def _merge(texts: Sequence[_Text], extra_numbers: frozenset[str] = frozenset()) -> _Text:
    return _Text(
        frozenset().union(*(t.words for t in texts)) if texts else frozenset(),
        frozenset().union(extra_numbers, *(t.numbers for t in texts)),
        any(t.negated for t in texts),
        topics=frozenset().union(*(t.topics for t in texts)) if texts else frozenset(),
    )


__all__ = [
    "ANCHOR", "BORROWED", "MEMORY_TOOLS", "Support", "clauses", "is_memory_output", "plain", "statements", "support",
]  # fmt: skip
