"""Layer 5: threshold, batch, [COMPRESSED] markers, the prefix invariant, the circuit breaker."""

from __future__ import annotations

from pathlib import Path

from kairos.agent import Agent
from kairos.agent.events import AgentEvent, FinalAnswer, RequestStats, RunError
from kairos.context.compression import (
    COMPRESSED,
    SPECS,
    STRATEGIES,
    CompressionEvent,
    state_of,
)
from kairos.context.session import Session, SessionStore
from kairos.errors import ModelUnavailableError
from kairos.models.types import Message, ModelRequest, ModelResponse, SystemPrompt, ToolCall
from kairos.plugins.compression import CompressionPlugin
from kairos.plugins.status_bar import StatusBar, StatusBarConfig
from kairos.testing import ScriptedModel, call, reply
from tests.context.compression.helpers import CountingModel, collect, config, fetch, make_agent, page


def summarizer(n: int = 40) -> ScriptedModel:
    return ScriptedModel([lambda r: reply("Facts: tag is important (2024).")] * n, context_window=8000)


def fetches(*tags: str, chars: int = 3000) -> list[ModelResponse]:
    return [reply("", call("fetch", {"tag": t, "chars": chars})) for t in tags]


def sent_texts(model: ScriptedModel) -> list[str]:
    return [r.messages[0].content for r in model.requests]


def stats(events: list[AgentEvent]) -> list[RequestStats]:
    return [e for e in events if isinstance(e, RequestStats)]


def test_every_exp_2_10_strategy_has_a_spec() -> None:
    assert set(SPECS) == set(STRATEGIES) and len(STRATEGIES) == 6
    assert not SPECS["none"].llm
    assert SPECS["windowed"].task_aware and not SPECS["windowed"].immediate
    assert SPECS["merged"].merged and not SPECS["merged"].task_aware
    assert SPECS["task_aware_citations"].citations and SPECS["per_result"].immediate


async def test_windowed_waits_for_80_percent_then_compresses_every_unmarked_result(session: Session) -> None:
    model = ScriptedModel([*fetches("a", "b", "c", "d"), reply("done")], context_window=3000)
    summ = summarizer()
    events: list[CompressionEvent] = []
    agent, _ = make_agent(model, config(), summarizer=summ, events=events)
    run = await collect(agent, session, "find the facts")
    assert isinstance(run[-1], FinalAnswer) and run[-1].text == "done"
    usable = 3000 - 256
    fired = [e for e in events if e.kind == "compressed"]
    assert len(fired) == 1 and fired[0].seqs == (2, 4, 6)  # one batch: all three unmarked results
    assert all(s.estimated_prompt_tokens <= 0.8 * usable for s in stats(run) if s.index < fired[0].request)
    assert len(summ.requests) == 3
    assert all(COMPRESSED not in t for t in sent_texts(summ))
    last = model.requests[-1].messages
    assert [m.content.startswith(COMPRESSED) for m in last if m.role == "tool"] == [True, True, True, False]


async def test_trigger_is_the_configured_share_of_the_usable_window(session: Session) -> None:
    model = CountingModel([], context_window=10_256)
    summ = summarizer()
    agent, ext = make_agent(model, config(trigger_ratio=0.8), summarizer=summ)
    model.forced = 7999  # 80 % of 10,000 usable is 8,000
    ctx = await agent.context(session)
    await ext.before_request(ctx)
    session.append(*_fake_turn(session))
    await ext.before_request(ctx)
    assert summ.requests == []
    model.forced = 8001
    await ext.before_request(ctx)
    assert len(summ.requests) == 1


def _fake_turn(session: Session) -> list[Message]:
    return [
        Message.user("q"),
        Message.assistant("", (ToolCall("c1", "fetch", '{"tag": "a"}'),)),
        Message.tool("c1", page("a", 2000), "fetch"),
    ]


async def test_compression_never_changes_the_prefix_or_the_stored_trajectory(workspace: Path) -> None:
    store = SessionStore(workspace)
    session = store.new()
    model = ScriptedModel([*fetches("a", "b", "c", "d", "e", "f"), reply("done")], context_window=3000)
    events: list[CompressionEvent] = []
    agent, _ = make_agent(model, config(), summarizer=summarizer(), events=events)
    run = await collect(agent, session, "find the facts")
    reqs = model.requests
    assert len({r.system for r in reqs}) == 1 and len({tuple(t.serialized() for t in r.tools) for r in reqs}) == 1
    frozen = state_of(session).ledger
    for r in reqs:
        for i, m in enumerate(r.messages):
            stored = session.messages[i]
            if m.role != "tool":
                assert m.serialized() == stored.serialized()  # user and assistant messages: byte-identical
            elif m.content != stored.content:
                assert m.content == frozen.get("compressed", i)  # only documented, frozen replacements
    fired = {e.request for e in events if e.kind == "compressed"}
    assert fired
    for s in stats(run):
        assert s.audit.ok == (s.index not in fired), s.audit.describe()
        if not s.audit.ok:
            at = int(s.audit.diverged_at.split("[")[1].split("]")[0])  # type: ignore[union-attr]
            assert session.messages[at].role == "tool"
    assert [m.serialized() for m in store.trajectories.load_messages(session.id)] == [
        m.serialized() for m in session.messages
    ]
    await session.aclose()
    store.close()


async def test_compressed_content_is_never_compressed_again(session: Session) -> None:
    model = ScriptedModel([*fetches("a", "b", "c", "d", "e", "f", "g"), reply("done")], context_window=3000)
    summ = summarizer()
    events: list[CompressionEvent] = []
    agent, _ = make_agent(model, config(), summarizer=summ, events=events)
    await collect(agent, session, "find the facts")
    batches = [e.seqs for e in events if e.kind == "compressed"]
    assert len(batches) >= 2
    flat = [s for b in batches for s in b]
    assert len(flat) == len(set(flat))  # every result compressed at most once
    assert len(summ.requests) == len(flat)
    assert all(COMPRESSED not in t and "Facts: tag" not in t.split("Text to compress:")[1] for t in sent_texts(summ))


async def test_results_that_arrive_marked_are_left_alone(session: Session) -> None:
    marked = f"{COMPRESSED} a summary from elsewhere " + "x" * 2000
    model = CountingModel([reply("", call("note", {"text": marked})), reply("done")])
    summ = summarizer()
    agent, _ = make_agent(model, config(), summarizer=summ)
    model.forced = 10**6 - 1  # far past the trigger, just under the window
    model.context_window = 10**6 + 256
    await collect(agent, session, "go")
    assert summ.requests == []


async def test_nothing_new_makes_no_model_call(session: Session) -> None:
    model = CountingModel([reply("", call("note", {"text": "small"})), reply("done")])
    model.context_window = 10_256
    model.forced = 9_000
    summ = ScriptedModel([])  # any call would raise
    events: list[CompressionEvent] = []
    agent, _ = make_agent(model, config(), summarizer=summ, events=events)
    run = await collect(agent, session, "go")
    assert isinstance(run[-1], FinalAnswer)
    assert summ.requests == [] and state_of(session).failures == 0
    assert [e.kind for e in events] == ["nothing_new"]  # reported once, not on every request


async def test_circuit_breaker_trips_after_three_failures_and_stops_trying(session: Session) -> None:
    model = ScriptedModel([*fetches(*"abcdefgh", chars=1200), reply("done")], context_window=2000)
    summ = ScriptedModel([ModelUnavailableError("summariser down", model="s")] * 10)
    events: list[CompressionEvent] = []
    agent, ext = make_agent(model, config(), summarizer=summ, events=events)
    run = await collect(agent, session, "go")
    kinds = [e.kind for e in events]
    assert kinds.count("failed") == 3 and kinds.count("breaker_tripped") == 1
    assert len(summ.requests) == 3  # one per attempt (the first target fails, the attempt counts once)
    trip = next(e for e in events if e.kind == "breaker_tripped")
    assert "stopped" in trip.message and "3 consecutive failures" in trip.message
    assert state_of(session).tripped and ext.status_lines(await agent.context(session))
    errors = [e for e in run if isinstance(e, RunError)]
    assert errors and "prompt tokens" in errors[0].message  # it then overflows safely, without retry loops


async def test_a_success_resets_the_failure_count(session: Session) -> None:
    summ = ScriptedModel([ModelUnavailableError("blip", model="s"), *([lambda r: reply("Facts.")] * 20)])
    model = ScriptedModel([*fetches(*"abcdef", chars=1200), reply("done")], context_window=2000)
    agent, _ = make_agent(model, config(), summarizer=summ)
    await collect(agent, session, "go")
    assert state_of(session).failures == 0 and not state_of(session).tripped


async def test_immediate_strategies_never_show_the_raw_result(session: Session) -> None:
    for strategy in ("per_result", "task_aware", "task_aware_citations"):
        model = ScriptedModel([*fetches("a", "b"), reply("done")])
        summ = summarizer()
        agent, _ = make_agent(model, config(strategy=strategy), summarizer=summ)
        store = SessionStore(session.workspace)
        s = store.new()
        run = await collect(agent, s, "who left?")
        tools = [m for r in model.requests for m in r.messages if m.role == "tool"]
        assert tools and all(m.content.startswith(COMPRESSED) for m in tools)
        assert all(e.audit.ok for e in stats(run))  # first-sight replacements never break the cache
        task_aware = strategy != "per_result"
        assert all(("Given the search query: who left?" in t) == task_aware for t in sent_texts(summ))
        await s.aclose()
        store.close()


async def test_task_aware_context_holds_what_was_compressed_before(session: Session) -> None:
    model = ScriptedModel([*fetches("a", "b"), reply("done")])

    def first_line(r: ModelRequest) -> ModelResponse:  # a summariser that copies, as it is asked to
        return reply(r.messages[0].content.split("Text to compress:\n", 1)[1].splitlines()[0])

    summ = ScriptedModel([first_line] * 4)
    agent, _ = make_agent(model, config(strategy="task_aware"), summarizer=summ)
    await collect(agent, session, "q")
    first, second = sent_texts(summ)
    assert "Current context: (nothing yet)" in first
    assert "Current context: a line 0: fact 0 about a." in second


async def test_merged_strategy_makes_one_summary_and_pointers(session: Session) -> None:
    model = ScriptedModel([*fetches("a", "b", "c", "d"), reply("done")], context_window=3000)
    summ = summarizer()
    agent, _ = make_agent(model, config(strategy="merged"), summarizer=summ)
    await collect(agent, session, "q")
    assert len(summ.requests) == 1
    tools = [m.content for m in model.requests[-1].messages if m.role == "tool"]
    assert tools[0].startswith(f"{COMPRESSED} merged summary of 3 results")
    assert tools[1].startswith(f"{COMPRESSED} merged into the summary") and tools[2] == tools[1]


async def test_none_keeps_raw_results_and_overflows(session: Session) -> None:
    model = ScriptedModel([*fetches("a", "b", "c", "d"), reply("done")], context_window=3000)
    agent, _ = make_agent(model, config(strategy="none"), summarizer=ScriptedModel([]))
    run = await collect(agent, session, "q")
    assert isinstance(run[-1], RunError) and "prompt tokens" in run[-1].message


async def test_compressed_requests_are_identical_after_resume(workspace: Path) -> None:
    store = SessionStore(workspace)
    session = store.new()
    model = ScriptedModel([*fetches("a", "b", "c", "d"), reply("done")], context_window=3000)
    agent, _ = make_agent(model, config(), summarizer=summarizer())
    await collect(agent, session, "q")
    before = model.requests[-1].messages
    await session.aclose()
    store.close()
    store2 = SessionStore(workspace)
    resumed = store2.resume(session.id)
    model2 = ScriptedModel([reply("again")], context_window=3000)
    agent2, _ = make_agent(model2, config(), summarizer=ScriptedModel([]))
    await collect(agent2, resumed, "more")
    after = model2.requests[0].messages
    assert [m.serialized() for m in after[: len(before)]] == [m.serialized() for m in before]
    await resumed.aclose()
    store2.close()


async def test_a_result_that_jumps_past_the_window_is_compressed_before_sending(session: Session) -> None:
    model = ScriptedModel([*fetches("huge", chars=9000), reply("done")], context_window=2500)
    summ = summarizer()
    events: list[CompressionEvent] = []
    agent, _ = make_agent(model, config(), summarizer=summ, events=events)
    run = await collect(agent, session, "q")
    assert isinstance(run[-1], FinalAnswer) and run[-1].text == "done"
    assert any(e.kind == "compressed" for e in events)
    assert all(model.count_tokens(r) <= 2500 - 256 for r in model.requests)


async def test_tripped_breaker_is_shown_in_the_status_bar(session: Session) -> None:
    model = ScriptedModel([*fetches(*"abcdefgh", chars=1200), reply("done")], context_window=2000)
    summ = ScriptedModel([ModelUnavailableError("summariser down", model="s")] * 10)
    ext = CompressionPlugin(config(), summarizer=summ)
    bar = StatusBar(StatusBarConfig(timestamps=False, system_state=False, current_request=False, todo=False))
    agent = Agent(
        model, tools=[fetch], system=SystemPrompt("You are a test agent."), max_tokens=256, plugins=[bar, ext]
    )
    await collect(agent, session, "go")
    assert state_of(session).tripped
    ctx = await agent.context(session)
    status = bar.render(ctx, ctx.status_lines())
    assert status is not None and "context compression: stopped" in status
