"""Wires the default agent from config: bundled prompt, built-in tools, and the context extensions."""

from __future__ import annotations

from pathlib import Path

from kairos.agent.loop import Agent, Extension
from kairos.agent.subagent import SubAgents
from kairos.config import KairosConfig
from kairos.context.compression import CompressionExtension
from kairos.context.status import StatusBar
from kairos.models.base import Model
from kairos.models.types import SystemPrompt
from kairos.prompts.builder import default_prompt
from kairos.security.approval import Approver
from kairos.security.defences import InjectionDefences
from kairos.skills.extension import Skills
from kairos.tools.base import Tool


def default_system_prompt(workspace: Path, config: KairosConfig) -> SystemPrompt:
    """Static part from the package; deployment part from facts that are fixed for this install."""
    return default_prompt(workspace, instructions=config.instructions)


def default_tools() -> list[Tool]:
    from kairos.tools.builtins import default_tools as builtins

    return builtins()


def default_extensions(
    workspace: Path,
    config: KairosConfig,
    *,
    approver: Approver | None = None,
    summarizer: Model | None = None,
) -> list[Extension]:
    """The extensions ``config`` switches on, in install order.

    Defences go first (their result hook wraps external output before others annotate it);
    compression goes last so its token check sees what the others append before a request.
    """
    extensions: list[Extension] = [InjectionDefences(config.defences, approver=approver)]
    if config.status_bar.enabled:
        extensions.append(StatusBar(config.status_bar))
    if config.skills.enabled:
        extensions.append(Skills.from_config(workspace, config.skills))
    if config.subagents.enabled:
        extensions.append(SubAgents(config.subagents))
    if config.compression.enabled:
        if summarizer is None and config.compression.summarizer:
            from kairos.models import load_model

            summarizer = load_model(config.compression.summarizer, config.model_settings())
        extensions.append(CompressionExtension(config.compression, summarizer=summarizer))
    return extensions


def build_agent(
    model: Model,
    workspace: Path,
    config: KairosConfig | None = None,
    *,
    approver: Approver | None = None,
) -> Agent:
    """The product's agent: what ``kairos run`` and ``kairos chat`` use.

    ``approver`` decides side-effecting calls when ``[defences] confirm_side_effects`` is on;
    by default the one ``[defences] approver`` names (a terminal prompt on a TTY, deny otherwise).
    """
    config = config or KairosConfig()
    return Agent(
        model,
        tools=default_tools(),
        system=default_system_prompt(workspace, config),
        max_iterations=config.max_iterations,
        max_tokens=config.max_tokens,
        extensions=default_extensions(workspace, config, approver=approver),
    )
