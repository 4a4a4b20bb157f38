"""Scoring fixed answers from next-token logits (pure: no model, testable with any tokenizer).

A model asked "yes or no?" may start its reply with ``yes``, ``Yes``, `` yes`` or ``YES``; each is a
different token, so the probability of the answer is the sum over those first tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt


def choice_variants(choice: str) -> list[str]:
    """The spellings a reply may start with: as given, lower, Capitalised, UPPER, each with or without a space."""
    word = choice.strip()
    cased = dict.fromkeys([word, word.lower(), word.capitalize(), word.upper()])
    return [prefix + w for w in cased for prefix in ("", " ")]


def first_token_ids(tokenize: Callable[[str], Sequence[int]], choices: Sequence[str]) -> dict[str, frozenset[int]]:
    """Per choice, the first token of each of its variants.

    Raises:
        ValueError: no choices, an empty choice, or two choices sharing a first token (they could not be told apart).
    """
    if not choices:
        raise ValueError("choice scoring needs at least one choice")
    ids: dict[str, frozenset[int]] = {}
    owner: dict[int, str] = {}
    for choice in choices:
        if not choice.strip():
            raise ValueError("a choice may not be empty")
        firsts = frozenset(toks[0] for v in choice_variants(choice) if (toks := tokenize(v)))
        for token in firsts:
            other = owner.setdefault(token, choice)
            if other != choice:
                raise ValueError(
                    f"choices {other!r} and {choice!r} start with the same token; "
                    "first-token scoring cannot tell them apart"
                )
        ids[choice] = firsts
    return ids


def choice_logprobs_from_logits(logits: npt.ArrayLike, ids: Mapping[str, frozenset[int]]) -> dict[str, float]:
    """``log P`` of each choice's first tokens (summed) under the softmax of ``logits`` over the whole vocabulary."""
    row = np.asarray(logits, dtype=np.float64)
    top = float(row.max())
    log_z = top + float(np.log(np.exp(row - top).sum()))
    out: dict[str, float] = {}
    for choice, tokens in ids.items():
        if not tokens:
            out[choice] = float("-inf")
            continue
        picked = row[sorted(tokens)]
        m = float(picked.max())
        out[choice] = m + float(np.log(np.exp(picked - m).sum())) - log_z
    return out


def last_logits(llm: Any) -> npt.NDArray[np.float32]:
    """A copy of the logits after the last token a ``llama_cpp.Llama`` evaluated (works with ``logits_all=False``)."""
    return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)).copy()
