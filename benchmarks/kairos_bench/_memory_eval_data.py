"""The ``memory-eval`` suite's data: YAML cases, the required-facts key and deterministic fact recall.

A case (``layer*/NN_*.yaml``) holds past ``conversation_histories`` (each with a ``timestamp`` and
``messages``), then the ``user_question``. The key maps a case's ``test_id`` to
``{"required_facts": [...]}``; a fact is a string or a list of acceptable surface forms (any one
counts). The data folder's ``gold_facts.json`` wins where it has a case; the project's key
(``data/memory_eval_gold.json``, transcribed from each case's ``expected_behavior`` and
``evaluation_criteria``) fills the gaps.

Matching is on word tokens, case-insensitive, so punctuation and spacing do not matter
(``VEL-89923476`` = ``vel 89923476`` = ``VEL89923476``), and numbers match with or without
thousands separators and trailing zero decimals (``$130,500`` = ``130500``, ``$45,680.00`` =
``45680``). A fact is found when its tokens, joined, equal the join of consecutive answer tokens
starting and ending on token boundaries (so ``400`` is not found in ``$4,000`` nor ``3x`` in ``23 x``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeAlias

import yaml

from kairos.errors import ConfigError

Fact: TypeAlias = str | tuple[str, ...]
"""One required fact: a string, or any-of acceptable surface forms."""
Key: TypeAlias = dict[str, tuple[Fact, ...]]
"""test_id → its required facts."""

LAYERS = (1, 2, 3)
BUNDLED_KEY = Path(__file__).resolve().parent / "data" / "memory_eval_gold.json"
SHARED_KEY_NAME = "gold_facts.json"
_GROUPED = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ZERO_DECIMALS = re.compile(r"(\d)\.0+(?!\d)")
_TRAILING_ZEROS = re.compile(r"(\d\.\d*?[1-9])0+(?!\d)")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[^\W\d_]+")


@dataclass(frozen=True, slots=True)
class History:
    """One past conversation: when it happened and its messages (``role``, ``content``)."""

    conversation_id: str
    timestamp: str
    messages: tuple[tuple[str, str], ...]

    @property
    def at(self) -> datetime | None:
        """The timestamp parsed (``2024-11-15 10:30:00``), or None when it does not parse."""
        try:
            return datetime.fromisoformat(self.timestamp.strip())
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Case:
    """One memory-eval case: its layer, past conversations and the question asked afterwards."""

    test_id: str
    layer: int
    title: str
    histories: tuple[History, ...]
    question: str
    criteria: str = ""
    expected: str = ""
    path: str = ""


@dataclass(slots=True)
class LoadedCases:
    """The cases read from a folder, and the files that could not be read (with why)."""

    cases: list[Case] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


# ---- cases ---------------------------------------------------------------------------------


def _layer_of(raw: dict[str, Any], path: Path) -> int | None:
    for text in (str(raw.get("category", "")), path.parent.name):
        m = re.fullmatch(r"layer\s*(\d+)", text.strip().lower())
        if m:
            return int(m.group(1))
    return None


def parse_case(raw: Any, path: Path) -> Case:
    """A case from its parsed YAML.

    Raises:
        ValueError: a field the bench needs is missing or has the wrong shape.
    """
    if not isinstance(raw, dict):
        raise ValueError("not a mapping")
    layer = _layer_of(raw, path)
    if layer is None:
        raise ValueError("no layer (category 'layerN' or a layerN folder)")
    question = raw.get("user_question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("no user_question")
    histories = []
    for i, h in enumerate(raw.get("conversation_histories") or []):
        if not isinstance(h, dict) or not isinstance(h.get("messages"), list):
            raise ValueError(f"conversation_histories[{i}] has no messages list")
        msgs = tuple(
            (str(m.get("role", "user")), str(m.get("content", "")))
            for m in h["messages"]
            if isinstance(m, dict) and str(m.get("content", "")).strip()
        )
        histories.append(
            History(str(h.get("conversation_id", f"conversation_{i + 1}")), str(h.get("timestamp", "")), msgs)
        )
    if not histories:
        raise ValueError("no conversation_histories")
    return Case(
        test_id=str(raw.get("test_id") or path.stem),
        layer=layer,
        title=str(raw.get("title", "")),
        histories=tuple(histories),
        question=question.strip(),
        criteria=str(raw.get("evaluation_criteria", "") or "").strip(),
        expected=str(raw.get("expected_behavior", "") or "").strip(),
        path=str(path),
    )


def load_cases(folder: Path, layers: tuple[int, ...] = LAYERS, limit: int | None = None) -> LoadedCases:
    """The cases of ``folder`` (``**/*.yaml``, sorted) in ``layers``, the first ``limit`` of each layer.

    A file that does not parse or lacks a field is skipped and named in ``skipped``, never fatal.
    """
    loaded = LoadedCases()
    per_layer: dict[int, int] = {}
    for path in sorted(folder.rglob("*.y*ml")):
        try:
            raw = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
            case = parse_case(raw, path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError) as e:
            loaded.skipped.append(f"{path.relative_to(folder)}: {type(e).__name__}: {str(e)[:160]}")
            continue
        if case.layer not in layers or (limit is not None and per_layer.get(case.layer, 0) >= limit):
            continue
        per_layer[case.layer] = per_layer.get(case.layer, 0) + 1
        loaded.cases.append(case)
    return loaded


# ---- the key -------------------------------------------------------------------------------


def _fact(value: Any, where: str) -> Fact:
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
        return tuple(value)
    raise ConfigError(f"{where}: a fact must be a non-empty string or a non-empty list of strings, not {value!r}")


def read_key(path: Path) -> Key:
    """A key file: ``{test_id: {"required_facts": [fact, ...]}}`` (keys starting with ``_`` are notes).

    Raises:
        ConfigError: the file is unreadable, not JSON, or an entry has the wrong shape (the message
            names the file and the case).
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"memory-eval key {path}: cannot read it as JSON ({e})") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"memory-eval key {path}: expected an object of test_id -> {{'required_facts': [...]}}")
    key: Key = {}
    for test_id, entry in raw.items():
        if test_id.startswith("_"):
            continue
        where = f"memory-eval key {path}, case {test_id!r}"
        facts = entry.get("required_facts") if isinstance(entry, dict) else None
        if not isinstance(facts, list) or not facts:
            raise ConfigError(f"{where}: expected {{'required_facts': [a non-empty list of facts]}}")
        key[test_id] = tuple(_fact(f, where) for f in facts)
    return key


def load_key(folder: Path, fallback: Path | None = BUNDLED_KEY) -> tuple[Key, dict[str, str]]:
    """The data folder's key, its gaps filled from ``fallback``; also which file each case's facts came from.

    Raises:
        ConfigError: either key file is malformed.
    """
    key: Key = {}
    source: dict[str, str] = {}
    if fallback is not None and fallback.is_file():
        for test_id, facts in read_key(fallback).items():
            key[test_id], source[test_id] = facts, "bundled"
    shared = folder / SHARED_KEY_NAME
    if shared.is_file():
        for test_id, facts in read_key(shared).items():
            key[test_id], source[test_id] = facts, "data"
    return key, source


# ---- scoring -------------------------------------------------------------------------------


def tokens(text: str) -> list[str]:
    """Lower-case word and number tokens; thousands separators and zero decimals dropped."""
    text = _GROUPED.sub("", text.lower())
    text = _TRAILING_ZEROS.sub(r"\1", _ZERO_DECIMALS.sub(r"\1", text))
    return _TOKEN.findall(text)


def _found(answer: list[str], form: str) -> bool:
    target = "".join(tokens(form))
    if not target:
        return False
    for start, first in enumerate(answer):
        if not target.startswith(first):
            continue
        joined = first
        for tok in answer[start + 1 :]:
            if len(joined) >= len(target) or not target.startswith(joined):
                break
            joined += tok
        if joined == target:
            return True
    return False


def fact_found(answer: str | list[str], fact: Fact) -> bool:
    """Whether any form of ``fact`` is in ``answer`` (see the module docstring for the matching)."""
    toks = tokens(answer) if isinstance(answer, str) else answer
    forms = (fact,) if isinstance(fact, str) else fact
    return any(_found(toks, form) for form in forms)


def fact_label(fact: Fact) -> str:
    """How a row names a fact: its first form."""
    return fact if isinstance(fact, str) else fact[0]


def recall(answer: str, facts: tuple[Fact, ...]) -> tuple[int, list[str]]:
    """How many of ``facts`` the answer holds, and the labels of the missing ones."""
    toks = tokens(answer)
    missing = [fact_label(f) for f in facts if not fact_found(toks, f)]
    return len(facts) - len(missing), missing
