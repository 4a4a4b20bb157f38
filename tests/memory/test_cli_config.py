"""``kairos memory`` commands, the [memory]/[knowledge] config, the app's wiring and compression."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kairos.app import KB_FILE, build_agent, memory_plugins
from kairos.cli import app
from kairos.config import load_config
from kairos.knowledge import HashEmbedder, KnowledgeBase
from kairos.knowledge.store import DB_NAME
from kairos.memory import UserMemory
from kairos.models.types import Message
from kairos.plugins.memory import KnowledgeTools, MemoryPlugin
from kairos.testing import ScriptedModel
from tests.memory.conftest import AT, LATER, op, ops

runner = CliRunner()


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    import kairos.cli.memory

    for console in (kairos.cli.memory.console, kairos.cli.memory.err_console):
        monkeypatch.setattr(console, "_width", 10_000)


def _mem(ws: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["memory", *args, "-w", str(ws), "--embedder", "hash", "--user", "alice"])
    return result.exit_code, result.output


async def _seed(ws: Path) -> None:
    model = ScriptedModel([
        ops(op("Lives in Berlin", [0], format="json_card", path="home.address.city", value="Berlin")),
        ops(op("Lives in Munich", [0], format="json_card", path="home.address.city", value="Munich"),
            op("Likes chess", [0])),
    ])  # fmt: skip
    mem = UserMemory.open(ws / ".kairos", HashEmbedder(), model, user="alice")
    await mem.ingest_session([Message.user("I live in Berlin.")], session_id="s1", at=AT)
    await mem.ingest_session([Message.user("Moved to Munich; I like chess.")], session_id="s2", at=LATER)
    mem.close()


def test_show_says_when_memory_is_off_and_how_to_turn_it_on(workspace: Path, user_config_dir: Path) -> None:
    code, out = _mem(workspace, "show")
    assert code == 0 and out.startswith("memory is off") and str(user_config_dir / "config.toml") in out
    assert "enabled = true" in out
    (user_config_dir / "config.toml").write_text("[memory]\nenabled = true\n")
    assert _mem(workspace, "show") == (0, "no memories yet\n")
    asyncio.run(_seed(workspace))
    (user_config_dir / "config.toml").write_text("")
    code, out = _mem(workspace, "show")
    assert out.startswith("memory is off") and "what was remembered while it was on:" in out and "Munich" in out


def test_show_search_forget_export(workspace: Path) -> None:
    asyncio.run(_seed(workspace))
    code, out = _mem(workspace, "show")
    assert code == 0 and "home.address.city = Munich" in out and "Berlin" not in out and "Likes chess" in out
    code, out = _mem(workspace, "show", "--history")
    assert code == 0 and "Berlin" in out and "[superseded, v1]" in out and "[current, v2]" in out
    code, out = _mem(workspace, "search", "chess", "--json")
    assert code == 0 and json.loads(out)[0]["text"].endswith("Likes chess")
    code, out = _mem(workspace, "export", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["user"] == "alice" and len(data["memories"]) == 3
    assert data["memories"][0]["provenance"]["session_id"] == "s1"
    assert _mem(workspace, "export", "--format", "csv")[0] == 2
    chess = next(m for m in data["memories"] if m["content"] == "Likes chess")
    code, out = _mem(workspace, "forget", str(chess["id"]))
    assert code == 0 and "erased 1 record" in out
    code, out = _mem(workspace, "forget", "9999")
    assert code == 1 and "no memory 9999" in out
    assert _mem(workspace, "forget")[0] == 2  # neither an id nor --all
    mem = UserMemory.open(workspace / ".kairos", HashEmbedder(), None, user="alice")
    assert mem.expect_ingest([Message.user("I play the cello.")], session_id="s9", at=LATER)  # then Ctrl-C
    mem.close()
    assert "not saved yet: session s9 (saved while `kairos chat`" in _mem(workspace, "show")[1]
    code, out = _mem(workspace, "forget", "--all")
    assert code == 0 and "erased" in out
    assert "not saved yet" not in _mem(workspace, "show")[1]  # forgetting all does not bring s9 back later
    assert json.loads(_mem(workspace, "export")[1])["memories"] == []
    assert _mem(workspace, "search", "Munich", "--json")[1].strip() == "[]"


def test_corrupt_database_is_a_clear_cli_error(workspace: Path) -> None:
    (workspace / ".kairos").mkdir()
    (workspace / ".kairos" / "knowledge.db").write_bytes(b"garbage" * 500)
    code, out = _mem(workspace, "show")
    assert code == 1 and "error:" in out and "move it away" in out


def test_untrusted_workspace_cannot_choose_the_user(workspace: Path, user_config_dir: Path) -> None:
    (user_config_dir / "config.toml").write_text('[memory]\nenabled = true\nuser = "alice"\n')
    (workspace / "kairos.toml").write_text('[memory]\nuser = "bob"\nmax_cards = 3\n')
    config = load_config(workspace, trusted=False)
    assert config.memory.user == "alice" and config.memory.max_cards == 3
    assert any("memory.user" in n for n in config.notices)
    assert load_config(workspace, trusted=True).memory.user == "bob"
    (workspace / "kairos.toml").write_text('[memory]\nuser = "../../etc"\n')
    with pytest.raises(Exception, match="memory.user"):
        load_config(workspace, trusted=True)


def test_untrusted_workspace_may_lengthen_the_pii_pass_but_not_shorten_it(
    workspace: Path, user_config_dir: Path
) -> None:
    (workspace / "kairos.toml").write_text("[memory]\nscrub_timeout_s = 0\n")
    config = load_config(workspace, trusted=False)
    assert config.memory.scrub_timeout_s == 30 and any("memory.scrub_timeout_s" in n for n in config.notices)
    assert load_config(workspace, trusted=True).memory.scrub_timeout_s == 0
    (workspace / "kairos.toml").write_text("[memory]\nscrub_timeout_s = 120\n")
    assert load_config(workspace, trusted=False).memory.scrub_timeout_s == 120


def test_a_zero_pii_budget_is_the_regex_layer_alone(workspace: Path, user_config_dir: Path) -> None:
    from kairos.memory.pii import PiiScrubber

    (user_config_dir / "config.toml").write_text(
        '[knowledge]\nembedder = "hash"\n[memory]\nenabled = true\nscrub_timeout_s = 0\n'
    )
    (plugin,) = memory_plugins(workspace, load_config(workspace), ScriptedModel())
    assert isinstance(plugin, MemoryPlugin)
    scrubber = plugin.memory.scrubber
    assert isinstance(scrubber, PiiScrubber) and scrubber.model is None
    plugin.shutdown()
    (user_config_dir / "config.toml").write_text('[knowledge]\nembedder = "hash"\n[memory]\nenabled = true\n')
    (plugin,) = memory_plugins(workspace, load_config(workspace), ScriptedModel())
    assert isinstance(plugin, MemoryPlugin) and isinstance(plugin.memory.scrubber, PiiScrubber)
    assert plugin.memory.scrubber.model is not None and plugin.memory.scrubber.timeout_s == 30
    plugin.shutdown()


def test_app_wires_memory_and_kb_tools_from_config(workspace: Path, user_config_dir: Path) -> None:
    assert KB_FILE == DB_NAME
    base = load_config(workspace)
    assert memory_plugins(workspace, base, None) == []  # nothing configured, no knowledge base: no import, no tools
    kb = KnowledgeBase.open(workspace / ".kairos", HashEmbedder())
    kb.add_text("handbook.md", "Deploys run every Friday.")
    kb.close()
    (user_config_dir / "config.toml").write_text('[knowledge]\nembedder = "hash"\n')
    plugins = memory_plugins(workspace, load_config(workspace), None)
    assert [type(p) for p in plugins] == [KnowledgeTools]
    agent = build_agent(ScriptedModel(), workspace, load_config(workspace))
    names = {t.name for t in agent.all_tools() if hasattr(t, "name")}
    assert {"kb_search", "kb_get_document", "kb_list"} <= names and "memory_search" not in names
    (user_config_dir / "config.toml").write_text(
        '[knowledge]\nembedder = "hash"\ntools = "off"\n[memory]\nenabled = true\nuser = "alice"\n'
    )
    plugins = memory_plugins(workspace, load_config(workspace), ScriptedModel())
    assert [type(p) for p in plugins] == [MemoryPlugin]
    assert isinstance(plugins[0], MemoryPlugin) and plugins[0].memory.user == "alice"
    plugins[0].shutdown()


async def test_kb_tools_never_show_a_users_conversations(workspace: Path) -> None:
    from kairos.knowledge.tools import knowledge_tools

    model = ScriptedModel([ops()])
    mem = UserMemory.open(workspace / ".kairos", HashEmbedder(), model, user="alice")
    try:
        await mem.ingest_session([Message.user("my secret plan is to sail to Iceland")], session_id="s", at=AT)
        tools = {t.name: t for t in knowledge_tools(mem.kb)}
        from kairos.tools.base import ToolContext

        ctx = ToolContext(workspace)
        found = await tools["kb_search"].call({"query": "sail Iceland"}, ctx)
        assert json.loads(found.content)["results"] == []
        listed = await tools["kb_list"].call({}, ctx)
        assert json.loads(listed.content)["documents"] == []
        got = await tools["kb_get_document"].call({"source": "conversation/alice/s"}, ctx)
        assert got.is_error and "Iceland" not in got.content
        assert (await mem.search("sail Iceland"))[0].source == "conversation"  # memory_search still finds it
    finally:
        mem.close()


async def test_compression_merges_similar_memories_and_keeps_them_in_history(workspace: Path) -> None:
    model = ScriptedModel()
    mem = UserMemory.open(workspace / ".kairos", HashEmbedder(), model, user="alice", max_memories=10)
    try:
        weather = [op(f"Asked about rain in the weather forecast for day {i}", [0], kind="episodic",
                      importance=0.2) for i in range(8)]  # fmt: skip
        other = [op(f"Fact number {w}", [0], importance=0.9) for w in ("alpha", "beta", "gamma", "delta")]
        from kairos.testing import call, reply

        summary = reply("", call("summarize_memories", {"content": "Often asks whether it will rain",
                                                        "kind": "semantic", "importance": 0.5}))  # fmt: skip
        model.extend([ops(*weather, *other), summary])
        said = "I asked about rain in the weather forecast for days 0, 1, 2, 3, 4, 5, 6 and 7."
        said += " Facts: alpha, beta, gamma, delta."
        report = await mem.ingest_session([Message.user(said)], session_id="s", at=AT)
        assert report.compressed >= 2
        current = [c.content for c in mem.current()]
        assert "Often asks whether it will rain" in current and len(current) <= 10
        assert all(f"Fact number {w}" in current for w in ("alpha", "beta", "gamma", "delta"))  # important ones kept
        archived = [c for c in mem.history() if c.status == "archived"]
        assert len(archived) == report.compressed and all("merged_into" in c.data for c in archived)
    finally:
        mem.close()
