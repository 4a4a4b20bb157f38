"""One session's ingest: scrub, index, extract, notes; resumable step by step, and only what is new.

:func:`ingest_session` is what :meth:`UserMemory.ingest_session <kairos.memory.core.UserMemory.ingest_session>`
runs. Two things make it cheap to run in the background, where it may be stopped at any time (the
agent needs the model again, the process exits):

* Every model answer of an ingest (the PII pass's result, each extraction window's operations,
  each note) is kept in the memory database until the ingest ends, so an attempt cut short
  resumes after its last answered call: its writes are undone, the kept answers replayed.
* A session ingested before (a chat's earlier turns) is not read again: only the messages after
  the longest ingested prefix are scrubbed, indexed (as the next rounds of the session) and shown
  to the extractor; what the user said earlier still backs a memory (:mod:`kairos.memory.support`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from kairos.knowledge.chunking import Turn
from kairos.memory.excerpts import ROUND_SPEAKER
from kairos.memory.extract import (
    MAX_MESSAGE_CHARS,
    ExtractedOp,
    ask_facts,
    ask_operations,
    ask_session_note,
    extraction_prompt,
    plain_adds,
    render_transcript,
    windows,
)
from kairos.memory.records import IngestReport, MemoryStore, session_digest
from kairos.memory.support import is_memory_output
from kairos.models.types import Message

if TYPE_CHECKING:
    from kairos.memory.core import UserMemory

log = logging.getLogger("kairos.memory")


@dataclass(frozen=True, slots=True)
class Steps:
    """The kept results of one ledger entry's steps (see the module docstring)."""

    store: MemoryStore
    owner: str
    session_id: str
    digest: str

    def get(self, step: str) -> str | None:
        """A step's kept result, or None."""
        return self.store.step(self.owner, self.session_id, self.digest, step)

    def keep(self, step: str, value: str) -> None:
        """Keep a step's result until the ingest ends."""
        self.store.keep_step(self.owner, self.session_id, self.digest, step, value)


def ingested_prefix(store: MemoryStore, owner: str, session_id: str, messages: Sequence[Message]) -> int:
    """How many of ``messages`` a finished ingest of this session already covered (0: none)."""
    for digest, n in store.ingested(owner, session_id):
        if n < len(messages) and session_digest(messages[:n]) == digest:
            return n
    return 0


async def ingest_session(memory: UserMemory, messages: Sequence[Message], *, session_id: str, at: datetime) -> (
    IngestReport
):  # fmt: skip
    """See :meth:`UserMemory.ingest_session <kairos.memory.core.UserMemory.ingest_session>`."""
    report = IngestReport(session_id)
    if not any(m.from_user and m.content.strip() for m in messages):
        return report  # nothing the user said: nothing to remember
    store, user = memory.store, memory.user
    digest = session_digest(messages)
    if not store.expect_ingest(user, session_id, digest, len(messages), at.timestamp()):
        report.note = "already ingested"
        return report
    if undone := store.begin_ingest(user, session_id, digest):
        report.note = f"an interrupted ingest of this session was undone first (rows removed: {undone})"
        log.info("session %s: %s", session_id, report.note)
    start = ingested_prefix(store, user, session_id, messages)
    if start and not any(m.from_user and m.content.strip() for m in messages[start:]):
        store.end_ingest(user, session_id, digest)
        report.note = "nothing new since the last ingest"
        return report
    steps = Steps(store, user, session_id, digest)
    lap = _stopwatch(report)
    # the memory's own output (the cards, memory_search and kb results) is never a source of new memories
    messages = [replace(m, content="") if is_memory_output(m) else m for m in messages]
    # of a tool's output only what the extractor reads is scrubbed and kept (it is never stored itself)
    messages = [replace(m, content=m.content[:MAX_MESSAGE_CHARS]) if m.role == "tool" else m for m in messages]
    messages = [*(replace(m, content=memory.scrub(m.content)) for m in messages[:start]),  # backing only
                *await _scrubbed(memory, messages[start:], steps)]  # fmt: skip
    lap("scrub")
    report.rounds_indexed = _index_rounds(memory, messages, start, session_id, at)
    lap("index")
    if memory.model is None:
        store.end_ingest(user, session_id, digest)
        return report
    groups = windows(render_transcript(messages, memory.guard, first=start), memory.window_chars)
    if len(groups) > memory.max_windows:
        log.warning("memory extraction: a long session; reading its last %d of %d parts", memory.max_windows,
                    len(groups))  # fmt: skip
        groups = groups[-memory.max_windows :]
    for k, group in enumerate(groups):
        answer = await _extracted(memory, group, at, steps, f"extract:{k}")
        if answer is None:
            continue
        ops, shown = answer
        report.extracted = True
        await memory.apply(ops, messages, session_id=session_id, at=at, shown=shown, report=report)
    lap("extract")
    if memory.session_notes:
        for k, group in enumerate(groups):
            kept = steps.get(f"note:{k}")
            if kept is None:
                note = await ask_session_note(memory.model, group, at, timeout_s=memory.timeout_s)
                kept = note or ""
                steps.keep(f"note:{k}", kept)
            if kept:
                await memory.apply_note(kept, messages, session_id=session_id, at=at, report=report)
        lap("notes")
    store.end_ingest(user, session_id, digest)  # compression is not part of it: each merge is atomic
    report.compressed = await memory.compress()
    lap("compress")
    return report


async def _scrubbed(memory: UserMemory, messages: Sequence[Message], steps: Steps) -> list[Message]:
    """The new messages with personal data removed (one scrubber pass, kept as a step)."""
    kept = steps.get("scrub")
    if kept is not None:
        texts = json.loads(kept)
    elif memory.scrubber is None:
        return list(messages)
    else:
        # a tool's output is never stored (rounds are what the user and the assistant said; a fact from a tool
        # only once the user confirmed it, masked again then): the regex layer suffices, the model pass is kept
        # for what is stored, and a coding session's file contents no longer eat its budget
        said = [i for i, m in enumerate(messages) if m.role != "tool"]
        external = [not messages[i].from_user and memory.guard.provenance(messages[i]).external for i in said]
        scrubbed = await memory.scrubber.scrub_many([messages[i].content for i in said], external=external)
        texts = [memory.scrub(m.content, external=True) for m in messages]
        for i, text in zip(said, scrubbed, strict=True):
            texts[i] = text
        steps.keep("scrub", json.dumps(texts, ensure_ascii=False))
    return [m if t == m.content else replace(m, content=t) for m, t in zip(messages, texts, strict=True)]


async def _extracted(
    memory: UserMemory, group: Sequence[str], at: datetime, steps: Steps, step: str
) -> tuple[list[ExtractedOp], set[int]] | None:
    """One window's operations and the memories the extractor was shown (kept as a step; None: it failed)."""
    assert memory.model is not None
    kept = steps.get(step)
    if kept is not None:
        data = json.loads(kept)
        return [ExtractedOp(**op) for op in data["ops"]], set(data["shown"])
    related = await memory.related("\n".join(group))
    shown = {c.id for c in related}
    prompt = extraction_prompt(group, related, at)
    if memory.extractor == "facts":
        ops = await ask_facts(memory.model, prompt, timeout_s=memory.timeout_s)
        ops = plain_adds(ops, shown) if ops is not None else None
    else:
        ops = await ask_operations(memory.model, prompt, timeout_s=memory.timeout_s)
    if ops is None:
        return None  # not kept: a failed call is asked again on the next attempt
    steps.keep(step, json.dumps({"ops": [dataclasses.asdict(op) for op in ops], "shown": sorted(shown)}))
    return ops, shown


def _index_rounds(memory: UserMemory, messages: Sequence[Message], start: int, session_id: str, at: datetime) -> int:
    """The new rounds (a user message and the replies up to the next one) into the knowledge base.

    A later part of a session is its own document, its rounds numbered after the earlier parts'.
    """
    rounds: list[list[str]] = []
    before = 0
    for i, m in enumerate(messages):
        if m.from_user and m.content.strip():
            if i < start:
                before += 1
            else:
                rounds.append([f"user: {m.content.strip()}"])
        elif rounds and m.role == "assistant" and m.content.strip():
            rounds[-1].append(f"assistant: {m.content.strip()}")
    date = at.date().isoformat()
    turns = [
        Turn(ROUND_SPEAKER.format(session_id=session_id), "\n".join(r), f"{session_id}#{before + i}", at.timestamp(),
             date, {"session_id": session_id, "date": date})
        for i, r in enumerate(rounds)
    ]  # fmt: skip
    if not turns:
        return 0
    source = f"conversation/{memory.user}/{session_id}" + (f"/{start}" if start else "")
    result = memory.kb.add_conversation(
        source, turns, title=f"session {session_id} ({date})", owner=memory.user, first_position=before
    )
    memory.kb.store.flush()
    if result.status == "error":
        log.warning("indexing session %s failed: %s", session_id, result.message)
        return 0
    return len(turns)


def _stopwatch(report: IngestReport) -> Callable[[str], None]:
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        report.seconds[name] = round(report.seconds.get(name, 0.0) + now - clock, 3)
        clock = now

    return lap


__all__ = ["Steps", "ingest_session", "ingested_prefix"]
