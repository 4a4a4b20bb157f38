"""Layer 1: spill previews are decided once, readable with read_file, identical after resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from kairos.agent.events import FinalAnswer, RequestStats
from kairos.context.compression import CompressionConfig, state_of
from kairos.context.compression.config import SpillConfig
from kairos.context.compression.spill import preview
from kairos.context.session import Session, SessionStore
from kairos.models.types import ModelRequest
from kairos.testing import ScriptedModel, call, reply
from tests.context.compression.helpers import collect, config, make_agent, page

SPILL = SpillConfig(max_chars=1000, head_lines=3, tail_lines=2)


def spill_config() -> CompressionConfig:
    return config(strategy="none", spill=SPILL)


def test_preview_has_head_tail_size_path_and_how_to_read_on() -> None:
    text = "\n".join(f"row {i}" for i in range(100))
    p = preview(text, SPILL, ".kairos/spill/s/3-c.txt")
    lines = p.splitlines()
    assert lines[0].startswith("[large output:") and f"{len(text):,} chars in 100 lines" in lines[0]
    assert lines[1:4] == ["row 0", "row 1", "row 2"]
    assert "[… 95 lines not shown …]" in p
    assert lines[-3:-1] == ["row 98", "row 99"]
    assert 'read_file(path=".kairos/spill/s/3-c.txt", offset=4)' in lines[-1] and "grep(" in lines[-1]


def test_preview_of_one_huge_line_stays_small() -> None:
    p = preview("x" * 50_000, SPILL, "f.txt")
    assert len(p) < 1000 and "[50000 chars]" in p


async def test_model_sees_only_the_preview_and_can_read_the_file(session: Session) -> None:
    big = page("alpha", 5000)
    model = ScriptedModel([reply("", call("fetch", {"tag": "alpha", "chars": 5000}))])
    model.extend([lambda req: reply("", call("read_file", {"path": _spill_path(req), "offset": 40, "limit": 3}))])
    model.extend([reply("done")])
    agent, _ = make_agent(model, spill_config())
    events = await collect(agent, session, "go")
    assert isinstance(events[-1], FinalAnswer) and events[-1].text == "done"
    seen = model.requests[1].messages[-1].content
    assert seen.startswith("[large output:") and big not in seen and len(seen) < 1500
    assert session.messages[2].content == big  # the stored trajectory keeps the full output
    path = session.workspace / _spill_path(model.requests[1])
    assert path.read_text(encoding="utf-8") == big + "\n"
    read_back = model.requests[2].messages[-1].content
    assert "lines 40–42" in read_back and "alpha line 39" in read_back
    assert all(e.audit.ok for e in events if isinstance(e, RequestStats))  # decided at first sight: no break


def _spill_path(request: ModelRequest) -> str:
    text = request.messages[-1].content
    return text.split("saved to ", 1)[1].split(";", 1)[0]


async def test_preview_is_byte_identical_after_resume_even_if_the_file_was_deleted(workspace: Path) -> None:
    store = SessionStore(workspace)
    session = store.new()
    model = ScriptedModel([reply("", call("fetch", {"tag": "beta", "chars": 4000})), reply("ok")])
    agent, _ = make_agent(model, spill_config())
    await collect(agent, session, "go")
    before = model.requests[1].messages
    path = session.workspace / _spill_path(model.requests[1])
    await session.aclose()
    store.close()
    path.unlink()

    store2 = SessionStore(workspace)
    resumed = store2.resume(session.id)
    model2 = ScriptedModel([reply("again")])
    agent2, _ = make_agent(model2, spill_config())
    await collect(agent2, resumed, "more")
    after = model2.requests[0].messages
    assert [m.serialized() for m in after[: len(before)]] == [m.serialized() for m in before]
    assert path.read_text(encoding="utf-8").startswith("beta line 0")  # restored from the trajectory
    await resumed.aclose()
    store2.close()


async def test_state_dir_outside_the_workspace_spills_inside_it(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAIROS_HOME", str(tmp_path / "elsewhere"))
    store = SessionStore(workspace)
    session = store.new()
    model = ScriptedModel([reply("", call("fetch", {"tag": "gamma", "chars": 3000})), reply("ok")])
    agent, _ = make_agent(model, spill_config())
    await collect(agent, session, "go")
    rel = _spill_path(model.requests[1])
    assert rel.startswith(".kairos/spill/") and (workspace / rel).is_file()
    assert not (tmp_path / "elsewhere" / "spill").exists()
    await session.aclose()
    store.close()


async def test_unwritable_spill_folder_says_so_in_the_preview(session: Session) -> None:
    (session.workspace / "blocker").write_text("a file, not a folder")
    cfg = config(strategy="none", spill=SpillConfig(max_chars=1000, dir="blocker/spill"))
    model = ScriptedModel([reply("", call("fetch", {"tag": "delta", "chars": 3000})), reply("ok")])
    agent, _ = make_agent(model, cfg)
    await collect(agent, session, "go")
    seen = model.requests[1].messages[-1].content
    assert "could not be saved" in seen and "saved to" not in seen
    assert state_of(session).ledger.get("spill", 2) == seen


async def test_small_results_are_not_spilled(session: Session) -> None:
    model = ScriptedModel([reply("", call("note", {"text": "short"})), reply("ok")])
    agent, _ = make_agent(model, spill_config())
    await collect(agent, session, "go")
    assert model.requests[1].messages[-1].content == "short"
    assert not (session.workspace / ".kairos" / "spill").exists()
