"""External-content wrapping and an auxiliary pattern sanitiser (book ch2 §3.8).

Wrapping is the structural defence: external text goes inside
``<external_content source="…">…</external_content>`` and every tag of that name inside the
text is defused, so a page cannot close the wrapper early and speak as the harness.

The sanitiser is auxiliary only: rewording evades any pattern list. It flags (or redacts)
instruction-like phrases such as "ignore all previous instructions" and reports what it found,
so the defence layer can record it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeAlias

EXTERNAL_TAG = "external_content"
SanitizeMode: TypeAlias = Literal["off", "flag", "redact"]

_TAG_RE = re.compile(r"<(\s*/?\s*external_content\b)", re.IGNORECASE)
_SOURCE_MAX = 200

_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "override",
        r"\b(ignore|disregard|forget|override|skip)\s+(all\s+|any\s+|the\s+|your\s+)*"
        r"(previous|prior|above|earlier|preceding|former|original|system)\s+"
        r"(instructions?|prompts?|rules?|directions?|messages?|guidelines?)",
    ),
    ("new_instructions", r"\b(new|updated|real|actual)\s+(system\s+)?instructions?\s*:"),
    ("role_claim", r"\b(you\s+are\s+now|from\s+now\s+on,?\s+you|act\s+as\s+(an?\s+)?(unrestricted|jailbroken))\b"),
    (
        "prompt_exfiltration",
        r"\b(reveal|print|output|show|repeat|leak)\s+(me\s+)?(your|the)\s+(full\s+|entire\s+)?system\s+prompt",
    ),
    ("assistant_directive", r"\b(note|instruction|message|reminder)\s+(to|for)\s+(the\s+)?(ai|assistant|agent|llm)\b"),
    ("role_marker", r"(<\|im_start\|>|<\|im_end\|>|<\|(system|assistant|user)\|>|\[/?INST\])"),
    ("hidden_action", r"\b(do\s+not|don't)\s+(tell|inform|mention\s+(this\s+)?to)\s+the\s+user\b"),
)
_COMPILED = tuple((name, re.compile(rx, re.IGNORECASE | re.MULTILINE)) for name, rx in _PATTERNS)


@dataclass(frozen=True, slots=True)
class Finding:
    """One suspicious phrase: which pattern matched, the text, and where."""

    pattern: str
    text: str
    start: int


@dataclass(frozen=True, slots=True)
class SanitizeResult:
    """The text after sanitising (flagged or redacted) and what was found in it."""

    text: str
    findings: tuple[Finding, ...]

    @property
    def changed(self) -> bool:
        """Whether anything was found (and so flagged or redacted)."""
        return bool(self.findings)


def find_suspicious(text: str) -> tuple[Finding, ...]:
    """All pattern matches in ``text``, in order of position, overlaps dropped."""
    found = sorted(
        (Finding(name, m.group(0), m.start()) for name, rx in _COMPILED for m in rx.finditer(text)),
        key=lambda f: (f.start, -len(f.text)),
    )
    kept: list[Finding] = []
    end = -1
    for f in found:
        if f.start >= end:
            kept.append(f)
            end = f.start + len(f.text)
    return tuple(kept)


def sanitize(text: str, mode: SanitizeMode = "flag") -> SanitizeResult:
    """Flag (``[suspicious instruction] …``) or redact each suspicious phrase; ``off`` only detects."""
    findings = find_suspicious(text)
    if mode == "off" or not findings:
        return SanitizeResult(text, findings)
    out: list[str] = []
    pos = 0
    for f in findings:
        out.append(text[pos : f.start])
        if mode == "redact":
            out.append(f"[removed: instruction-like text ({f.pattern})]")
        else:
            out.append(f"[suspicious instruction: {f.text}]")
        pos = f.start + len(f.text)
    out.append(text[pos:])
    return SanitizeResult("".join(out), findings)


def defuse_tags(text: str) -> str:
    """Make every ``<external_content`` / ``</external_content`` inert (``&lt;``), any case or spacing."""
    return _TAG_RE.sub(r"&lt;\1", text)


def source_attr(value: str) -> str:
    """A safe, single-line attribute value (quotes and angle brackets escaped, length capped)."""
    one_line = " ".join(value.split())[:_SOURCE_MAX]
    return one_line.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def wrap_external(text: str, source: str) -> str:
    """``<external_content source="…">text</external_content>`` with the text unable to break out."""
    return f'<{EXTERNAL_TAG} source="{source_attr(source)}">\n{defuse_tags(text)}\n</{EXTERNAL_TAG}>'


_WRAPPED = re.compile(rf'<{EXTERNAL_TAG} source="([^"]*)">\n')


def wrapped_source(text: str) -> str | None:
    """The source of the first wrapper in ``text``, or None when nothing in it is wrapped.

    Inner tags are defused by :func:`wrap_external`, so a raw opening tag can only be the
    harness's own (when wrapping is on).
    """
    m = _WRAPPED.search(text)
    return None if m is None else m.group(1)


__all__ = [
    "EXTERNAL_TAG",
    "Finding",
    "SanitizeMode",
    "SanitizeResult",
    "defuse_tags",
    "find_suspicious",
    "sanitize",
    "source_attr",
    "wrap_external",
    "wrapped_source",
]
