"""Near overflow: local layers first, then provider-side editing (layer 3) if the backend has it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kairos.agent.events import FinalAnswer, RunError
from kairos.context.compression import (
    COMPRESSED,
    ClearToolUses,
    CompressionConfig,
    CompressionEvent,
    ContextEditingBackend,
    ProviderContextEditing,
    state_of,
)
from kairos.context.session import Session
from kairos.models.types import Message, ModelRequest, ToolCall
from kairos.testing import ScriptedModel, call, reply
from tests.context.compression.helpers import collect, config, make_agent, page


@dataclass
class EditingModel(ScriptedModel):
    """A backend that advertises provider-side editing: it 'clears' all but the last tool result."""

    edits: list[ClearToolUses] = field(default_factory=list)
    edited: set[int] = field(default_factory=set)

    def with_context_edit(self, request: ModelRequest, edit: ClearToolUses) -> ModelRequest | None:
        self.edits.append(edit)
        out = replace(request, temperature=request.temperature + 1e-9)  # a distinct request object
        self.edited.add(id(out))
        return out

    def count_tokens(self, request: ModelRequest) -> int:
        full = super().count_tokens(request)
        return full // 4 if id(request) in self.edited else full


def test_default_editor_does_nothing_without_backend_support() -> None:
    assert not isinstance(ScriptedModel(), ContextEditingBackend)
    assert isinstance(EditingModel(), ContextEditingBackend)


async def test_default_editor_returns_none_for_plain_backends(session: Session) -> None:
    req = ModelRequest("s", "", (), (Message.user("x"),))
    assert await ProviderContextEditing().edit(ScriptedModel(), session, req, 10, 5) is None


async def test_provider_editing_is_used_only_when_still_over_the_window(session: Session) -> None:
    steps = [reply("", call("fetch", {"tag": t, "chars": 3000})) for t in "abc"]
    model = EditingModel([*steps, reply("done")], context_window=2200)
    events: list[CompressionEvent] = []
    agent, _ = make_agent(model, config(strategy="none"), events=events)
    run = await collect(agent, session, "q")
    assert isinstance(run[-1], FinalAnswer) and run[-1].text == "done"
    edits = [e for e in events if e.kind == "provider_edit"]
    assert model.edits and len(edits) == len(model.edits)
    # never used while the request fits: only the requests that were over the window were edited
    assert len(model.edits) < len(model.requests)
    assert all(m.role != "tool" or not m.content.startswith(COMPRESSED) for m in session.messages)


async def test_provider_editing_can_be_switched_off(session: Session) -> None:
    steps = [reply("", call("fetch", {"tag": t, "chars": 3000})) for t in "abc"]
    model = EditingModel([*steps, reply("done")], context_window=2200)
    agent, _ = make_agent(model, config(strategy="none", provider_editing=False))
    run = await collect(agent, session, "q")
    assert isinstance(run[-1], RunError) and model.edits == []


async def test_overflow_hook_compresses_first_and_returns_a_request_that_fits(session: Session) -> None:
    model = ScriptedModel([], context_window=2000)
    summ = ScriptedModel([lambda r: reply("Facts.")] * 4)
    agent, ext = make_agent(model, config(trigger_ratio=1.0), summarizer=summ)
    session.append(
        Message.user("q"),
        Message.assistant("", (ToolCall("c1", "fetch", '{"tag": "a"}'),)),
        Message.tool("c1", page("a", 12_000), "fetch"),
    )
    ctx = await agent.context(session)
    request = ctx.build()
    tokens, limit = model.count_tokens(request), 2000 - 256
    smaller = await ext.on_overflow(ctx, request, tokens, limit)
    assert smaller is not None and model.count_tokens(smaller) <= limit
    assert smaller.messages[2].content.startswith(COMPRESSED) and state_of(session).ledger.get("compressed", 2)


async def test_disabled_compression_installs_nothing(session: Session) -> None:
    model = ScriptedModel([reply("hi")])
    agent, _ = make_agent(model, CompressionConfig(enabled=False))
    ctx = await agent.context(session)
    assert agent.builder.views == ()
    assert await agent.plugins[0].at_safe_point(ctx, "before_request") == ()
    assert state_of(session).ledger.get("spill", 0) is None
