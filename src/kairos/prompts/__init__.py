"""Prompt templates are versioned package files, so the prefix only changes with a release."""

from __future__ import annotations

from importlib.resources import files


def load_prompt(name: str) -> str:
    """The text of ``prompts/<name>.md`` without its trailing newline."""
    return files(__package__).joinpath(f"{name}.md").read_text(encoding="utf-8").rstrip("\n")
