"""What the runtime publishes on its bus: one typed payload per record type, a closed vocabulary.

A bus record is ``{"cursor", "session", "type", "data", "at"}``: ``type`` names a payload class here
(its ``TYPE``) and ``data`` is that payload's fields (:meth:`Outbound.to_data`). Producers build
payloads (:meth:`~kairos.runtime.Runtime.publish` takes nothing else); consumers match on the classes
(:attr:`~kairos.runtime.bus.BusEvent.payload`) instead of comparing strings and reading ``dict.get``.

The type is a class constant, not a field, because the wire keeps it beside ``data`` and ``data`` may
have a ``type`` of its own (``event.accepted`` carries the event's). Stored streams outlive versions:
a record of a type this version does not know, or whose data does not fit it, parses to
:class:`UnknownPayload`, never to an exception.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Self, Union

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, create_model

from kairos.agent.events import ActivityKind, StopReason
from kairos.runtime.events import Event, Strategy


class Outbound(BaseModel):
    """A published record's payload; subclasses set :attr:`TYPE` and the ``data`` fields."""

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)
    TYPE: ClassVar[str]
    SOMETIMES: ClassVar[frozenset[str]] = frozenset()
    """Keys ``data`` has only in some records (left out of :meth:`to_data` when not given)."""

    def to_data(self) -> dict[str, Any]:
        """The record's ``data``: every field (a shallow copy, cheap enough for a token's delta)."""
        data = dict(self.__dict__)
        if self.SOMETIMES:
            for key in self.SOMETIMES - self.model_fields_set:
                del data[key]
        return data


@dataclass(frozen=True, slots=True)
class UnknownPayload:
    """A record this version does not know, or whose data does not fit its type: kept as it came."""

    type: str
    data: Any
    error: str
    """Why it did not parse: ``unknown type``, or what did not fit."""

    def to_data(self) -> Any:
        """The data as stored."""
        return self.data


# -- the agent's run (one per agent event a front end needs; see kairos.runtime.records) ----------------


class AgentText(Outbound):
    """A piece of the reply's text, as the model streams it."""

    TYPE = "agent.text"
    text: str


class AgentReasoning(Outbound):
    """A piece of the model's reasoning, as it streams."""

    TYPE = "agent.reasoning"
    text: str


class AgentToolStarted(Outbound):
    """A tool call is about to run."""

    TYPE = "agent.tool_started"
    id: str
    name: str
    arguments: str = Field(description="the arguments as the model wrote them (JSON text, maybe malformed)")


class AgentToolFinished(Outbound):
    """A tool call ended (the whole result is in the trajectory; ``content`` is capped)."""

    TYPE = "agent.tool_finished"
    id: str
    name: str
    content: str
    truncated: bool
    is_error: bool
    duration_s: float


class AgentFinal(Outbound):
    """The run's answer; ``stop_reason`` says whether the model answered or the harness stopped it."""

    TYPE = "agent.final"
    text: str
    stop_reason: StopReason


class AgentError(Outbound):
    """The run failed (model unreachable, context overflow, an internal error); the trajectory is intact."""

    TYPE = "agent.error"
    message: str


class AgentNotice(Outbound):
    """Something worth showing that is not the answer: a retry wait, a tool set that changed."""

    TYPE = "agent.notice"
    text: str
    source: str


class AgentHookFailed(Outbound):
    """A plugin hook raised; the run went on without it."""

    TYPE = "agent.hook_failed"
    plugin: str
    hook: str
    message: str


class AgentRequest(Outbound):
    """A model request ended: tokens, cache reuse, times and the prefix audit."""

    TYPE = "agent.request"
    index: int
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int
    ttft_s: float | None
    total_s: float
    prefix_ok: bool
    first_request: bool
    diverged_at: str | None
    deliberate: str | None


class AgentActivity(Outbound):
    """What the agent does while no text comes (a status line: ``text`` is it in words)."""

    TYPE = "agent.activity"
    kind: ActivityKind
    done: int
    total: int
    detail: str
    text: str


# -- the runtime ---------------------------------------------------------------------------------------


class RunStarted(Outbound):
    """The session's worker starts a run of the agent on what is pending."""

    TYPE = "run.started"
    pending: int


class RunEnded(Outbound):
    """The run ended (answered, failed or interrupted); ``pending``: events still queued."""

    TYPE = "run.ended"
    pending: int


class SessionCreated(Outbound):
    """A session was created."""

    TYPE = "session.created"
    title: str


class SessionRecovered(Outbound):
    """At start, the session had pending events or a turn cut by a crash: its worker resumes it."""

    TYPE = "session.recovered"


class SessionError(Outbound):
    """The session could not be opened (busy elsewhere, unreadable); its events stay queued."""

    TYPE = "session.error"
    message: str


class ComponentError(Outbound):
    """A runtime component (a source or service) failed; it restarts with backoff (session ``""``)."""

    TYPE = "component.error"
    component: str
    message: str


class _EventRecord(Outbound):
    """An event as it reached the runtime (:meth:`kairos.runtime.events.Event.to_record`) and the decision."""

    type: str = Field(description="the event's type (user.input, email.received …), not the record's")
    content: str
    source: dict[str, str]
    channel: str
    context: dict[str, Any]
    session: str
    id: str
    strategy: Strategy
    reason: str

    @classmethod
    def of(cls, event: Event, session: str, strategy: Strategy, reason: str) -> Self:
        """The record of ``event`` as routed to ``session`` with ``strategy`` (``reason``: why)."""
        return cls(**{**event.to_record(), "session": session, "strategy": strategy, "reason": reason})


class EventAccepted(_EventRecord):
    """An event was taken in: queued (``seq``: its place in the inbox) or answered in parallel (no ``seq``)."""

    TYPE = "event.accepted"
    SOMETIMES = frozenset({"seq"})
    seq: int | None = None


class EventDropped(_EventRecord):
    """An event was acknowledged and not queued (a filter rule, or a stop with nothing running)."""

    TYPE = "event.dropped"


class ParallelStarted(Outbound):
    """A question is answered in a side session beside the running task."""

    TYPE = "parallel.started"
    question: str
    side_session: str


class ParallelAnswer(Outbound):
    """The side session's answer (also logged in the main session at its next safe point)."""

    TYPE = "parallel.answer"
    question: str
    answer: str
    side_session: str


class WatchFailed(Outbound):
    """A file watch stopped with an error."""

    TYPE = "watch.failed"
    watch_id: str
    message: str


class _OutboxRecord(Outbound):
    """An outbox message as the HTTP API lists it; a question also has the fields from ``options`` on."""

    SOMETIMES = frozenset({"options", "default", "timeout_s", "status", "answer", "answered_at", "answered_by"})
    id: str
    user: str
    session: str
    kind: Literal["notify", "question", "answer"]
    text: str
    priority: str
    created: str | None
    read: bool
    read_at: str | None
    options: list[str] | None = None
    default: str | None = None
    timeout_s: float | None = None
    status: str | None = None
    answer: str | None = None
    answered_at: str | None = None
    answered_by: str | None = None


class OutboxMessage(_OutboxRecord):
    """The agent told or asked the user something, or a run's answer was kept: it waits unread."""

    TYPE = "outbox.message"


class OutboxClosed(_OutboxRecord):
    """A question was answered, expired (its default used) or cancelled."""

    TYPE = "outbox.closed"


class OutboxRead(Outbound):
    """Outbox messages were marked read (session ``""``); ``user`` None: whoever they belong to."""

    TYPE = "outbox.read"
    ids: list[str]
    user: str | None


OutboundPayload = Union[  # noqa: UP007  # the closed vocabulary: typing.get_args lists it
    AgentText,
    AgentReasoning,
    AgentToolStarted,
    AgentToolFinished,
    AgentFinal,
    AgentError,
    AgentNotice,
    AgentHookFailed,
    AgentRequest,
    AgentActivity,
    RunStarted,
    RunEnded,
    SessionCreated,
    SessionRecovered,
    SessionError,
    ComponentError,
    EventAccepted,
    EventDropped,
    ParallelStarted,
    ParallelAnswer,
    WatchFailed,
    OutboxMessage,
    OutboxClosed,
    OutboxRead,
]
PAYLOADS: tuple[type[Outbound], ...] = OutboundPayload.__args__  # type: ignore[attr-defined]
_BY_TYPE: dict[str, type[Outbound]] = {c.TYPE: c for c in PAYLOADS}


def parse_payload(type: str, data: Any) -> OutboundPayload | UnknownPayload:
    """The payload of a record as stored or received; never raises (see the module docstring)."""
    cls = _BY_TYPE.get(type)
    if cls is None:
        return UnknownPayload(type, data, "unknown type")
    try:
        return cls.model_validate(data)  # type: ignore[return-value]  # cls is one of the union's
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'data'}: {err['msg']}" for err in e.errors())
        return UnknownPayload(type, data, problems)
    except (ValueError, TypeError) as e:  # a validator's own error: the data does not fit either
        return UnknownPayload(type, data, str(e))


# -- the wire record's schema (OpenAPI, the README's table) ---------------------------------------------


@functools.cache
def stream_record() -> type[RootModel[Any]]:
    """The model of a whole wire record (``StreamRecord``): one model per type, told apart by ``type``.

    Made on first use (the server's OpenAPI document, tests), not at import: nothing on the hot path
    validates whole records.
    """
    records: list[Any] = []
    for cls in PAYLOADS:
        tag: Any = Literal[cls.TYPE]
        records.append(
            create_model(
                f"{cls.__name__}Record",
                __doc__=f"A record of type ``{cls.TYPE}``: {cls.__doc__}",
                __module__=__name__,
                cursor=(int, Field(description="the record's place on the bus (resume after it)")),
                session=(str, Field(description="the session; empty for the runtime's own records")),
                type=(tag, ...),
                data=(cls, ...),
                at=(float, Field(description="when it was published (Unix seconds)")),
            )
        )
    union: Any = Union[tuple(records)]  # noqa: UP007
    doc = "One record of a session's stream: an SSE event's data, a WebSocket frame, a timeline entry."
    root: Any = RootModel[Annotated[union, Field(discriminator="type")]]
    return type("StreamRecord", (root,), {"__doc__": doc, "__module__": __name__})


def record_schemas(ref_template: str = "#/components/schemas/{model}") -> dict[str, Any]:
    """JSON schemas by name: ``StreamRecord`` (any record), each type's record and each payload (``data``)."""
    schema = dict(stream_record().model_json_schema(ref_template=ref_template))
    defs = schema.pop("$defs")
    return {"StreamRecord": schema, **defs}


def fields_of(cls: type[Outbound]) -> list[str]:
    """The ``data`` keys of a type, those it has only sometimes marked with ``?``."""
    return [f"{name}?" if name in cls.SOMETIMES else name for name in cls.model_fields]


def vocabulary_table() -> str:
    """The README's table of what the runtime publishes (type, when, data's fields)."""
    rows = ["| type | when | `data` fields |", "| --- | --- | --- |"]
    for cls in PAYLOADS:
        when = " ".join((cls.__doc__ or "").split()).replace("``", "`")
        fields = ", ".join(f"`{f}`" for f in fields_of(cls)) or "(none)"
        rows.append(f"| `{cls.TYPE}` | {when.replace('|', '/')} | {fields} |")
    return "\n".join(rows) + "\n"


__all__ = [
    "PAYLOADS",
    "AgentActivity",
    "AgentError",
    "AgentFinal",
    "AgentHookFailed",
    "AgentNotice",
    "AgentReasoning",
    "AgentRequest",
    "AgentText",
    "AgentToolFinished",
    "AgentToolStarted",
    "ComponentError",
    "EventAccepted",
    "EventDropped",
    "Outbound",
    "OutboundPayload",
    "OutboxClosed",
    "OutboxMessage",
    "OutboxRead",
    "ParallelAnswer",
    "ParallelStarted",
    "RunEnded",
    "RunStarted",
    "SessionCreated",
    "SessionError",
    "SessionRecovered",
    "UnknownPayload",
    "WatchFailed",
    "fields_of",
    "parse_payload",
    "record_schemas",
    "stream_record",
    "vocabulary_table",
]
