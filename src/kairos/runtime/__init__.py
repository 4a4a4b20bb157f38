"""The event-driven runtime (book ch6 §1.3, §3.1-3.3): workers per session, urgency, sources, a bus.

See :mod:`kairos.runtime.runtime` for how an event travels; :mod:`kairos.runtime.events` for its
shape; :mod:`kairos.runtime.urgency` for how its strategy is chosen.
"""

from kairos.runtime.bus import BusEvent, EventBus, SqliteBus, SubscriberTooSlow
from kairos.runtime.db import RuntimeDB
from kairos.runtime.events import Event, Strategy
from kairos.runtime.runtime import RUNTIME_RESOURCE, Component, Receipt, Runtime, RuntimeHandle
from kairos.runtime.urgency import Classifier, Decision, Router, RuleRouter, UrgencyRule

__all__ = [
    "RUNTIME_RESOURCE",
    "BusEvent",
    "Classifier",
    "Component",
    "Decision",
    "Event",
    "EventBus",
    "Receipt",
    "Router",
    "RuleRouter",
    "Runtime",
    "RuntimeDB",
    "RuntimeHandle",
    "SqliteBus",
    "Strategy",
    "SubscriberTooSlow",
    "UrgencyRule",
]
