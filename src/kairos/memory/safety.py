"""Safety-relevant memories (allergies, health, money, access) and whether a request touches one.

A small model answers "is a snack bar with nuts OK?" from what is in front of it: a peanut allergy
twelve cards up in the memory block is easy to miss (issue 24). The memory plugin puts the memories
a request touches in the status message, the last thing the model reads before it answers.

A memory is safety-relevant when it speaks of one of :data:`TOPICS`; a request touches it when it
speaks of something that topic constrains (food for an allergy, a drug or a procedure for a health
condition, a payment for a money rule, a login for an access rule) or names a word of the memory
itself ("penicillin"). Deterministic and cheap: it runs at every turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kairos.memory.records import MemoryCard
from kairos.retrieval.text import tokens

MAX_ALERTS = 3


@dataclass(frozen=True, slots=True)
class Topic:
    """What makes a memory safety-relevant, and what in a request it bears on."""

    name: str
    memory: re.Pattern[str]
    request: re.Pattern[str]


def _rx(*words: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(words) + r")", re.IGNORECASE)


TOPICS: tuple[Topic, ...] = (
    Topic(
        "allergy or diet",
        _rx("allerg", "anaphyla", "intoleran", "celiac", "coeliac", "epipen", "can'?t eat", "cannot eat", "vegan",
            "vegetarian", "halal", "kosher", "gluten", "lactose"),
        _rx("eat", "food", "snack", "meal", "dinner", "lunch", "breakfast", "restaurant", "recipe", "cook", "bak",
            "ingredient", "menu", "drink", "nut", "peanut", "dairy", "milk", "egg", "shellfish", "fish", "wheat",
            "candy", "chocolate", "cake", "cookie", "dessert", "dish", "treat", "granola", "bar\\b", "order",
            "cater", "grocer", "medic", "drug", "pill", "prescri", "antibiotic", "vaccin"),
    ),
    Topic(
        "health",
        _rx("diabet", "insulin", "asthma", "epilep", "seizure", "pregnan", "blood thinner", "warfarin", "heart",
            "pacemaker", "medication", "prescri", "surgery", "blood pressure", "condition", "diagnos", "cpap"),
        _rx("medic", "drug", "pill", "dose", "prescri", "pharmac", "doctor", "surgery", "operation", "exercise",
            "workout", "run", "hik", "trip", "alcohol", "wine", "beer", "supplement", "vitamin", "fish oil",
            "ibuprofen", "aspirin", "painkiller", "antibiotic", "treatment", "hospital", "vaccin", "flight", "fly",
            "travel"),
    ),
    Topic(
        "money",
        _rx("budget", "spend(?:ing)? limit", "never pay", "don'?t spend", "overdraft", "debt", "loan", "wire",
            "transfer limit", "no more than \\$"),
        _rx("pay", "buy", "purchase", "order", "spend", "transfer", "wire", "send money", "invest", "loan",
            "subscri", "book", "price", "cost", "afford", "card", "checkout"),
    ),
    Topic(
        "access",
        _rx("password", "passcode", "pin\\b", "2fa", "two.factor", "security question", "door code", "lock code",
            "never share", "don'?t share", "api key"),
        _rx("password", "log ?in", "sign in", "share", "access", "key", "code", "credential", "reset", "account"),
    ),
)  # fmt: skip
"""The topics whose memories must not be missed."""


def topics_of(text: str) -> list[Topic]:
    """The safety topics a memory speaks of (none: an ordinary memory)."""
    return [t for t in TOPICS if t.memory.search(text)]


def touches(request: str, card: MemoryCard) -> bool:
    """Whether ``request`` bears on the safety-relevant ``card`` (a topic's subject, or a word of the card)."""
    found = topics_of(card.content)
    if not found or not request.strip():
        return False
    named = (set(tokens(card.content)) & set(tokens(request))) - {"user"}
    return bool(named) or any(t.request.search(request) for t in found)


def alerts(request: str, cards: Sequence[MemoryCard]) -> list[MemoryCard]:
    """The safety-relevant memories ``request`` touches, most important first (at most :data:`MAX_ALERTS`)."""
    hit = [c for c in cards if touches(request, c)]
    return sorted(hit, key=lambda c: (-c.importance, -(c.valid_from or c.created_at or 0.0)))[:MAX_ALERTS]


__all__ = ["MAX_ALERTS", "TOPICS", "Topic", "alerts", "topics_of", "touches"]
