"""The summariser behind layer 5: prompts, chunking, and the guarantee that it never overflows.

Every call is built, counted with the summariser's own tokenizer, and only sent if it fits its
window minus the reply budget. A text too long for one call is split at line boundaries into
chunks that each fit (a chunk that still tokenizes too long is halved again), summarised one
by one, and the partial summaries are joined, or merged once more when that also fits. Input
that cannot fit even as a small chunk is a :class:`SummaryError`, never an oversize request.

The task-aware prompt follows the book (Exp 2-10): ``Given the search query: {query}`` and
``Current context: {context}``, so the same page compresses differently for different tasks,
and facts the agent already has are not repeated. Citation mode adds a source to every fact.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from kairos.errors import KairosError
from kairos.models.base import Model
from kairos.models.types import Message, ModelRequest, ModelResponse, ResponseDone, TextDelta
from kairos.retrieval.text import STOPWORDS
from kairos.retrieval.text import words as text_words

GENERIC_SYSTEM = (
    "You shorten tool results for an AI agent. Summarise the text in at most three short paragraphs. "
    "Keep names, dates, numbers, roles and places exactly as written."
)
MERGED_SYSTEM = (
    "You shorten tool results for an AI agent. Merge all the texts below into one short summary. "
    "Keep names, dates, numbers, roles and places exactly as written."
)
TASK_SYSTEM = (
    "You extract facts from a tool result for an AI agent that is working on a task. Copy, word for word, every "
    "sentence of the text that helps with the task. Keep each fact whole: the person, what happened, the "
    "company and the date stay together in one sentence. Skip navigation, ads, comments, lists of related "
    "articles and paragraphs about other topics. Do not answer the task, do not guess, and add nothing the text "
    "does not say. Skip facts the current context already has. If no sentence helps, reply exactly: "
    "No relevant information."
)
CITATION_RULE = (
    " After each sentence, add its source in brackets, e.g. [source: https://example.com/page]: the URL the text "
    "gives, else the source label."
)
NOTHING_YET = "(nothing yet)"
NOTHING_RELEVANT = "No relevant information."
VERBATIM_SHARE = 0.85
"""A task-aware sentence is kept when this share of its word 4-grams occurs in its source."""
_SENTENCES = re.compile(r"(?<=[.!?])\s+(?!\[source)|\n+", re.IGNORECASE)  # a citation stays with its sentence
_CITATION = re.compile(r"\s*\[source:[^\]]*\]\s*$", re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_WORDS = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
MIN_CHUNK_CHARS = 200
_MAX_SPLIT_DEPTH = 12


class SummaryError(KairosError):
    """A summariser call failed or returned nothing usable; counts towards the circuit breaker."""


def task_prompt(query: str, context: str, source: str, text: str) -> str:
    """The task-aware user prompt: keep the sentences of ``text`` that help with ``query``.

    Args:
        query: the task the agent is working on.
        context: what the agent already has (compressed so far); its facts are not repeated.
        source: where ``text`` came from (a URL or a tool call), for citations.
        text: the tool result to compress.
    """
    return (
        f"Given the search query: {query}\n\nCurrent context: {context or NOTHING_YET}\n\n"
        f"Source: {source}\n\nText to compress:\n{text}\n\n"
        "Sentences of this text that help with the query, copied word for word:"
    )


def _grams(words: list[str], n: int = 4) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(max(len(words) - n + 1, 1))}


def verbatim(summary: str, source: str) -> str:
    """The sentences of a task-aware ``summary`` that are copied from ``source``, in order.

    The summariser is asked to copy sentences word for word; a small model sometimes copies one
    from the context it was shown, joins two people's facts, or writes a conclusion of its own
    ("still works there" beside "left in 2020"). Those are not in the source, so they are dropped
    here, in code. A sentence is kept when :data:`VERBATIM_SHARE` of its word 4-grams occur in the
    source (small edits pass); a citation after it is kept with it. Nothing kept:
    :data:`NOTHING_RELEVANT`.
    """
    source_grams = _grams(_WORDS.findall(source.lower()))
    kept = []
    for raw in _SENTENCES.split(summary):
        sentence = _BULLET.sub("", raw).strip()
        words = _WORDS.findall(_CITATION.sub("", sentence).lower())
        if len(words) < 3:
            continue  # "Yes.", a lone citation, a heading: not a fact
        grams = _grams(words)
        if sum(g in source_grams for g in grams) >= VERBATIM_SHARE * len(grams):
            kept.append(sentence)
    return " ".join(kept) if kept else NOTHING_RELEVANT


FOCUS_FLOOR = 0.25
"""A paragraph whose score is at most this share of the best one's is not kept (a shared common word)."""
_PARAGRAPHS = re.compile(r"\n\s*\n")
_MIN_TERM = 3
"""Shorter words ("AI", "12", "of") are never focus terms."""


def _terms(text: str) -> set[str]:
    """The lower-cased words of ``text`` of three characters or more (stop words included)."""
    return {w for w in text_words(text) if len(w) >= _MIN_TERM}


def focus(text: str, query: str, budget: int) -> str:
    """The paragraphs of ``text`` most about ``query``, in their order, within ``budget`` chars.

    A coarse, query-aware first stage (as in LongLLMLingua): a noisy page of navigation, ads and
    teasers is cut to its few paragraphs that share the query's rare words (BM25's IDF over the
    page's paragraphs, so a name counts, "company" does not; a paragraph that shares only a common
    word is not kept) before the small model reads it.
    A shorter text, one without paragraphs, or one sharing no word with the query is returned whole.
    """
    if budget <= 0 or len(text) <= budget:
        return text
    paragraphs = [p for p in _PARAGRAPHS.split(text) if p.strip()]
    terms = _terms(query) - STOPWORDS
    if len(paragraphs) < 2 or not terms:
        return text
    found = [_terms(p) for p in paragraphs]
    n = len(paragraphs)
    idf = {t: math.log(1 + (n - df + 0.5) / (df + 0.5)) for t in terms if (df := sum(t in w for w in found))}
    scores = [sum(idf.get(t, 0.0) for t in terms & w) for w in found]
    floor = max(scores) * FOCUS_FLOOR
    kept: list[int] = []
    used = 0
    for i in sorted(range(n), key=lambda i: (-scores[i], i)):
        if scores[i] <= floor or (kept and used + len(paragraphs[i]) > budget):
            break
        kept.append(i)
        used += len(paragraphs[i]) + 2
    if not kept:
        return text
    return "\n\n".join(paragraphs[i] for i in sorted(kept))


def generic_prompt(source: str, text: str) -> str:
    """The task-independent user prompt: summarise ``text`` from ``source``."""
    return f"Source: {source}\n\nText to summarise:\n{text}"


def _split(text: str, size: int) -> list[str]:
    """Pieces of at most ``size`` chars, cut at a line break where one is near the limit."""
    out = []
    while len(text) > size:
        cut = text.rfind("\n", size // 2, size)
        cut = size if cut <= 0 else cut + 1
        out.append(text[:cut])
        text = text[cut:]
    if text:
        out.append(text)
    return out


class Summarizer:
    """Calls a model to summarise tool results; counts calls and prompt tokens.

    Args:
        model: the summariser; its own tokenizer and window decide what fits.
        max_tokens: the reply budget of each call (kept free in the window).
        context_chars: how much of the already-compressed context the task-aware prompt shows
            (its tail); 0 shows none.
        focus_chars: task-aware calls read only the paragraphs of a result most about the task,
            up to this many chars (:func:`focus`); 0 reads everything.
    """

    def __init__(self, model: Model, *, max_tokens: int = 300, context_chars: int = 1500, focus_chars: int = 0) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.context_chars = context_chars
        self.focus_chars = focus_chars
        self.calls = 0
        self.prompt_tokens = 0

    @property
    def budget(self) -> int:
        """Prompt tokens one call may use: the window minus the reply budget."""
        return self.model.context_window - self.max_tokens

    def request(self, system: str, user: str) -> ModelRequest:
        """A one-message request with no tools, at temperature 0."""
        return ModelRequest(
            system_static=system,
            system_deployment="",
            tools=(),
            messages=(Message.user(user),),
            max_tokens=self.max_tokens,
            temperature=0.0,
        )

    def fits(self, request: ModelRequest) -> bool:
        """Whether ``request`` fits the summariser's window with the reply budget left free."""
        return self.model.count_tokens(request) <= self.budget

    async def call(self, request: ModelRequest) -> str:
        """One summariser call; the request must fit (checked, never sent oversize).

        Raises:
            SummaryError: the request does not fit, the model failed, or it returned nothing.
        """
        tokens = self.model.count_tokens(request)
        if tokens > self.budget:
            raise SummaryError(f"summariser request of {tokens} tokens exceeds its budget of {self.budget}")
        self.calls += 1
        streamed: list[str] = []
        response: ModelResponse | None = None
        try:
            async for event in self.model.stream(request):
                if isinstance(event, TextDelta):
                    streamed.append(event.text)
                elif isinstance(event, ResponseDone):
                    response = event.response
        except Exception as e:  # any backend failure is one failed attempt for the breaker
            raise SummaryError(f"summariser call failed: {type(e).__name__}: {e}") from e
        if response is None:
            raise SummaryError(f"the summariser {self.model.name!r} ended without a response")
        self.prompt_tokens += response.usage.prompt_tokens or tokens
        text = response.message.content.strip()
        if response.finish_reason == "length":  # cut at max_tokens: keep the text streamed so far
            text = "".join(streamed).strip() + " […]"
        if not text.strip(" […]"):
            raise SummaryError("the summariser returned an empty summary")
        return text

    def _chunks(self, build: Callable[[str], ModelRequest], text: str) -> list[str]:
        """``text`` cut into pieces whose requests fit the budget."""
        first = build(text)
        tokens = self.model.count_tokens(first)
        if tokens <= self.budget:
            return [text]
        size = max(int(len(text) * self.budget / tokens * 0.9), 1)
        while size >= MIN_CHUNK_CHARS and not self.fits(build(text[:size])):
            size = int(size * 0.8)
        if size < MIN_CHUNK_CHARS:
            raise SummaryError(
                f"the summariser's window ({self.model.context_window} tokens) has no room for the text beside "
                "its instructions; use a summarizer model with a larger window"
            )
        out: list[str] = []
        pending = _split(text, size)
        depth = 0
        while pending:
            piece = pending.pop(0)
            if self.fits(build(piece)) or len(piece) < 2 * MIN_CHUNK_CHARS or depth > _MAX_SPLIT_DEPTH:
                out.append(piece)
            else:  # tokenizes denser than the probe: halve it
                depth += 1
                pending[:0] = _split(piece, len(piece) // 2 + 1)
        return out

    def _fit_context(self, query: str, context: str, source: str) -> tuple[str, str]:
        """Trim context (oldest first), then the query, until the instructions leave room for text."""
        context = context[-self.context_chars :] if self.context_chars else ""
        probe = "x" * MIN_CHUNK_CHARS
        while context and not self.fits(self.request(TASK_SYSTEM, task_prompt(query, context, source, probe))):
            context = context[len(context) // 2 :]
        while len(query) > 80 and not self.fits(self.request(TASK_SYSTEM, task_prompt(query, "", source, probe))):
            query = query[: len(query) // 2] + "…"
        return query, context

    async def _map(
        self, system: str, build: Callable[[str], str], text: str, check: Callable[[str, str], str] | None = None
    ) -> str:
        """Summarise ``text`` in as many fitting chunks as needed; merge the parts if they fit.

        ``check(summary, source)`` filters each summary against the text it summarised.
        """

        def checked(summary: str, source: str) -> str:
            return check(summary, source) if check is not None else summary

        chunks = self._chunks(lambda t: self.request(system, build(t)), text)
        parts = [checked(await self.call(self.request(system, build(c))), c) for c in chunks]
        if len(parts) == 1:
            return parts[0]
        parts = [p for p in parts if p != NOTHING_RELEVANT] or [NOTHING_RELEVANT]
        joined = "\n".join(parts)
        merged = self.request(system, build(joined))
        if self.fits(merged) and len(joined) > self.max_tokens * 2:
            return checked(await self.call(merged), text)
        return joined

    async def summarize(
        self,
        text: str,
        *,
        source: str,
        query: str | None = None,
        context: str = "",
        citations: bool = False,
    ) -> str:
        """One result's summary: task-aware when ``query`` is given, generic otherwise.

        Task-aware: the model reads the result's :func:`focus` excerpt, and keeps the sentences it
        copied (:func:`verbatim`); when it copied none yet did not say the text is irrelevant, the
        excerpt itself is the summary, so a fact is never lost to a paraphrase.

        Raises:
            SummaryError: see :meth:`call`.
        """
        if query is None:
            return await self._map(GENERIC_SYSTEM, lambda t: generic_prompt(source, t), text)
        system = TASK_SYSTEM + (CITATION_RULE if citations else "")
        excerpt = focus(text, query, self.focus_chars)

        def copied(summary: str, read: str) -> str:
            kept = verbatim(summary, read)
            if kept == NOTHING_RELEVANT and summary.strip() != NOTHING_RELEVANT and read == excerpt != text:
                # it claimed something it did not copy: the excerpt itself is the safe summary
                return excerpt
            return kept

        query, context = self._fit_context(query, context, source)
        return await self._map(system, lambda t: task_prompt(query, context, source, t), excerpt, copied)

    async def merge(self, items: list[tuple[str, str]]) -> str:
        """One generic summary of several results, cut to fit one call (the tail may be lost).

        This is the book's "merged summary" strategy, flaw included: no chunking, so a long
        batch loses its end. Raises :class:`SummaryError` like :meth:`call`.
        """
        text = "\n\n".join(f"Source: {src}\n{body}" for src, body in items)
        chunks = self._chunks(lambda t: self.request(MERGED_SYSTEM, f"Texts to merge:\n{t}"), text)
        kept = chunks[0]
        if len(chunks) > 1:
            kept += "\n[… the rest did not fit the summariser's window and was cut …]"
            if not self.fits(self.request(MERGED_SYSTEM, f"Texts to merge:\n{kept}")):
                kept = chunks[0]
        return await self.call(self.request(MERGED_SYSTEM, f"Texts to merge:\n{kept}"))
