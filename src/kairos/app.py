"""Wires the default agent: bundled prompt, built-in tools, status message, config."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from kairos.agent.loop import Agent
from kairos.config import KairosConfig
from kairos.context.builder import SystemPrompt
from kairos.models.base import Model
from kairos.prompts import load_prompt
from kairos.tools.base import Tool


def default_system_prompt(workspace: Path, config: KairosConfig) -> SystemPrompt:
    """Static part from the package; deployment part from facts that are fixed for this install."""
    facts = [
        f"Workspace: {workspace.name} (tools can only reach files inside it).",
        f"OS: {platform.system()}; shell: {Path(os.environ.get('SHELL', '/bin/bash')).name}; "
        f"Python {platform.python_version()}.",
    ]
    if config.instructions:
        facts.append(config.instructions.strip())
    return SystemPrompt(load_prompt("system"), "\n".join(facts))


def default_tools() -> list[Tool]:
    from kairos.tools.builtins import default_tools as builtins

    return builtins()


def build_agent(model: Model, workspace: Path, config: KairosConfig | None = None) -> Agent:
    config = config or KairosConfig()
    return Agent(
        model,
        tools=default_tools(),
        system=default_system_prompt(workspace, config),
        max_iterations=config.max_iterations,
        max_tokens=config.max_tokens,
    )
