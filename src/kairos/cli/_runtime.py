"""The runtime both ``kairos serve`` and ``kairos chat`` run: the agent, its runtime tools and sources.

One builder so the two front ends cannot drift apart: what a session can do over HTTP it can do
in the terminal. Which tools the model sees comes from ``[runtime] toolsets`` (each costs prompt
tokens on every request); the components (async tasks, timers, file watches, the outbox, mail
when ``[runtime.mail]`` is set) always run, so a restart re-attaches tasks and restores timers
even when their tools are switched off.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from kairos.agent.plugin import Plugin
from kairos.app import build_agent, slow_thinking
from kairos.config import KairosConfig
from kairos.context.session import SessionStore
from kairos.errors import ConfigError, KairosError
from kairos.mcp.client import Ask, McpServerSource
from kairos.mcp.review import render_listing
from kairos.models.base import Model
from kairos.runtime import Classifier, Component, RuleRouter, Runtime, UrgencyRule
from kairos.runtime.backends import open_bus
from kairos.runtime.db import RuntimeDB, open_records
from kairos.runtime.handlers import Case, EventHandler, Handlers
from kairos.runtime.integrations.outbox import MAX_TEXT, Outbox, OutboxApprover
from kairos.runtime.toolsets import runtime_tools
from kairos.security.approval import Approver

log = logging.getLogger("kairos.mcp")


def components(workspace: Path, config: KairosConfig, model_name: str) -> list[Component]:
    """The runtime's components: async tasks, timers, file watches, the outbox, mail, telemetry.

    ``workspace`` is where the untrusted files are; nothing here reads configuration from it
    (``config`` already had the workspace's file restricted by :func:`kairos.config.load_config`).
    """
    from kairos.runtime.integrations.mail import MailSource
    from kairos.runtime.integrations.outbox import Outbox
    from kairos.runtime.integrations.tasks import TaskManager
    from kairos.runtime.integrations.timers import Timers
    from kairos.runtime.integrations.watch import FileWatch
    from kairos.server.telemetry import telemetry_from_env

    del workspace  # the components keep their state in the runtime's state dir
    found: list[Component] = [TaskManager(), Timers(heartbeat_s=config.runtime.heartbeat_s), FileWatch(), Outbox()]
    if config.runtime.mail is not None:
        found.append(MailSource(config.runtime.mail))
    telemetry = telemetry_from_env(model_name)
    if telemetry is not None:
        found.append(telemetry)
    return found


def build_runtime(
    llm: Model,
    workspace: Path,
    config: KairosConfig,
    store: SessionStore,
    *,
    approver: Approver | None = None,
    default_session: str | None = None,
    dispatch: Callable[[str, int], None] | None = None,
    idle_close_s: float = 300.0,
    plugins: list[Plugin] | None = None,
    background_config: KairosConfig | None = None,
) -> Runtime:
    """The product's runtime over ``store``: the product agent, its runtime tools, components and urgency rules.

    Side-effecting calls (with ``[defences] confirm_side_effects``) are asked through the outbox
    when the approver is ``auto`` or ``interactive``: a server has no terminal, and the chat shows
    the question and takes the answer like any other.

    The event bus is the one ``[storage] bus`` names (:func:`kairos.runtime.backends.open_bus`); the
    runtime's records are in PostgreSQL when ``[storage] store`` is a ``postgresql://`` URL (shared
    by the deployment's processes), else in ``.kairos/runtime.db`` (:func:`kairos.runtime.db.open_records`).
    ``dispatch`` hands stored events to the deployment's work queue (several workers, see
    :mod:`kairos.runtime.worker`) instead of running their sessions in this process. ``idle_close_s``: a
    session is let go (its lease, on PostgreSQL its connection) after this long without work. ``plugins`` are
    added to the agent's (``kairos voice`` adds the voice prompt). With ``[fast_slow] background`` set, a slow
    background agent advises this one (:func:`kairos.app.slow_thinking`), built from ``background_config``
    (``kairos voice``: the full settings, where ``config`` is the lean voice agent's).

    Raises:
        ConfigError: the ``mail`` toolset is asked for without a ``[runtime.mail]`` mailbox.
        BusUnavailableError: ``[storage] bus`` names a NATS server that cannot be reached.
    """
    if "mail" in config.runtime.toolsets and config.runtime.mail is None:
        raise ConfigError(
            "[runtime] toolsets names mail but no mailbox is configured: add a [runtime.mail] table "
            "(imap_host, user, from_address, password_env) to your user config, or remove mail from the toolsets"
        )
    urgency = config.runtime
    classifier = None
    if urgency.classifier:  # a second, small model: routing must not wait behind the agent's own turn
        from kairos.models import load_model

        classifier = Classifier(load_model(urgency.classifier, config.model_settings()))
    router = RuleRouter([UrgencyRule(**rule.model_dump()) for rule in urgency.rules], classifier)
    handlers = Handlers(
        [
            EventHandler(h.then, tuple(Case(c.when, c.then) for c in h.cases), h.type, h.source, h.sender)
            for h in urgency.handlers
        ],
        classifier.model if classifier is not None else llm,
    )
    parts = components(workspace, config, str(getattr(llm, "name", config.model)))
    outbox = next((c for c in parts if isinstance(c, Outbox)), None)
    if approver is None and outbox is not None and config.defences.approver in ("auto", "interactive"):
        approver = OutboxApprover(outbox)  # the API's /v1/questions and the chat answer it
    plugins = list(plugins or [])
    if config.voice.web:
        from kairos.voice.prompt import VoicePrompt

        if not any(isinstance(p, VoicePrompt) for p in plugins):
            plugins.append(VoicePrompt())
    slow = slow_thinking(workspace, background_config or config)
    agent = build_agent(
        llm, workspace, config, approver=approver, tools=runtime_tools(config.runtime.toolsets),
        plugins=[*plugins, *([slow] if slow is not None else [])],
    )  # fmt: skip
    storage = config.storage
    db = open_records(storage.store, store.state_dir)  # PostgreSQL: shared by the deployment's processes
    local = db if isinstance(db, RuntimeDB) else None
    if local is None and storage.bus_kind == "embedded":  # the embedded bus keeps its table in runtime.db
        local = RuntimeDB(store.state_dir / "runtime.db")
    leader = None
    if storage.store_kind == "postgresql":  # timers, file watches and mail: one process of the deployment
        from kairos.runtime.backends import bus_stream
        from kairos.runtime.leader import PgLeaderLease

        leader = PgLeaderLease(storage.store, bus_stream(workspace, storage.deployment))
    bus = open_bus(storage.bus, workspace=workspace, db=local, deployment=storage.deployment)  # last: it may connect
    try:
        runtime = Runtime(
            agent,
            store,
            router=router,
            handlers=handlers,
            bus=bus,
            db=db,
            components=parts,
            default_session=default_session,
            background_after_s=urgency.background_after_s,
            dispatch=dispatch,
            leader=leader,
            leader_retry_s=storage.leader_retry_s,
            idle_close_s=idle_close_s,
        )
    except BaseException:
        bus.close()
        raise
    if outbox is not None:
        from kairos.plugins.mcp import McpTools

        for source in (s for p in agent.plugins if isinstance(p, McpTools) for s in p.sources):
            source.ask = source.ask or outbox_review(outbox, runtime.default_session)
    return runtime


def outbox_review(outbox: Outbox, session: Callable[[], str]) -> Ask:
    """Ask about an MCP server's new or changed tools where the user is, never holding up the turn.

    The question goes to the outbox (the chat, ``/v1/questions``, the web UI). The tools stay withheld
    until the user answers ``approve``; the approval is of the listing the question showed (a server that
    changes again meanwhile is asked about again). No answer is a no.
    """
    waiting: set[asyncio.Task[None]] = set()

    async def ask(source: McpServerSource) -> bool:
        listing = list(source.listing)
        status = "changed since you approved it" if source.review_status() == "changed" else "not approved yet"
        shown = source.review.diff(source.name, listing) or render_listing(listing)
        question = "\n".join(
            [f"MCP server {source.name} [{source.config.target}]: its tools are {status}.", *shown[:40],
             *(["…"] if len(shown) > 40 else []), f"Offer these {len(listing)} tools of {source.name} to the model?"]
        )  # fmt: skip

        async def wait() -> None:
            try:
                answer, by_user = await outbox.wait_answer(
                    session(), question[:MAX_TEXT], options=("approve", "deny"), timeout_s=0
                )
            except (KairosError, ValueError) as e:  # the outbox cannot ask: the tools stay withheld
                log.warning("could not ask about MCP server %s in the outbox: %s", source.name, e)
                return
            if by_user and answer == "approve":
                source.review.approve(source.name, source.config.target, listing)

        task = asyncio.create_task(wait())
        waiting.add(task)
        task.add_done_callback(waiting.discard)
        return False

    return ask
