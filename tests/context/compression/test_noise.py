"""Layer 2: noise is removed deterministically, without a model, and only where it is noise."""

from __future__ import annotations

import json

from kairos.agent.events import RequestStats
from kairos.context.compression import state_of
from kairos.context.compression.config import NoiseConfig
from kairos.context.compression.noise import duplicates, retried_errors, superseded_reads
from kairos.context.session import Session
from kairos.models.types import Message, ToolCall
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.builtins import read_file
from kairos.tools.function import tool
from tests.context.compression.helpers import collect, config, fetch, make_agent, note, page


def turn(call_id: str, name: str, args: dict[str, object], result: str) -> list[Message]:
    return [
        Message.assistant("", (ToolCall(call_id, name, json.dumps(args)),)),
        Message.tool(call_id, result, name),
    ]


def trajectory() -> list[Message]:
    big = page("a", 1200)
    return [
        Message.user("task"),
        *turn("c1", "read_file", {"path": "a.py"}, big),  # 2: superseded by c3
        *turn("c2", "fetch", {"tag": "x"}, page("x", 900)),  # 4
        *turn("c3", "read_file", {"path": "a.py"}, big + "\nchanged"),  # 6
        *turn("c4", "fetch", {"tag": "x"}, page("x", 900)),  # 8: duplicate of 4
        *turn("c5", "read_file", {"path": "a.py", "offset": 50}, page("a2", 1200)),  # 10: another range, kept
        *turn("c6", "fetch", {"tag": 1}, "Tool 'fetch' failed: bad tag\n" + "trace " * 80),  # 12: retried by c7
        *turn("c7", "fetch", {"tag": "y"}, page("y", 900)),  # 14
        *turn("c8", "note", {"text": "tiny"}, "tiny"),  # 16
        *turn("c9", "note", {"text": "tiny"}, "tiny"),  # 18: duplicate, but too small to matter
    ]


def test_duplicates_point_to_the_first_copy() -> None:
    found = duplicates(trajectory())
    assert list(found) == [8]
    assert "identical to the result of fetch" in found[8] and "call c2" in found[8]


def test_superseded_reads_need_the_same_path_and_range() -> None:
    found = superseded_reads(trajectory())
    assert list(found) == [2]
    assert "a.py" in found[2] and "call c3" in found[2]


def test_retried_errors_keep_the_first_line_of_the_error() -> None:
    found = retried_errors(trajectory(), {12})
    assert list(found) == [12]
    assert "Tool 'fetch' failed: bad tag" in found[12] and "call c7" in found[12]
    assert retried_errors(trajectory()[:13], {12}) == {}  # no later success yet: keep the error


def test_noise_rules_are_deterministic() -> None:
    a, b = trajectory(), trajectory()
    assert duplicates(a) == duplicates(b) == duplicates(a)
    assert superseded_reads(a) == superseded_reads(b)
    assert retried_errors(a, {12}) == retried_errors(b, [12])


async def test_duplicates_are_replaced_at_first_sight_without_breaking_the_prefix(session: Session) -> None:
    args = {"tag": "same", "chars": 1500}
    model = ScriptedModel([reply("", call("fetch", args)), reply("", call("fetch", args)), reply("done")])
    agent, _ = make_agent(model, config(strategy="none", noise=NoiseConfig(at_ratio=1.0)))
    events = await collect(agent, session, "go")
    second = model.requests[2].messages[-1].content
    assert second.startswith("[duplicate: identical to the result of fetch")
    assert all(e.audit.ok for e in events if isinstance(e, RequestStats))


@tool
def flaky(n: int) -> str:
    """Fails for negative numbers (long error), else returns a page."""
    if n < 0:
        raise ValueError("negative n " + "detail " * 60)
    return page(f"n{n}", 600)


async def test_past_edits_wait_for_the_noise_threshold_then_go_in_one_batch(session: Session) -> None:
    steps = [
        reply("", call("read_file", {"path": "a.txt"})),
        reply("", call("flaky", {"n": -1})),
        reply("", call("flaky", {"n": 2})),
        reply("", call("read_file", {"path": "a.txt"})),
        reply("done"),
    ]
    (session.workspace / "a.txt").write_text(page("file", 1500), encoding="utf-8")
    model = ScriptedModel([*steps])
    cfg = config(strategy="none", noise=NoiseConfig(at_ratio=0.0))
    agent, _ = make_agent(model, cfg, tools=[flaky, fetch, note, read_file])
    events = await collect(agent, session, "go")
    stats = [e for e in events if isinstance(e, RequestStats)]
    last = model.requests[-1].messages
    assert last[2].content.startswith("[superseded: a.txt")
    assert last[4].content.startswith("[failed attempt, later retried successfully")
    assert "ValueError: negative n" in last[4].content
    # the error result was replaced after the success arrived: that request broke the prefix once
    broken = [s.index for s in stats if not s.audit.ok]
    assert broken == [3, 4] and stats[3].audit.diverged_at is not None
    assert stats[3].audit.diverged_at.startswith("messages[4]")
    assert stats[4].audit.diverged_at is not None and stats[4].audit.diverged_at.startswith("messages[2]")
    assert session.messages[2].content.startswith("a.txt: lines")  # the stored trajectory is untouched


async def test_below_the_noise_threshold_nothing_seen_is_edited(session: Session) -> None:
    (session.workspace / "a.txt").write_text(page("file", 1500), encoding="utf-8")
    steps = [reply("", call("read_file", {"path": "a.txt"})), reply("", call("read_file", {"path": "a.txt"}))]
    model = ScriptedModel([*steps, reply("done")])
    agent, _ = make_agent(model, config(strategy="none", noise=NoiseConfig(at_ratio=1.0)), tools=[read_file, note])
    events = await collect(agent, session, "go")
    assert all(e.audit.ok for e in events if isinstance(e, RequestStats))
    assert state_of(session).ledger.get("noise", 2) is None
