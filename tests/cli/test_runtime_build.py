"""The runtime ``kairos serve`` and ``kairos chat`` share: tools, components and urgency from the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from kairos.cli._runtime import build_runtime
from kairos.config import KairosConfig, load_config
from kairos.context.session import SessionStore
from kairos.errors import ConfigError
from kairos.runtime import Event, RuleRouter
from kairos.testing import ScriptedModel

MAILBOX = {"imap_host": "127.0.0.1", "user": "u", "from_address": "u@x"}


def _build(tmp_path: Path, runtime: dict[str, object]) -> tuple[list[str], list[str], RuleRouter]:
    config = KairosConfig.model_validate({"runtime": runtime})
    store = SessionStore(tmp_path)
    try:
        rt = build_runtime(ScriptedModel([]), tmp_path, config, store)
        assert isinstance(rt.router, RuleRouter)
        return [t.name for t in rt.agent.tools], [c.name for c in rt.components], rt.router
    finally:
        store.close()


def test_the_default_toolsets_and_components(tmp_path: Path) -> None:
    tools, components, router = _build(tmp_path, {})
    assert {"start_command", "cancel_task", "set_timer", "watch_files", "notify_user", "ask_user"} <= set(tools)
    assert not {"send_email", "check_calendar"} & set(tools)
    assert components == ["tasks", "timers", "watch", "outbox"]  # no mailbox: no mail source
    assert not router.rules and router.classifier is None


def test_a_mailbox_brings_the_mail_source_and_tools(tmp_path: Path) -> None:
    tools, components, _ = _build(tmp_path, {"toolsets": ["outbox"], "mail": MAILBOX})
    assert tools[-9:] == ["notify_user", "ask_user", "check_calendar", "add_calendar_event", "send_email",
                          "draft_reply", "move_email", "flag_email", "read_email"]  # fmt: skip
    assert "mail" in components and "start_command" not in tools


async def test_urgency_rules_come_from_the_config(tmp_path: Path) -> None:
    rule = {"strategy": "interrupt", "type": "email.*", "sender": "*@corp.example", "keywords": ["outage"]}
    _, _, router = _build(tmp_path, {"rules": [rule]})
    boss = Event("email.received", "the site is down: OUTAGE", {"type": "email", "sender": "cto@corp.example"})
    other = Event("email.received", "outage sale!", {"type": "email", "sender": "ads@shop.example"})
    assert (await router.decide(boss, busy=True)).strategy == "interrupt"
    assert (await router.decide(other, busy=True)).strategy == "queue"


def test_the_mail_toolset_needs_a_mailbox(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no mailbox is configured"):
        _build(tmp_path, {"toolsets": ["mail"]})


def test_an_untrusted_workspace_cannot_pick_a_remote_classifier(workspace: Path) -> None:
    (workspace / "kairos.toml").write_text('[runtime]\nclassifier = "openai:spy"\n', encoding="utf-8")
    config = load_config(workspace)
    assert config.runtime.classifier is None
    assert any("ignored runtime.classifier" in n for n in config.notices)


async def test_handlers_come_from_the_config_and_triage_on_the_agents_model(tmp_path: Path) -> None:
    handler = {
        "type": "email.received",
        "then": "Say what you did.",
        "cases": [{"when": "an advert", "then": "Archive it."}],
    }
    config = KairosConfig.model_validate({"runtime": {"handlers": [handler]}})
    store = SessionStore(tmp_path)
    agent_model = ScriptedModel([])
    try:
        rt = build_runtime(agent_model, tmp_path, config, store)
        assert rt.handlers.model is agent_model  # no [runtime] classifier: the agent's model triages
        hint = await rt.handlers.guidance(Event("email.received", "50% off!", {"type": "email"}))
        assert hint == "If this email is an advert: Archive it.\nSay what you did."  # the scripted model had no reply
    finally:
        store.close()


def test_background_after_s_reaches_the_runtime(tmp_path: Path) -> None:
    for setting, expected in ((None, 30.0), (0, 0.0), (5, 5.0)):
        runtime = {} if setting is None else {"background_after_s": setting}
        config = KairosConfig.model_validate({"runtime": runtime})
        store = SessionStore(tmp_path / str(setting))
        try:
            assert build_runtime(ScriptedModel([]), tmp_path, config, store).background_after_s == expected
        finally:
            store.close()


async def test_the_chat_runtime_sends_the_system_turn_the_install_step_warms(tmp_path: Path) -> None:
    from kairos.app import first_request
    from kairos.runtime.toolsets import runtime_tools

    config = KairosConfig()
    workspace = tmp_path / "some-project"
    workspace.mkdir()
    store = SessionStore(workspace)
    try:
        rt = build_runtime(ScriptedModel([]), workspace, config, store)
        session = store.new()
        sent = (await rt.agent.context(session)).build()
        await session.aclose()
    finally:
        store.close()
    warmed = await first_request(ScriptedModel([]), config, runtime_tools(config.runtime.toolsets))
    assert (sent.system_static, sent.system_deployment, sent.tools) == (
        warmed.system_static,
        warmed.system_deployment,
        warmed.tools,
    )


def test_a_background_model_makes_the_agent_think_fast_and_slow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kairos.models
    from kairos.plugins.fast_slow import ADVICE_PROMPT, SlowThinking

    slow = ScriptedModel([], name="slow")
    monkeypatch.setattr(kairos.models, "load_model", lambda spec, settings=None, **kw: slow)
    config = KairosConfig.model_validate({"fast_slow": {"background": "local", "timeout_s": 9}})
    store = SessionStore(tmp_path)
    try:
        rt = build_runtime(ScriptedModel([]), tmp_path, config, store)
        plugin = next(p for p in rt.agent.pipeline.plugins if isinstance(p, SlowThinking))
        assert plugin.background.model is slow and plugin.timeout_s == 9
        assert ADVICE_PROMPT in rt.agent.system.deployment
        plain = build_runtime(ScriptedModel([]), tmp_path, KairosConfig(), store)
        assert not any(isinstance(p, SlowThinking) for p in plain.agent.pipeline.plugins)
    finally:
        store.close()


def test_voice_web_gives_the_served_agent_the_voice_prompt(tmp_path: Path) -> None:
    from kairos.voice.prompt import VOICE_PROMPT

    store = SessionStore(tmp_path)
    try:
        spoken = build_runtime(
            ScriptedModel([]), tmp_path, KairosConfig.model_validate({"voice": {"web": True}}), store
        )
        assert VOICE_PROMPT in spoken.agent.system.deployment
        assert (
            VOICE_PROMPT
            not in build_runtime(ScriptedModel([]), tmp_path, KairosConfig(), store).agent.system.deployment
        )
    finally:
        store.close()
