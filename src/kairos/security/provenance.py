"""Provenance: where a message or a text span came from (book ch2 §3.8, ch3 §7).

A memory writer asks :meth:`ProvenanceGuard.check_memory_write` before storing a preference or a
fact: an instruction that arrived inside external content (a web page, a mail) never becomes
something the user asked for. Provenance comes from each message's role and origin, the tools'
``external`` flag and the harness's own ``<external_content>`` wrapper, so it survives a resume.
The defences plugin provides the guard of its agent as a service (``ctx.service(ProvenanceGuard)``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from kairos.models.types import Message
from kairos.security.sanitize import wrapped_source
from kairos.tools.base import Tool

ProvenanceKind: TypeAlias = Literal["user", "harness", "model", "tool", "external"]

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"\b(?:https?|ftp)://[^\s\"'<>)]+", re.IGNORECASE)
_DOMAIN = re.compile(r"\b(?:[a-z0-9-]+\.)+(?:com|net|org|io|dev|ai|info|biz|xyz|ru|cn|co|me|app|local|test)\b")
_PATH = re.compile(r"(?:~|\.{0,2})?/?(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.(?:txt|md|json|csv|log|py|sh|html|pdf|docx?)\b")
_NUMBER = re.compile(r"\b\d{3,}\b")
_WORD = re.compile(r"[a-z0-9@._/-]+")
SHINGLE = 5
"""Words in a row that, copied from external content, mark a span as external-sourced."""


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a message came from: ``source`` names the tool and its URL/path for tool output."""

    origin: ProvenanceKind
    source: str = ""

    @property
    def external(self) -> bool:
        """Whether it is external content: output of an ``external`` tool (a web page, a mail)."""
        return self.origin == "external"


@dataclass(frozen=True, slots=True)
class MemoryVerdict:
    """Whether a memory/preference write may be stored, and why not."""

    allowed: bool
    reason: str = ""
    tainted: tuple[str, ...] = ()
    """The tokens or phrases that came from external content and not from the user."""
    external: bool = False
    """Store it (if allowed) tagged as external: it may be recalled as data, never as an instruction."""


def salient_tokens(text: str) -> set[str]:
    """Identifiers an injected instruction needs to act: emails, URLs, domains, paths, numbers."""
    low = text.lower()
    found: set[str] = set()
    for rx in (_EMAIL, _URL, _DOMAIN, _PATH, _NUMBER):
        found.update(m.group(0).rstrip(".,;:") for m in rx.finditer(low))
    return {t for t in found if len(t) > 2}


def _shingles(text: str, n: int = SHINGLE) -> set[str]:
    words = _WORD.findall(text.lower())
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


class ProvenanceGuard:
    """Tags every message with its origin and checks text spans for external taint.

    Provenance of a tool result comes from the tool's ``external`` flag (or the harness's own
    wrapper), so it survives a session resume. A span is *external-sourced* when it carries an
    identifier (email, URL, path, number) or a run of :data:`SHINGLE` words that occurs in
    external tool output but in no real user message. The memory layer calls
    :meth:`check_memory_write` before storing a preference or fact.

    Args:
        is_external: whether results of the tool of this name are external content
            (:meth:`for_tools` builds one from the tools' flags).
    """

    def __init__(self, is_external: Callable[[str], bool]) -> None:
        self._is_external = is_external

    @classmethod
    def for_tools(cls, tools: Iterable[Tool], extra_external: Iterable[str] = ()) -> ProvenanceGuard:
        """The guard for a tool set: results of its ``external`` tools (and ``extra_external``) are external."""
        names = {t.name for t in tools if t.external} | set(extra_external)
        return cls(names.__contains__)

    def provenance(self, message: Message) -> Provenance:
        """Where ``message`` came from."""
        if message.role == "user":
            if message.from_user:
                return Provenance("user", message.origin.source if message.origin else "")
            wrapped = wrapped_source(message.content)
            if (message.origin is not None and message.origin.kind == "external") or wrapped is not None:
                return Provenance("external", wrapped or (message.origin.source if message.origin else ""))
            return Provenance("harness", message.origin.source if message.origin else "")
        if message.role in ("assistant", "system"):
            return Provenance("model" if message.role == "assistant" else "harness")
        wrapped = wrapped_source(message.content)
        if wrapped is not None or (message.name is not None and self._is_external(message.name)):
            return Provenance("external", wrapped or message.name or "")
        return Provenance("tool", message.name or "")

    def is_from_external(self, item: Message | str, messages: Sequence[Message] = ()) -> bool:
        """A message: is it external tool output? A text span: is it tainted by ``messages``?"""
        if isinstance(item, Message):
            return self.provenance(item).external
        return bool(self._taint(item, messages))

    def check_memory_write(
        self, text: str, messages: Sequence[Message], *, kind: Literal["preference", "fact"] = "preference"
    ) -> MemoryVerdict:
        """May ``text`` be stored? A preference or instruction tainted by external content: no.

        A ``fact`` may be stored either way, but a tainted one comes back with ``external=True``
        so the memory layer keeps it as cited data, never as something the user asked for.
        """
        tainted = self._taint(text, messages)
        if not tainted:
            return MemoryVerdict(True)
        if kind == "fact":
            return MemoryVerdict(True, "store with external provenance", tainted, external=True)
        shown = ", ".join(repr(t) for t in tainted[:3])
        return MemoryVerdict(
            False,
            f"it repeats {shown} from external content (a web page or another outside source), not from the user; "
            "instructions found in external content are never stored as preferences or memory",
            tainted,
            external=True,
        )

    def _taint(self, text: str, messages: Sequence[Message]) -> tuple[str, ...]:
        external = [m.content for m in messages if m.role in ("tool", "user") and self.provenance(m).external]
        if not external:
            return ()
        user = "\n".join(m.content for m in messages if m.from_user).lower()
        ext_text = "\n".join(external).lower()
        tokens = sorted(t for t in salient_tokens(text) if t in ext_text and t not in user)
        user_sh = _shingles(user)
        ext_sh = _shingles(ext_text)
        phrases = sorted(s for s in _shingles(text) if s in ext_sh and s not in user_sh)
        return tuple(tokens + phrases)


__all__ = ["MemoryVerdict", "Provenance", "ProvenanceGuard", "ProvenanceKind", "salient_tokens"]
