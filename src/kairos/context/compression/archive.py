"""Layer 4: one archival entry per completed round, like ``git log`` and not ``git squash``.

A round is a real user message and everything up to the next one. Once it is complete, code
(not a model) writes a short structured entry: what was asked, which tools ran with which
arguments and how much they returned, where full outputs were saved, and how it was answered.
The entry is frozen, so it never drifts and costs no model call. Entries are frozen when layer 5
first needs them (or when asked for), not as each round ends: a turn costs no extra write.

How the entries are used: when layer 5 fires, tool results of *completed* rounds are not sent
to the summariser. The round already ended in an answer that distilled them, so the first
result of each old round becomes its log entry and the others point to it. The logical thread
(user questions and answers) stays verbatim; only the bulky evidence goes. ``round_log``
and ``CompressionPlugin.round_log`` expose the entries to code (e.g. a ``kairos sessions log`` command).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kairos.context.compression.ledger import COMPRESSED, CompressionEvent, Listener, SessionCompression, emit, state_of
from kairos.context.compression.noise import calls_by_id, describe_call
from kairos.context.compression.spill import Spiller, display
from kairos.context.session import SessionView
from kairos.models.types import Message

_MAX_CALLS = 12
Saved = Callable[[int], str | None]
"""Maps a result's sequence number to the path its full text was saved to (None: not saved)."""


@dataclass(frozen=True, slots=True)
class Round:
    """Messages ``start`` to ``end - 1`` of the stored trajectory."""

    n: int
    start: int
    end: int
    complete: bool


def rounds(messages: Sequence[Message]) -> list[Round]:
    """Split at real user messages; a round is complete once answered or followed by another."""
    starts = [i for i, m in enumerate(messages) if m.from_user]
    out = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(messages)
        last = messages[end - 1]
        answered = last.role == "assistant" and not last.tool_calls
        out.append(Round(n, start, end, complete=n + 1 < len(starts) or (answered and end - 1 > start)))
    return out


def _quote(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return '"' + (text if len(text) <= limit else text[: limit - 1] + "…") + '"'


def entry(r: Round, messages: Sequence[Message], saved: Saved | None = None) -> str:
    """The frozen log text of round ``r``; ``saved`` gives a result's spill path, if any."""
    span = messages[r.start : r.end]
    calls = calls_by_id(span)
    results = [(r.start + i, m) for i, m in enumerate(span) if m.role == "tool"]
    model_calls = sum(1 for m in span if m.role == "assistant")
    lines = [
        f"round {r.n + 1} · messages {r.start}–{r.end - 1} · {model_calls} model replies · {len(results)} tool results",
        f"asked: {_quote(messages[r.start].content, 200)}",
    ]
    did = []
    for seq, m in results[:_MAX_CALLS]:
        path = saved(seq) if saved else None
        where = f" [saved: {path}]" if path else ""
        did.append(f"{describe_call(calls.get(m.tool_call_id or ''), 100)} → {len(m.content):,} chars{where}")
    if len(results) > _MAX_CALLS:
        did.append(f"… and {len(results) - _MAX_CALLS} more")
    if did:
        lines.append("did: " + "; ".join(did))
    answer = next((m for m in reversed(span) if m.role == "assistant" and not m.tool_calls), None)
    lines.append(f"answered: {_quote(answer.content, 240)}" if answer else "answered: (no answer: interrupted)")
    return "\n".join(lines)


def record_completed(session: SessionView, st: SessionCompression, saved: Saved | None = None) -> list[int]:
    """Freeze an entry for every completed round that has none; returns their numbers.

    Incremental: only new messages are scanned for round starts, and rounds already logged are
    not looked at again (a complete round stays complete; only the last one can be open).
    """
    messages = session.message_list()
    st.round_starts.extend(i for i in range(st.round_scan, len(messages)) if messages[i].from_user)
    st.round_scan = len(messages)
    starts = st.round_starts
    new = []
    while st.rounds_logged < len(starts):
        n = st.rounds_logged
        end = starts[n + 1] if n + 1 < len(starts) else len(messages)
        last = messages[end - 1]
        answered = last.role == "assistant" and not last.tool_calls
        if not (n + 1 < len(starts) or (answered and end - 1 > starts[n])):
            break
        if st.ledger.round_entry(n) is None:
            st.ledger.freeze_round(n, entry(Round(n, starts[n], end, True), messages, saved))
            new.append(n)
        st.rounds_logged += 1
    return new


def archive_rounds(session: SessionView, st: SessionCompression, spiller: Spiller, listeners: list[Listener]) -> None:
    """Freeze the entry of every completed round that has none (an ``archived`` event for each).

    Called when layer 5 is about to use the entries (and by ``CompressionPlugin.round_log``), not
    as each round ends: the same text, one database write fewer per turn. An entry names the file a
    result was saved to when a frozen spill or compression of it points there.
    """

    def saved(seq: int) -> str | None:
        texts = [t for t in (st.ledger.get("spill", seq), st.ledger.get("compressed", seq)) if t is not None]
        if not texts:  # most results were never spilled: no path to work out
            return None
        where = display(session, spiller.path(session, seq, session.message_list()[seq]))
        return where if any(where in t for t in texts) else None

    for n in record_completed(session, st, saved):
        emit(session, st, listeners, CompressionEvent("archived", f"round {n + 1} logged", session.request_count))


def round_log(session: SessionView) -> list[str]:
    """Every round entry of the session frozen so far, oldest first (see ``CompressionPlugin.round_log``)."""
    st = state_of(session)
    out = []
    for r in rounds(session.message_list()):
        text = st.ledger.round_entry(r.n)
        if text is not None:
            out.append(text)
    return out


def archive_pointers(r: Round, messages: Sequence[Message], targets: Sequence[int], log_entry: str) -> dict[int, str]:
    """Layer-5 replacements for results of completed round ``r``: the first target gets the entry."""
    if not targets:
        return {}
    calls = calls_by_id(messages[r.start : r.end])
    first = min(targets)
    first_id = messages[first].tool_call_id
    out: dict[int, str] = {}
    for seq in sorted(targets):
        if seq == first:
            out[seq] = f"{COMPRESSED} round {r.n + 1} archived; its results were not summarised:\n{log_entry}"
        else:
            call = calls.get(messages[seq].tool_call_id or "")
            out[seq] = (
                f"{COMPRESSED} result of {describe_call(call, 100)} from round {r.n + 1} archived; "
                f"see the round log in the result of call {first_id}"
            )
    return out
