"""Entity names of the entity graph (:mod:`kairos.knowledge.entity_graph`): keys, grounding, aliases.

Pure text functions, shared by extraction (which names a triple may keep) and search (which of
the graph's entities a query names): NFKC, lower case, no article, possessive or edge
punctuation, a crude singular.
"""

from __future__ import annotations

import re
import unicodedata

PRONOUNS = frozenset(
    "i me my mine myself you your yours he him his she her hers it its they them their we us our this "  # noqa: SIM905
    "that these those someone something everyone everything ".split()
)
QUESTION_WORDS = frozenset(
    "what when where which who whom whose why how did does do was were has have had and the for with ".split()  # noqa: SIM905
)
_ARTICLES = ("the ", "a ", "an ")
_WORD = re.compile(r"[\w][\w&'-]*", re.UNICODE)


def stem(word: str) -> str:
    """A crude singular: ``puppies`` -> ``puppy``, ``classes`` -> ``class``, ``dogs`` -> ``dog``."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ses", "xes", "ches", "shes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def normalise(name: str) -> str:
    """The key of an entity name: NFKC, lower case, no article, possessive or edge punctuation, crude singular.

    Empty for pronouns and names that are not a short phrase (over six words or 60 characters).
    """
    text = unicodedata.normalize("NFKC", name).lower().replace("\u2019", "'")
    words = [w.removesuffix("'s").strip("'-") for w in _WORD.findall(text)]
    text = " ".join(w for w in words if w)
    for article in _ARTICLES:
        text = text.removeprefix(article)
    words = [stem(w) for w in text.split()]
    if not words or len(words) > 6 or (len(words) == 1 and words[0] in PRONOUNS):
        return ""
    key = " ".join(words)
    return key if len(key) <= 60 else ""


def grounded(key: str, chunk_words: set[str]) -> bool:
    """Every word of the entity occurs in the chunk (after the same normalisation)."""
    return all(w in chunk_words for w in key.split())


def query_words(text: str) -> list[str]:
    """The words of ``text`` as entity keys spell them, in order."""
    words = [stem(w.removesuffix("'s").strip("'-")) for w in _WORD.findall(text.lower().replace("\u2019", "'"))]
    return [w for w in words if w]


def chunk_words(text: str) -> set[str]:
    """The words of a chunk, normalised as entity keys are (for :func:`grounded`)."""
    return set(query_words(text))


def short_aliases(keys: set[str]) -> dict[str, str]:
    """A one-word key -> the only longer key of the document that starts or ends with it."""
    out: dict[str, str] = {}
    for key in keys:
        if " " in key:
            continue
        longer = [k for k in keys if " " in k and (k.startswith(key + " ") or k.endswith(" " + key))]
        if len(longer) == 1:
            out[key] = longer[0]
    return out


def like_prefix(word: str) -> str:
    """A LIKE pattern (escaped by backslashes) for names whose first word is ``word``."""
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + " %"


__all__ = ["PRONOUNS", "QUESTION_WORDS", "chunk_words", "grounded", "like_prefix", "normalise",
           "query_words", "short_aliases", "stem"]  # fmt: skip
