"""The event-driven runtime (book ch6 §1.3, §3.1-3.3): workers per session, urgency, sources, a bus.

See :mod:`kairos.runtime.runtime` for how an event travels; :mod:`kairos.runtime.events` for its
shape; :mod:`kairos.runtime.urgency` for how its strategy is chosen.
"""

from kairos.runtime.bus import BusEvent, EventBus, SqliteBus, SubscriberTooSlow
from kairos.runtime.db import RecordDB, RuntimeDB
from kairos.runtime.events import Event, Strategy
from kairos.runtime.integrations.calendar import Calendar
from kairos.runtime.integrations.mail import MailSource
from kairos.runtime.integrations.outbox import Outbox
from kairos.runtime.integrations.tasks import TaskManager
from kairos.runtime.integrations.timers import Timers
from kairos.runtime.integrations.watch import FileWatch
from kairos.runtime.outbound import OutboundPayload, UnknownPayload, parse_payload
from kairos.runtime.runtime import RUNTIME_RESOURCE, Component, Receipt, Runtime, RuntimeContext, RuntimeHandle
from kairos.runtime.toolsets import runtime_tools
from kairos.runtime.urgency import Classifier, Decision, Router, RuleRouter, UrgencyRule

__all__ = [
    "RUNTIME_RESOURCE",
    "BusEvent",
    "Calendar",
    "Classifier",
    "Component",
    "Decision",
    "Event",
    "EventBus",
    "FileWatch",
    "MailSource",
    "OutboundPayload",
    "Outbox",
    "Receipt",
    "RecordDB",
    "Router",
    "RuleRouter",
    "Runtime",
    "RuntimeContext",
    "RuntimeDB",
    "RuntimeHandle",
    "SqliteBus",
    "Strategy",
    "SubscriberTooSlow",
    "TaskManager",
    "Timers",
    "UnknownPayload",
    "UrgencyRule",
    "parse_payload",
    "runtime_tools",
]
