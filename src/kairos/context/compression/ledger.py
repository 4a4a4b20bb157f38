"""Per-session compression state: the frozen replacements (the ledger), events and counters.

Every decision that changes what the model sees is a frozen session value, written once with
``Session.freeze`` and never updated, so a resumed session renders byte-identical requests.
Keys address stored messages by their sequence number (the trajectory is append-only, so a
message's position never changes)::

    kairos.compression/spill/<seq>       layer 1 preview
    kairos.compression/noise/<seq>       layer 2 pointer
    kairos.compression/compressed/<seq>  layer 5 [COMPRESSED] text (or a layer 4 round pointer)
    kairos.compression/round/<n>         layer 4 entry for completed round n
    kairos.compression/error/<seq>       the result at <seq> was a tool error (for layer 2)

Later layers win: a compressed result shows its ``compressed`` text even if it was spilled.
Only ``tool`` messages are ever replaced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from kairos.context.session import SessionView
from kairos.tools.base import Resource

COMPRESSED = "[COMPRESSED]"
"""Marks content layer 5 produced; marked content is never compressed again."""

Layer: TypeAlias = Literal["spill", "noise", "compressed"]
LAYERS: tuple[Layer, ...] = ("compressed", "noise", "spill")
"""Precedence when a message has several replacements: first wins."""
_PREFIX = "kairos.compression/"
STATE_KEY: Resource[SessionCompression] = Resource("kairos.compression")

EventKind: TypeAlias = Literal[
    "spilled", "noise_removed", "compressed", "nothing_new", "failed", "breaker_tripped", "provider_edit", "archived"
]

log = logging.getLogger("kairos.compression")


@dataclass(frozen=True, slots=True)
class CompressionEvent:
    """Something a compression layer did; kept in the session state and sent to listeners."""

    kind: EventKind
    message: str
    request: int
    """``session.request_count`` when it happened (the index of the next request)."""
    seqs: tuple[int, ...] = ()
    type: Literal["compression"] = "compression"


Listener = Callable[[CompressionEvent], None]


class Ledger:
    """The session's frozen compression values, all read once when the ledger is made.

    Only this ledger writes them (through ``freeze``, which updates the cache), so a key missing
    from the cache is absent from the store too: lookups never touch the database.
    """

    def __init__(self, session: SessionView) -> None:
        self._session = session
        self._cache: dict[str, str | None] = {
            k.removeprefix(_PREFIX): v for k, v in session.frozen_items(_PREFIX).items()
        }
        self.version = 0
        """Bumped on every new decision that changes what the model sees, so views know when to re-render."""

    def _get(self, key: str) -> str | None:
        return self._cache.get(key)

    def _freeze(self, key: str, value: str) -> str:
        known = self._get(key)
        if known is not None:
            return known
        stored = self._session.freeze(_PREFIX + key, value)
        self._cache[key] = stored
        if key.split("/", 1)[0] in LAYERS:  # round entries and error marks are not shown by the view
            self.version += 1
        return stored

    def get(self, layer: Layer, seq: int) -> str | None:
        """The text decided for the message at ``seq`` in ``layer``, or None if none was."""
        return self._get(f"{layer}/{seq}")

    def freeze(self, layer: Layer, seq: int, text: str) -> str:
        """Decide ``text`` for the message at ``seq`` in ``layer``; an earlier decision wins."""
        return self._freeze(f"{layer}/{seq}", text)

    def effective(self, seq: int) -> str | None:
        """What the model sees instead of the stored content, or None to keep it."""
        for layer in LAYERS:
            text = self.get(layer, seq)
            if text is not None:
                return text
        return None

    def round_entry(self, n: int) -> str | None:
        """The archive entry frozen for round ``n``, or None."""
        return self._get(f"round/{n}")

    def freeze_round(self, n: int, text: str) -> str:
        """Decide the archive entry of round ``n``; an earlier decision wins."""
        return self._freeze(f"round/{n}", text)

    def is_error(self, seq: int) -> bool:
        """Whether the result at ``seq`` was marked as a tool error."""
        return self._get(f"error/{seq}") is not None

    def mark_error(self, seq: int, tool: str) -> None:
        """Remember, durably, that the result at ``seq`` (of ``tool``) was an error."""
        self._freeze(f"error/{seq}", tool)


@dataclass
class SessionCompression:
    """What compression knows about one session in this process (the ledger is the durable part)."""

    ledger: Ledger
    seen: int = 0
    """Messages already processed by the first-sight layers."""
    failures: int = 0
    """Consecutive failed layer-5 attempts (reset by a success)."""
    tripped: bool = False
    """The circuit breaker is open: no more LLM compression in this session (until a restart)."""
    error_calls: set[str] = field(default_factory=set)
    """Call ids whose result was an error, reported by the executor hook, not yet frozen."""
    idle: bool = False
    """The last attempt found nothing new (reported once, until something is compressed)."""
    events: list[CompressionEvent] = field(default_factory=list)
    llm_calls: int = 0
    summarizer_prompt_tokens: int = 0
    original_chars: int = 0
    """Characters of every result layer 5 replaced, and what they became (for the ratio)."""
    compressed_chars: int = 0
    round_starts: list[int] = field(default_factory=list)
    """Stored positions of real user messages seen so far (where rounds start); grows with the trajectory."""
    round_scan: int = 0
    """Messages already scanned for round starts."""
    rounds_logged: int = 0
    """Rounds known complete with a frozen entry (every earlier round is too)."""
    first_results: dict[tuple[str | None, str], int] = field(default_factory=dict)
    """(tool, content) -> the first stored result with that content (for duplicates at first sight)."""
    dup_scan: int = 0
    """Messages already indexed in ``first_results``."""
    measured: tuple[int, int] | None = None
    """(messages, prompt tokens) when the prompt was last built and counted for the thresholds."""

    @property
    def ratio(self) -> float | None:
        """Compressed / original characters over every layer-5 replacement (None: none yet)."""
        return self.compressed_chars / self.original_chars if self.original_chars else None


def state_of(session: SessionView) -> SessionCompression:
    """The session's compression state, made on first use."""
    return session.state.get_or_put(STATE_KEY, lambda: SessionCompression(Ledger(session)))


def emit(session: SessionView, st: SessionCompression, listeners: list[Listener], event: CompressionEvent) -> None:
    """Record an event, log it, and tell the listeners (a failing listener never stops the run)."""
    st.events.append(event)
    level = logging.WARNING if event.kind in ("failed", "breaker_tripped") else logging.INFO
    log.log(level, "session %s: %s", session.id, event.message)
    for listener in listeners:
        try:
            listener(event)
        except Exception:  # a UI callback must not break compression
            log.exception("compression listener failed")
