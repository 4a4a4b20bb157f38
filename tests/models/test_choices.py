"""Choice scoring from next-token logits: the pure parts, and the local model's input checks."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from kairos.models._choices import choice_logprobs_from_logits, choice_variants, first_token_ids
from kairos.models.base import ChoiceScorer
from kairos.models.local import LocalModel, prompt_segments, render_prompt
from kairos.models.types import Message, ModelRequest, ToolSpec

VOCAB = {"yes": 0, " yes": 1, "Yes": 2, " Yes": 3, "YES": 4, " YES": 5, "no": 6, " no": 7, "No": 8, "maybe": 9}


def tokenize(text: str) -> list[int]:
    """A toy tokenizer: the longest known word that starts ``text`` is its first token, else a fresh id."""
    known = [word for word in VOCAB if text.startswith(word)]
    first = VOCAB[max(known, key=len)] if known else 100 + len(text)
    return [first, 99]


def test_variants_cover_case_and_a_leading_space() -> None:
    assert set(choice_variants(" yes ")) == {"yes", " yes", "Yes", " Yes", "YES", " YES"}
    assert first_token_ids(tokenize, ["yes", "no"]) == {
        "yes": frozenset(range(6)),
        "no": frozenset({6, 7, 8, 102, 103}),
    }


def test_choices_that_cannot_be_told_apart_are_refused() -> None:
    with pytest.raises(ValueError, match="same token"):
        first_token_ids(tokenize, ["no", "nope"])  # "nope" starts with the token "no"
    with pytest.raises(ValueError, match="empty"):
        first_token_ids(tokenize, ["yes", " "])
    with pytest.raises(ValueError, match="at least one"):
        first_token_ids(tokenize, [])


def test_logprobs_sum_the_variants_over_the_whole_vocabulary() -> None:
    probs = np.zeros(200)
    probs[[0, 1, 2, 6, 7, 9]] = [0.3, 0.1, 0.2, 0.05, 0.05, 0.3]
    logits = np.log(np.where(probs > 0, probs, 1e-30)) + 7.0  # a shift must not matter
    out = choice_logprobs_from_logits(logits, first_token_ids(tokenize, ["yes", "no", "maybe"]))
    assert math.exp(out["yes"]) == pytest.approx(0.6)
    assert math.exp(out["no"]) == pytest.approx(0.1)
    assert math.exp(out["maybe"]) == pytest.approx(0.3)
    assert choice_logprobs_from_logits(logits, {"x": frozenset()}) == {"x": -math.inf}


def test_plain_rendering_has_no_reply_format_rules() -> None:
    request = ModelRequest("Judge.", "", (), (Message.user("Is it?"),))
    plain = "".join(s.text for s in prompt_segments(request, reply_format=False))
    assert "Reply format" not in plain and "JSON" not in plain
    assert plain.endswith("<|im_start|>user\nIs it?<|im_end|>\n<|im_start|>assistant\n")
    assert "Reply format" in render_prompt(request)  # generation keeps its rules


def test_local_model_is_a_choice_scorer_and_refuses_tools_before_loading() -> None:
    model = LocalModel("/nonexistent/model.gguf")
    assert isinstance(model, ChoiceScorer)
    tool = ToolSpec("t", "a tool", {"type": "object"})
    with pytest.raises(ValueError, match="without tools"):
        asyncio.run(model.choice_logprobs(ModelRequest("s", "", (tool,), (Message.user("q"),)), ["yes", "no"]))
