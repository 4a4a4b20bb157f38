"""``CompressionPlugin``: the five layers of :mod:`kairos.context.compression` as one plugin.

It is a ``compress``-stage plugin: it runs after every other plugin, so its token check sees what
they append.

Decisions are made at the safe point before each model call (and, when a request is over the
window, in its overflow hook), and each one is frozen in the session. What
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

A result the executor capped reaches the spill with its whole text (``metadata["full_content"]``),
so the spill file keeps the full output and the preview states its real size.
"""

from __future__ import annotations

from collections.abc import Sequence

from kairos.agent.plugin import Plugin, RunContext, SafePoint
from kairos.context.builder import TrajectoryView
from kairos.context.compression import noise
from kairos.context.compression.archive import archive_rounds, round_log
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
from kairos.context.compression.spill import Spiller
from kairos.context.compression.strategies import Compressor
from kairos.context.compression.view import CompressionView
from kairos.context.session import SessionView
from kairos.models.base import Model
from kairos.models.types import Message, ModelRequest, ToolCall
from kairos.tools.base import Resource, Tool, ToolResult
from kairos.tools.executor import FULL_CONTENT

_ERRORS_KEY: Resource[set[str]] = Resource("kairos.compression.errors")
_STATUS_SLACK = 1024
"""Tokens the trailing status (and other per-request text) may grow by between two measurements."""
_FULL_KEY: Resource[dict[str, str]] = Resource("kairos.compression.full")


def _byte_bound(m: Message) -> int:
    """More tokens than ``m`` can take: its UTF-8 bytes plus per-message and per-call overhead."""
    return len(m.content.encode()) + sum(len(c.arguments) + 32 for c in m.tool_calls) + 16


class CompressionPlugin(Plugin):
    """Spill, noise removal, provider editing, round archive and LLM compression for one agent.

    Args:
        config: ``[compression]`` settings; default :class:`CompressionConfig`'s defaults.
        summarizer: the model that writes summaries; defaults to the agent's own model.
        editor: layer 3, tried when a request is still over the window; default the backend's
            own context editing where it has one.
        listeners: told about every compression event (a failing listener never stops a run).
    """

    stage = "compress"

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
        self._compressors: dict[int, Compressor] = {}

    def views(self) -> Sequence[TrajectoryView]:
        """The projection that shows frozen replacements instead of stored results."""
        return (self.view,) if self.config.enabled else ()

    def compressor(self, model: Model) -> Compressor:
        """The compressor for an agent's model (the summariser defaults to it)."""
        comp = self._compressors.get(id(model))
        if comp is None:
            cfg = self.config
            summarizer = Summarizer(
                self.summarizer_model or model,
                max_tokens=cfg.summary_max_tokens,
                context_chars=cfg.context_chars,
                focus_chars=cfg.focus_chars,
            )
            comp = self._compressors[id(model)] = Compressor(cfg, summarizer, self.spiller, self.listeners)
        return comp

    # -- hooks ------------------------------------------------------------------------------

    async def after_tool(self, ctx: RunContext, call: ToolCall, tool: Tool | None, result: ToolResult) -> ToolResult:
        """Remember which calls failed (the trajectory does not say) and the whole text of capped outputs."""
        if not self.config.enabled:
            return result
        state = ctx.session.state
        if result.is_error:
            state.get_or_put(_ERRORS_KEY, set).add(call.id)
        full = result.metadata.get(FULL_CONTENT)
        if isinstance(full, str) and self.config.spill.enabled:
            state.get_or_put(_FULL_KEY, dict)[call.id] = full
        return result

    async def at_safe_point(self, ctx: RunContext, at: SafePoint) -> Sequence[Message]:
        """Before each request: run the layers (they freeze decisions; nothing is appended)."""
        if self.config.enabled and at == "before_request":
            await self.before_request(ctx)
        return ()

    async def before_request(self, ctx: RunContext) -> None:
        """First-sight layers, the round archive, immediate strategies, then the thresholds."""
        session = ctx.session
        st = state_of(session)
        messages = session.message_list()
        start = st.seen
        self._freeze_errors(session, st)
        self._first_sight(session, st, start)
        comp = self.compressor(ctx.model)
        if comp.spec.immediate:
            new = comp.targets(session, st, range(start, len(messages)))
            if new:
                await comp.attempt(session, st, new, "new tool results")
        st.seen = len(messages)
        await self._thresholds(ctx, st)

    async def on_overflow(self, ctx: RunContext, request: ModelRequest, tokens: int, limit: int) -> ModelRequest | None:
        """Every local layer at once, then provider-side editing."""
        if not self.config.enabled:
            return None
        session = ctx.session
        st = state_of(session)
        comp = self.compressor(ctx.model)
        changed = self._past_noise(session, st, f"over the window ({tokens}/{limit} tokens)")
        changed += await comp.attempt(
            session, st, comp.targets(session, st), f"over the window ({tokens}/{limit} tokens)"
        )
        if changed:
            request = ctx.build()
            tokens = ctx.model.count_tokens(request)
            if tokens <= limit:
                return request
        if self.config.provider_editing:
            edited = await self.editor.edit(ctx.model, session, request, tokens, limit)
            if edited is not None:
                msg = f"provider-side context editing requested at {tokens}/{limit} tokens"
                emit(session, st, self.listeners, CompressionEvent("provider_edit", msg, session.request_count))
                return edited
        return request if changed else None

    def round_log(self, session: SessionView) -> list[str]:
        """The log entry of every completed round of ``session``, oldest first (frozen now if not yet)."""
        if self.config.archive:
            archive_rounds(session, state_of(session), self.spiller, self.listeners)
        return round_log(session)

    # -- layers -----------------------------------------------------------------------------

    def _freeze_errors(self, session: SessionView, st: SessionCompression) -> None:
        pending = session.state.get(_ERRORS_KEY)
        if not pending:
            return
        for seq, m in enumerate(session.message_list()):
            if m.role == "tool" and m.tool_call_id in pending:
                st.ledger.mark_error(seq, m.name or "")
                pending.discard(m.tool_call_id)

    def _first_sight(self, session: SessionView, st: SessionCompression, start: int) -> None:
        """Layers that decide before the model sees a result: no cache break."""
        messages = session.message_list()
        cfg = self.config
        if cfg.noise.enabled and cfg.noise.duplicates:
            found = noise.duplicates(messages, min_chars=cfg.noise.min_chars, start=st.dup_scan, first=st.first_results)
            st.dup_scan = len(messages)
            new = [s for s in sorted(found) if s >= start and st.ledger.get("noise", s) is None]
            for seq in new:
                st.ledger.freeze("noise", seq, found[seq])
            if new:
                msg = f"{len(new)} duplicate tool results replaced by pointers"
                event = CompressionEvent("noise_removed", msg, session.request_count, tuple(new))
                emit(session, st, self.listeners, event)
        full = session.state.take(_FULL_KEY) or {}
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
                whole = full.get(m.tool_call_id or "")
                st.ledger.freeze("spill", seq, self.spiller.decide(session, seq, m, whole))
                size = len(whole) if whole is not None else len(m.content)
                msg = f"tool result of {size:,} chars spilled to a file (call {m.tool_call_id})"
                emit(session, st, self.listeners, CompressionEvent("spilled", msg, session.request_count, (seq,)))

    def _past_noise(self, session: SessionView, st: SessionCompression, why: str) -> int:
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

    def _surely_below(self, ctx: RunContext, st: SessionCompression, usable: int) -> bool:
        """Whether a cheap upper bound puts the prompt under every threshold (then it need not be built).

        The bound is the last measured prompt plus every UTF-8 byte of the messages since (a byte-level
        BPE token covers at least one byte) plus slack for the status message; near a threshold the
        prompt is built and counted exactly.
        """
        if st.measured is None:
            return False
        seen, tokens = st.measured
        messages = ctx.session.message_list()
        if len(messages) < seen:
            return False
        grown = sum(_byte_bound(m) for m in messages[seen:])
        ratios = [self.config.trigger_ratio] if self.compressor(ctx.model).spec.llm else [1.0]
        if self.config.noise.enabled:
            ratios.append(self.config.noise.at_ratio)
        if tokens + grown + _STATUS_SLACK >= min(ratios) * usable:
            return False
        st.measured = (len(messages), tokens + grown)  # the bound is the next base: O(new messages)
        return True

    async def _thresholds(self, ctx: RunContext, st: SessionCompression) -> None:
        session = ctx.session
        usable = ctx.model.context_window - ctx.agent.max_tokens
        if self._surely_below(ctx, st, usable):
            return
        request = ctx.build()
        usable = ctx.model.context_window - request.max_tokens
        tokens = ctx.model.count_tokens(request)
        st.measured = (len(session.message_list()), tokens)
        noisy = self.config.noise.enabled and tokens > self.config.noise.at_ratio * usable
        if noisy and self._past_noise(session, st, f"prompt at {tokens}/{usable} tokens"):
            tokens = ctx.model.count_tokens(ctx.build())
        comp = self.compressor(ctx.model)
        if comp.spec.llm and tokens > self.config.trigger_ratio * usable:
            await comp.attempt(session, st, comp.targets(session, st), f"prompt at {tokens}/{usable} tokens")

    # -- inspection -------------------------------------------------------------------------

    def events(self, session: SessionView) -> list[CompressionEvent]:
        """What compression did in ``session`` (spills, compressions, failures)."""
        return list(state_of(session).events)

    def status_lines(self, ctx: RunContext) -> Sequence[str]:
        """One line when compression needs attention (the breaker is open)."""
        if state_of(ctx.session).tripped:
            return ("context compression: stopped after repeated failures; the context may overflow",)
        return ()


__all__ = ["CompressionPlugin"]
