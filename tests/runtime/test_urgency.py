"""The urgency classifier: a small model's strategy for a user message sent mid-run; failures fall back to rules."""

from __future__ import annotations

import pytest

from kairos.runtime import Classifier, Event, RuleRouter
from kairos.testing import ScriptedModel, call, reply


def said(text: str) -> Event:
    return Event("user.input", text, {"type": "user"})


@pytest.mark.parametrize(
    ("step", "strategy"),
    [
        (reply("", call("route", {"strategy": "parallel"})), "parallel"),
        (reply("This is an interrupt."), "interrupt"),  # no call: one strategy named in words
        (reply("", call("route", {"strategy": "drop"})), None),  # never chosen by a model
        (reply("queue or interrupt"), None),  # ambiguous words
        (RuntimeError("model crashed"), None),
    ],
)
async def test_the_classifier_reads_a_call_or_plain_words_and_gives_up_cleanly(
    step: object, strategy: str | None
) -> None:
    decision = await Classifier(ScriptedModel([step])).classify(said("what time is it?"))  # type: ignore[list-item]
    assert (decision.strategy if decision else None) == strategy


async def test_the_router_asks_the_classifier_only_for_user_messages_while_busy() -> None:
    model = ScriptedModel([reply("", call("route", {"strategy": "parallel"}))])
    router = RuleRouter(classifier=Classifier(model))
    assert (await router.decide(said("what time is it?"), busy=False)).strategy == "queue"
    assert (await router.decide(Event("email.received", "hi", {"type": "email"}), busy=True)).strategy == "queue"
    assert not model.requests
    decided = await router.decide(said("what time is it?"), busy=True)
    assert (decided.strategy, decided.reason) == ("parallel", "classifier")
