"""LoCoMo data shared by the ``locomo-*`` benches: reading conversation files, their turns, indexing them.

A LoCoMo file holds one conversation: ``session_N`` turn lists (``speaker``, ``dia_id``, ``text``,
optionally ``blip_caption``), ``session_N_date_time`` and a ``qa`` list; the sessions may sit
under a ``conversation`` key or at the top level. A file that does not have this shape is refused
with :class:`LocomoDataError`, naming the file and what is wrong in it.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kairos.errors import KairosError
from kairos.knowledge.base import KnowledgeBase
from kairos.knowledge.chunking import Turn
from kairos.retrieval.embeddings import Embedder

CATEGORIES = (1, 2, 3, 4)
"""The QA categories both benches use, as numbered in the files: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop
(5, adversarial, has no ``answer`` and is left out)."""
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DEFAULT_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets" / "locomo"
_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION = re.compile(r"session_(\d+)")


class LocomoDataError(KairosError):
    """A LoCoMo data folder or file that cannot be used (the message names the file and the problem)."""


class NoConversationsError(LocomoDataError, FileNotFoundError):
    """The data folder holds no conversation file (or none of the ones asked for)."""


@dataclass(slots=True)
class Conversation:
    """One conversation file: its turns in session order, its QA items and its sessions' dates."""

    name: str
    turns: list[Turn]
    qa: list[dict[str, Any]]
    speakers: tuple[str, str] = ("", "")
    sessions: dict[int, str] = field(default_factory=dict)
    """Session number → its date as written (``1:56 pm on 8 May, 2023``)."""


def norm_id(raw: str) -> str:
    """``D30:05`` → ``D30:5``; anything unparseable is kept as written."""
    m = _ID.fullmatch(raw.strip())
    return f"D{int(m.group(1))}:{int(m.group(2))}" if m else raw.strip()


def parse_when(text: str) -> float | None:
    """LoCoMo's ``1:56 pm on 8 May, 2023`` as unix seconds (None if it does not parse)."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").timestamp()
    except ValueError:
        return None


def load_turns(conv: dict[str, Any]) -> list[Turn]:
    """Every turn of a LoCoMo conversation, in session order.

    Raises:
        LocomoDataError: a turn that is not an object with a ``dia_id``.
    """
    sessions = sorted(
        (int(m.group(1)), v) for k, v in conv.items() if (m := _SESSION.fullmatch(k)) and isinstance(v, list)
    )
    turns: list[Turn] = []
    for n, items in sessions:
        when = str(conv.get(f"session_{n}_date_time", ""))
        for i, item in enumerate(items):
            if not isinstance(item, dict) or "dia_id" not in item:
                raise LocomoDataError(f"session_{n}[{i}] is not a turn (an object with dia_id, speaker and text)")
            text = str(item.get("text", ""))
            if caption := item.get("blip_caption"):
                text += f" [shares a photo: {caption}]"
            speaker, turn_id = str(item.get("speaker", "")), norm_id(str(item["dia_id"]))
            turns.append(Turn(speaker, text, turn_id, parse_when(when), when, {"session": n}))
    return turns


def read_conversation(path: Path) -> Conversation:
    """One LoCoMo file, checked.

    Raises:
        LocomoDataError: unreadable, not JSON, no sessions, a malformed turn, or ``qa`` not a list of objects.
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise LocomoDataError(f"{path}: cannot read it ({e})") from e
    except json.JSONDecodeError as e:
        raise LocomoDataError(f"{path}: not valid JSON ({e})") from e
    inner = raw.get("conversation", raw) if isinstance(raw, dict) else None
    if not isinstance(inner, dict):
        raise LocomoDataError(f"{path}: not a LoCoMo conversation (expected a JSON object with session_N lists)")
    try:
        turns = load_turns(inner)
    except LocomoDataError as e:
        raise LocomoDataError(f"{path}: {e}") from e
    if not turns:
        raise LocomoDataError(f"{path}: no turns (expected session_1, session_2, … lists of turns)")
    qa = raw.get("qa", [])
    if not isinstance(qa, list) or not all(isinstance(q, dict) for q in qa):
        raise LocomoDataError(f"{path}: 'qa' must be a list of objects")
    sessions = {
        int(m.group(1)): str(inner.get(f"session_{m.group(1)}_date_time", ""))
        for k, v in inner.items()
        if (m := _SESSION.fullmatch(k)) and isinstance(v, list)
    }
    speakers = (str(inner.get("speaker_a", "")), str(inner.get("speaker_b", "")))
    return Conversation(path.stem, turns, qa, speakers, dict(sorted(sessions.items())))


def conversation_files(folder: Path, names: Sequence[str] | None = None) -> list[Path]:
    """The ``*.json`` files of ``folder``, or only those ``names`` asks for (``conv-26`` or ``conv-26.json``).

    Raises:
        NoConversationsError: the folder has none, or a name matches no file.
    """
    files = sorted(folder.glob("*.json"))
    if not files:
        raise NoConversationsError(f"no LoCoMo conversation files (*.json) in {folder}")
    if not names:
        return files
    by_stem = {p.stem: p for p in files}
    wanted = [n.strip().removesuffix(".json") for n in names if n.strip()]
    if missing := [n for n in wanted if n not in by_stem]:
        raise NoConversationsError(
            f"no conversation {', '.join(missing)} in {folder} (there are: {', '.join(sorted(by_stem))})"
        )
    return [by_stem[n] for n in dict.fromkeys(wanted)]


@contextmanager
def indexed(conv: Conversation, embedder: Embedder) -> Iterator[tuple[KnowledgeBase, float]]:
    """A throwaway knowledge base holding ``conv``, one chunk per turn (date and speaker in the text),
    and the seconds its indexing took."""
    with tempfile.TemporaryDirectory(prefix="kairos-locomo-") as tmp:
        kb = KnowledgeBase.open(Path(tmp), embedder, show_progress=True)
        try:
            t0 = time.perf_counter()
            kb.add_conversation(conv.name, conv.turns)
            kb.store.flush()
            yield kb, time.perf_counter() - t0
        finally:
            kb.close()
