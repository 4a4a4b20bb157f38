"""Words of a text for lexical retrieval: one word pattern, one stop-word list, one light stemmer.

Everything in kairos that matches words uses these: tool discovery and page excerpts rank by BM25
over :func:`tokens` (:mod:`kairos.retrieval.lexical`); the knowledge base's tantivy index and user
memory's full-text search take :func:`query_words`; the summariser keeps the paragraphs that share
a task's content words (:func:`kairos.context.compression.llm.focus`); memory's support check
compares :func:`tokens` of a note and of what the user said.

A word is a run of letters and digits: an underscore separates words (``snake_case`` is two), and
letters of any script count ("Zürich" is one word). On ASCII text :func:`tokens` is the tokenizer
tool discovery was measured with (``kairos bench tool-discovery``); its rankings are pinned in
``tests/tools/discovery/test_rankings_pinned.py``.
"""

from __future__ import annotations

import re

WORD = re.compile(r"[^\W_]+")
"""Runs of letters and digits (``\\w`` without the underscore)."""

STOPWORDS = frozenset({
    # articles, determiners and pronouns
    "a", "an", "the", "this", "that", "these", "those", "some", "any", "each",
    "i", "me", "my", "you", "your", "he", "she", "her", "his", "it", "its", "our", "they", "them", "their",
    # question words
    "what", "which", "who", "whom", "when", "where", "why", "how",
    # auxiliaries and modals
    "are", "is", "was", "were", "be", "do", "does", "did", "has", "have", "had",
    "can", "could", "shall", "should", "will", "would", "might", "must",
    # prepositions, conjunctions, fillers
    "and", "as", "at", "but", "by", "for", "from", "in", "of", "on", "or", "to", "with", "up",
    "than", "then", "there", "here", "also", "just", "very",
    # the words of a request that say nothing about what is wanted ("please find me", "show me")
    "find", "get", "need", "please", "show", "tell", "use", "want",
})  # fmt: skip
"""Words :func:`tokens` and :func:`query_words` drop: function words and the filler of a request.

Words that carry meaning are never here: negations ("not", "no", "never": a support check and a
search need them), quantities and order ("all", "only", "more", "most", "first", "other"), and "may"
(a month). Nor are words the tool catalog's descriptions use that discovery kept ("about", "into",
"such"): adding one of those moves discovery's pinned rankings.
"""


def words(text: str) -> list[str]:
    """The lower-cased words of ``text``, in order (stop words included)."""
    return WORD.findall(text.lower())


def stem(word: str) -> str:
    """A light suffix stripper: plurals and ``-ing`` ("prices" → "price", "cities" → "city", "raining" → "rain")."""
    if len(word) > 5 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 6 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """The words of ``text`` that BM25 compares: lower-cased, stop words dropped, stemmed, in order."""
    return [stem(w) for w in words(text) if w not in STOPWORDS]


def query_words(text: str) -> list[str]:
    """The words of ``text`` a full-text query keeps: lower-cased, unstemmed, without repeats, in order.

    Stop words are dropped unless nothing else is left ("what is it" keeps all three); the index
    stems them itself (tantivy's Snowball, FTS5's Porter).
    """
    found = words(text)
    kept = [w for w in found if w not in STOPWORDS] or found
    return list(dict.fromkeys(kept))


__all__ = ["STOPWORDS", "WORD", "query_words", "stem", "tokens", "words"]
