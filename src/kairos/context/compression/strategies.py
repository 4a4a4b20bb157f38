"""Layer 5: full LLM compression, in the six strategies of book Exp 2-10.

=======================  ===========================  ===============  ===========================
strategy                 when                         grouping         prompt
=======================  ===========================  ===============  ===========================
``none``                 never                        -                -
``per_result``           each result, at first sight  each on its own  generic
``merged``               prompt > trigger (80 %)      one for all      generic, input cut to fit
``task_aware``           each result, at first sight  each on its own  query + current context
``task_aware_citations`` each result, at first sight  each on its own  as above + source per fact
``windowed``             prompt > trigger (80 %)      each on its own  query + current context
=======================  ===========================  ===============  ===========================

"At first sight" means before the model sees the result: the raw text never enters the
prompt and the prefix stays append-only (no cache break, one summariser call per result).
Triggered strategies keep raw results until the prompt passes the threshold, then compress
*all* unmarked results in one batch, so the cache breaks once per batch, not every round.

Every replacement starts with ``[COMPRESSED]`` and is frozen; marked content (and content
that arrives already marked) is never compressed again, and a batch with nothing new makes
no model call. Results of completed rounds are archived (layer 4) instead of summarised.
A circuit breaker stops all attempts after ``max_failures`` consecutive failed ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kairos.context.compression.archive import archive_pointers, archive_rounds, rounds
from kairos.context.compression.config import CompressionConfig, Strategy
from kairos.context.compression.ledger import (
    COMPRESSED,
    CompressionEvent,
    Listener,
    SessionCompression,
    emit,
)
from kairos.context.compression.llm import Summarizer, SummaryError
from kairos.context.compression.noise import calls_by_id, describe_call
from kairos.context.compression.spill import Spiller, display
from kairos.context.session import SessionView
from kairos.models.types import Message, ToolCall


@dataclass(frozen=True, slots=True)
class StrategySpec:
    """What one strategy does (see the module table)."""

    llm: bool
    immediate: bool
    merged: bool
    task_aware: bool
    citations: bool


SPECS: dict[Strategy, StrategySpec] = {
    "none": StrategySpec(llm=False, immediate=False, merged=False, task_aware=False, citations=False),
    "per_result": StrategySpec(llm=True, immediate=True, merged=False, task_aware=False, citations=False),
    "merged": StrategySpec(llm=True, immediate=False, merged=True, task_aware=False, citations=False),
    "task_aware": StrategySpec(llm=True, immediate=True, merged=False, task_aware=True, citations=False),
    "task_aware_citations": StrategySpec(llm=True, immediate=True, merged=False, task_aware=True, citations=True),
    "windowed": StrategySpec(llm=True, immediate=False, merged=False, task_aware=True, citations=False),
}


def spec_for(cfg: CompressionConfig) -> StrategySpec:
    """The configured strategy's spec, with citations added when ``cfg.citations`` asks for them."""
    spec = SPECS[cfg.strategy]
    if cfg.citations and spec.task_aware and not spec.citations:
        spec = StrategySpec(spec.llm, spec.immediate, spec.merged, spec.task_aware, citations=True)
    return spec


def _strip_marker(text: str) -> str:
    """The summary inside a frozen replacement, without its header and pointer lines."""
    body = text.removeprefix(COMPRESSED).strip()
    head, _, rest = body.partition("\n")
    body = rest if head.endswith(":") and rest else body
    return "\n".join(x for x in body.splitlines() if not x.startswith("[original: ")).strip()


class Compressor:
    """Runs layer-5 attempts for the sessions of one agent."""

    def __init__(
        self, cfg: CompressionConfig, summarizer: Summarizer, spiller: Spiller, listeners: list[Listener]
    ) -> None:
        self.cfg = cfg
        self.spec = spec_for(cfg)
        self.summarizer = summarizer
        self.spiller = spiller
        self.listeners = listeners

    def targets(self, session: SessionView, st: SessionCompression, seqs: Iterable[int] | None = None) -> list[int]:
        """Unmarked tool results worth compressing (no layer 2/5 decision, not already marked)."""
        messages = session.message_list()
        out = []
        for seq in range(len(messages)) if seqs is None else seqs:
            m = messages[seq]
            if m.role != "tool" or len(m.content) < max(self.cfg.min_chars, 1):
                continue
            if m.content.startswith(COMPRESSED):
                continue
            if st.ledger.get("compressed", seq) is not None or st.ledger.get("noise", seq) is not None:
                continue
            out.append(seq)
        return out

    def _context(self, st: SessionCompression, messages: Sequence[Message], before: int) -> str:
        """What the agent already knows: earlier compressed results, newest last."""
        parts = []
        for seq in range(before):
            if messages[seq].role == "tool" and (text := st.ledger.get("compressed", seq)) is not None:
                parts.append(_strip_marker(text))
        return "\n".join(parts)

    def _original_note(self, session: SessionView, seq: int, message: Message) -> str:
        if not self.cfg.keep_originals:
            return ""
        path = self.spiller.path(session, seq, message)
        if not path.exists():
            where, _ = self.spiller.save(session, seq, message)
            if where is None:
                return ""
        return f'\n[original: read_file(path="{display(session, path)}")]'

    async def attempt(self, session: SessionView, st: SessionCompression, targets: list[int], why: str) -> int:
        """One compression attempt over ``targets``; returns how many results it replaced."""
        if st.tripped or not self.spec.llm:
            return 0
        if not targets:
            if not st.idle:
                event = CompressionEvent("nothing_new", f"{why}: nothing new to compress", session.request_count)
                emit(session, st, self.listeners, event)
            st.idle = True
            return 0
        messages = session.message_list()
        calls = calls_by_id(messages)
        replaced: dict[int, str] = {}
        errors: list[str] = []
        rest = list(targets)
        if self.cfg.archive:
            archive_rounds(session, st, self.spiller, self.listeners)
            for r in rounds(messages):
                mine = [s for s in rest if r.start <= s < r.end]
                log_entry = st.ledger.round_entry(r.n)
                if not r.complete or not mine or log_entry is None:
                    continue
                replaced.update(archive_pointers(r, messages, mine, log_entry))
                rest = [s for s in rest if s not in mine]
        calls_before, tokens_before = self.summarizer.calls, self.summarizer.prompt_tokens
        if rest and self.spec.merged:
            try:
                items = [(describe_call(calls.get(messages[s].tool_call_id or "")), messages[s].content) for s in rest]
                summary = await self.summarizer.merge(items)
            except SummaryError as e:
                errors.append(str(e))
            else:
                first = rest[0]
                replaced[first] = f"{COMPRESSED} merged summary of {len(rest)} results:\n{summary}"
                pointer = f"{COMPRESSED} merged into the summary in the result of call {messages[first].tool_call_id}"
                for s in rest[1:]:
                    replaced[s] = pointer
        else:
            for seq in rest:
                try:
                    replaced[seq] = await self._one(session, st, messages, calls, seq, replaced)
                except SummaryError as e:  # stop here: a broken summariser must not be called once per result
                    errors.append(str(e))
                    break
        st.llm_calls += self.summarizer.calls - calls_before
        st.summarizer_prompt_tokens += self.summarizer.prompt_tokens - tokens_before
        return self._commit(session, st, messages, replaced, errors, why)

    async def _one(
        self,
        session: SessionView,
        st: SessionCompression,
        messages: Sequence[Message],
        calls: dict[str, ToolCall],
        seq: int,
        fresh: dict[int, str],
    ) -> str:
        """The frozen text for one result (summary, marker, pointer to the original)."""
        m = messages[seq]
        call = calls.get(m.tool_call_id or "")
        source = f"{describe_call(call)}, call {m.tool_call_id}"
        if self.spec.task_aware:
            r = next(r for r in rounds(messages) if r.start <= seq < r.end)
            context = self._context(st, messages, seq)
            context = "\n".join([context, *(_strip_marker(t) for s, t in sorted(fresh.items()) if s < seq)]).strip()
            query = messages[r.start].content
            summary = await self.summarizer.summarize(
                m.content, source=source, query=query, context=context, citations=self.spec.citations
            )
        else:
            summary = await self.summarizer.summarize(m.content, source=source)
        text = f"{COMPRESSED} {describe_call(call, 100)}, {len(m.content):,} chars:\n{summary}"
        if len(text) >= len(m.content):
            raise SummaryError(f"the summary of call {m.tool_call_id} ({len(text)} chars) is not shorter than it")
        return text + self._original_note(session, seq, m)

    def _commit(
        self,
        session: SessionView,
        st: SessionCompression,
        messages: Sequence[Message],
        replaced: dict[int, str],
        errors: list[str],
        why: str,
    ) -> int:
        before = after = 0
        for seq, text in sorted(replaced.items()):
            frozen = st.ledger.freeze("compressed", seq, text)
            before += len(messages[seq].content)
            after += len(frozen)
        st.original_chars += before
        st.compressed_chars += after
        n = len(replaced)
        if replaced:
            st.idle = False
            msg = f"{why}: compressed {n} tool results ({before:,} → {after:,} chars)"
            event = CompressionEvent("compressed", msg, session.request_count, tuple(replaced))
            emit(session, st, self.listeners, event)
        if not errors:
            st.failures = 0
            return n
        st.failures += 1
        msg = f"{why}: compression attempt failed ({st.failures}/{self.cfg.max_failures}): {errors[0]}"
        emit(session, st, self.listeners, CompressionEvent("failed", msg, session.request_count))
        if st.failures >= self.cfg.max_failures:
            st.tripped = True
            msg = (
                f"context compression stopped for this session after {st.failures} consecutive failures "
                f"(last: {errors[-1]}); the context will not be compressed any more and may overflow. "
                "Check the summarizer model, or start a new session."
            )
            emit(session, st, self.listeners, CompressionEvent("breaker_tripped", msg, session.request_count))
        return n
