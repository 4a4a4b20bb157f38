"""``CompressionExtension``: the five layers plugged into an agent.

Decisions are made between model calls, in ``agent.before_request`` (and, when a request is
over the window, in the builder's overflow hook), and each one is frozen in the session. What
the model sees comes from :class:`CompressionView`, a deterministic projection of the stored,
append-only trajectory; the trajectory itself is never rewritten. Per request:

1. first-sight layers on the new results: duplicates (2) and spill previews (1);
2. entries for rounds that completed (4);
3. immediate strategies summarise each new result (5);
4. build the request and count it with the model's tokenizer: past the noise ratio, superseded
   reads and retried errors are removed in one batch (2); past the trigger (80 %), the
   triggered strategies compress every unmarked result in one batch (5);
5. if the built request is still over the window, the overflow hook tries everything once
   more and then provider-side context editing (3) before the builder refuses it.

Events (spills, compressions, failures, a tripped breaker) go to the ``listeners`` and to the
``kairos.compression`` logger, and stay in ``events(session)``; the breaker's message says
that compression stopped and why, without failing the run.
"""

from __future__ import annotations

from collections.abc import Sequence

from kairos.agent.loop import Agent
from kairos.context.compression import noise
from kairos.context.compression.archive import record_completed
from kairos.context.compression.config import CompressionConfig
from kairos.context.compression.ledger import (
    CompressionEvent,
    Listener,
    SessionCompression,
    emit,
    state_of,
)
from kairos.context.compression.llm import Summarizer
from kairos.context.compression.provider import ContextEditor, ProviderContextEditing
from kairos.context.compression.spill import Spiller, display
from kairos.context.compression.strategies import Compressor
from kairos.context.compression.view import CompressionView
from kairos.context.session import Session
from kairos.models.base import Model
from kairos.models.types import ModelRequest, ToolCall
from kairos.tools.base import Tool, ToolContext, ToolResult


class CompressionExtension:
    """Spill, noise removal, provider editing, round archive and LLM compression for one agent.

    ``summarizer`` defaults to the agent's own model. Install it after extensions that append
    messages in ``before_request``, so its token check sees their messages too.
    """

    def __init__(
        self,
        config: CompressionConfig | None = None,
        *,
        summarizer: Model | None = None,
        editor: ContextEditor | None = None,
        listeners: Sequence[Listener] = (),
    ) -> None:
        self.config = config or CompressionConfig()
        self.summarizer_model = summarizer
        self.editor = editor or ProviderContextEditing()
        self.listeners = list(listeners)
        self.spiller = Spiller(self.config.spill)
        self.view = CompressionView()
        self._errors: dict[str, set[str]] = {}
        self._agent: Agent | None = None
        self._compressor: Compressor | None = None

    def tools(self) -> Sequence[Tool]:
        return ()

    def install(self, agent: Agent) -> None:
        if self._agent is not None:
            raise ValueError("a CompressionExtension serves one agent; create one per agent")
        self._agent = agent
        cfg = self.config
        summarizer = Summarizer(
            self.summarizer_model or agent.model, max_tokens=cfg.summary_max_tokens, context_chars=cfg.context_chars
        )
        self._compressor = Compressor(cfg, summarizer, self.spiller, self.listeners)
        if not cfg.enabled:
            return
        agent.builder.views.insert(0, self.view)  # it addresses stored messages: it must see them first
        agent.before_request.append(self.before_request)
        agent.builder.overflow_hooks.append(self.on_overflow)
        agent.executor.after.append(self._note_error)

    @property
    def compressor(self) -> Compressor:
        if self._compressor is None:
            raise RuntimeError("install the extension on an agent first")
        return self._compressor

    @property
    def agent(self) -> Agent:
        if self._agent is None:
            raise RuntimeError("install the extension on an agent first")
        return self._agent

    # -- hooks ------------------------------------------------------------------------------

    def _note_error(self, call: ToolCall, tool: Tool | None, result: ToolResult, ctx: ToolContext) -> ToolResult:
        """Executor hook: remember which calls failed (the trajectory does not store it)."""
        if result.is_error:
            self._errors.setdefault(ctx.session_id, set()).add(call.id)
        return result

    async def before_request(self, session: Session) -> None:
        st = state_of(session)
        messages = session.message_list()
        start = st.seen
        self._freeze_errors(session, st)
        self._first_sight(session, st, start)
        if self.config.archive:
            for n in record_completed(session, st, lambda seq: self._saved(session, st, seq)):
                event = CompressionEvent("archived", f"round {n + 1} logged", session.request_count)
                emit(session, st, self.listeners, event)
        comp = self.compressor
        if comp.spec.immediate:
            new = comp.targets(session, st, range(start, len(messages)))
            if new:
                await comp.attempt(session, st, new, "new tool results")
        st.seen = len(messages)
        await self._thresholds(session, st)

    async def on_overflow(
        self, session: Session, request: ModelRequest, tokens: int, limit: int
    ) -> ModelRequest | None:
        """Overflow hook: every local layer at once, then provider-side editing."""
        st = state_of(session)
        agent = self.agent
        changed = self._past_noise(session, st, f"over the window ({tokens}/{limit} tokens)")
        changed += await self.compressor.attempt(
            session, st, self.compressor.targets(session, st), f"over the window ({tokens}/{limit} tokens)"
        )
        if changed:
            request = agent.builder.build(session)
            tokens = agent.model.count_tokens(request)
            if tokens <= limit:
                return request
        if self.config.provider_editing:
            edited = await self.editor.edit(agent.model, session, request, tokens, limit)
            if edited is not None:
                msg = f"provider-side context editing requested at {tokens}/{limit} tokens"
                emit(session, st, self.listeners, CompressionEvent("provider_edit", msg, session.request_count))
                return edited
        return request if changed else None

    def _saved(self, session: Session, st: SessionCompression, seq: int) -> str | None:
        """The spill path of the result at ``seq`` if one was written, for round entries."""
        m = session.message_list()[seq]
        where = display(session, self.spiller.path(session, seq, m))
        texts = (st.ledger.get("spill", seq), st.ledger.get("compressed", seq))
        return where if any(t is not None and where in t for t in texts) else None

    # -- layers -----------------------------------------------------------------------------

    def _freeze_errors(self, session: Session, st: SessionCompression) -> None:
        pending = self._errors.get(session.id)
        if not pending:
            return
        for seq, m in enumerate(session.message_list()):
            if m.role == "tool" and m.tool_call_id in pending:
                st.ledger.mark_error(seq, m.name or "")
                pending.discard(m.tool_call_id)

    def _first_sight(self, session: Session, st: SessionCompression, start: int) -> None:
        """Layers that decide before the model sees a result: no cache break."""
        messages = session.message_list()
        cfg = self.config
        if cfg.noise.enabled and cfg.noise.duplicates:
            found = noise.duplicates(messages, min_chars=cfg.noise.min_chars)
            new = [s for s in sorted(found) if s >= start and st.ledger.get("noise", s) is None]
            for seq in new:
                st.ledger.freeze("noise", seq, found[seq])
            if new:
                msg = f"{len(new)} duplicate tool results replaced by pointers"
                event = CompressionEvent("noise_removed", msg, session.request_count, tuple(new))
                emit(session, st, self.listeners, event)
        if not cfg.spill.enabled:
            return
        for seq in range(start, len(messages)):
            m = messages[seq]
            if m.role != "tool":
                continue
            frozen = st.ledger.get("spill", seq)
            if frozen is not None:
                self.spiller.restore(session, seq, m, frozen)
            elif self.spiller.needs(m) and st.ledger.get("noise", seq) is None:
                st.ledger.freeze("spill", seq, self.spiller.decide(session, seq, m))
                msg = f"tool result of {len(m.content):,} chars spilled to a file (call {m.tool_call_id})"
                emit(session, st, self.listeners, CompressionEvent("spilled", msg, session.request_count, (seq,)))

    def _past_noise(self, session: Session, st: SessionCompression, why: str) -> int:
        """Superseded reads and retried errors, in one batch (they edit seen results)."""
        cfg = self.config.noise
        if not cfg.enabled:
            return 0
        messages = session.message_list()
        found: dict[int, str] = {}
        if cfg.superseded_reads:
            found.update(noise.superseded_reads(messages, min_chars=cfg.min_chars))
        if cfg.retried_errors:
            errors = [s for s, m in enumerate(messages) if m.role == "tool" and st.ledger.is_error(s)]
            found.update(noise.retried_errors(messages, errors, min_chars=cfg.min_chars))
        new = [s for s in sorted(found) if st.ledger.get("noise", s) is None and st.ledger.get("compressed", s) is None]
        for seq in new:
            st.ledger.freeze("noise", seq, found[seq])
        if new:
            msg = f"{why}: {len(new)} superseded or retried results replaced by pointers"
            emit(session, st, self.listeners, CompressionEvent("noise_removed", msg, session.request_count, tuple(new)))
        return len(new)

    async def _thresholds(self, session: Session, st: SessionCompression) -> None:
        agent = self.agent
        request = agent.builder.build(session)
        usable = agent.model.context_window - request.max_tokens
        tokens = agent.model.count_tokens(request)
        noisy = self.config.noise.enabled and tokens > self.config.noise.at_ratio * usable
        if noisy and self._past_noise(session, st, f"prompt at {tokens}/{usable} tokens"):
            tokens = agent.model.count_tokens(agent.builder.build(session))
        comp = self.compressor
        if comp.spec.llm and tokens > self.config.trigger_ratio * usable:
            await comp.attempt(session, st, comp.targets(session, st), f"prompt at {tokens}/{usable} tokens")

    # -- inspection -------------------------------------------------------------------------

    def events(self, session: Session) -> list[CompressionEvent]:
        return list(state_of(session).events)

    def status_line(self, session: Session) -> str | None:
        """One line for a status bar when compression needs attention (the breaker is open)."""
        st = state_of(session)
        if st.tripped:
            return "context compression: stopped after repeated failures; the context may overflow"
        return None
