"""Pages of a long text, the parts of it that matter for a task, and the spill file with all of it.

Pagination is by characters (an ``offset`` the model passes back), cut at a line end when one is
near, with a header that always says which characters the page holds, of how many, and how to go
on. Compression "with the task in view" is extractive and deterministic: the text is split into
paragraphs, scored with BM25 against the ``focus`` words (:mod:`kairos.retrieval.lexical`), and the
best ones are kept in document order, each with the ``offset`` to read around it; the full text is
saved in the spill area.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from kairos.retrieval.lexical import BM25
from kairos.tools.base import STATE_DIR_NAME, ToolContext

SPILL_DIR = "spill"
_MAX_PARAGRAPH = 1_200


@dataclass(frozen=True, slots=True)
class Page:
    """One page: the text, where it starts and ends in the whole, and the header that says so."""

    text: str
    start: int
    end: int
    total: int
    number: int
    pages: int

    @property
    def header(self) -> str:
        """``chars a–b of N (page k of n); N-b more, read on with offset=b`` or ``… (end)``."""
        where = f"characters {self.start}–{self.end} of {self.total} (page {self.number} of {self.pages})"
        if self.end < self.total:
            return f"{where}; TRUNCATED: {self.total - self.end} more characters, read on with offset={self.end}"
        return f"{where}; end of text"


def _cut(text: str, start: int, size: int) -> int:
    """Where a page starting at ``start`` ends: at the last line end in its final fifth, else after ``size``."""
    end = min(start + size, len(text))
    if end >= len(text):
        return len(text)
    nl = text.rfind("\n", start + size * 4 // 5, end)
    return nl + 1 if nl >= 0 else end


def page(text: str, offset: int, size: int) -> Page:
    """The page of ``text`` that starts at character ``offset`` (0 = the beginning).

    Raises:
        ValueError: ``offset`` is past the end (the message gives the valid range).
    """
    total = len(text)
    if offset < 0 or (offset >= total and total > 0):
        raise ValueError(f"offset={offset} is outside the text, which has {total} characters; use 0 to {total - 1}")
    bounds = [0]
    while bounds[-1] < total:
        bounds.append(_cut(text, bounds[-1], size))
    number = sum(1 for b in bounds[:-1] if b <= offset) or 1
    end = _cut(text, offset, size)
    return Page(text[offset:end], offset, end, total, number, max(len(bounds) - 1, 1))


def paragraphs(text: str) -> list[tuple[int, str]]:
    """``(offset, paragraph)`` pairs: blank-line separated blocks, long ones split at line ends or every ~1200 chars."""
    out: list[tuple[int, str]] = []
    blocks: list[tuple[int, str]] = []
    pos = 0
    for sep in re.finditer(r"\n[ \t\r\f\v]*\n\s*", text):
        blocks.append((pos, text[pos : sep.start()]))
        pos = sep.end()
    blocks.append((pos, text[pos:]))
    for at, raw in blocks:
        block = raw.strip()
        if not block:
            continue
        start = at + (len(raw) - len(raw.lstrip()))
        while len(block) > _MAX_PARAGRAPH:
            cut = block.rfind("\n", 0, _MAX_PARAGRAPH)
            if cut < _MAX_PARAGRAPH // 3:
                cut = block.rfind(" ", 0, _MAX_PARAGRAPH)
            if cut < _MAX_PARAGRAPH // 3:
                cut = _MAX_PARAGRAPH
            out.append((start, block[:cut].rstrip()))
            skipped = len(block[cut:]) - len(block[cut:].lstrip())
            start, block = start + cut + skipped, block[cut:].lstrip()
        if block:
            out.append((start, block))
    return out


@dataclass(frozen=True, slots=True)
class Excerpt:
    """The parts of a text most relevant to a focus, in document order."""

    text: str
    kept: int
    """Paragraphs kept."""
    of: int
    """Paragraphs in the text."""
    matched: bool
    """Whether any paragraph matched a focus word (False: only the opening is shown)."""


def focus_excerpt(text: str, focus: str, budget: int) -> Excerpt:
    """The paragraphs of ``text`` that best match ``focus`` (BM25), about ``budget`` characters, in order.

    The first paragraph is always kept (the title, what the text is); gaps are marked
    ``[… N characters omitted …]`` and each kept paragraph starts with its ``[offset=K]``.
    """
    paras = paragraphs(text)
    if not paras:
        return Excerpt("", 0, 0, False)
    scores = BM25([p for _, p in paras]).scores(focus)
    order = sorted(range(len(paras)), key=lambda i: (-scores[i], i))
    chosen = {0}
    used = len(paras[0][1])
    for i in order:
        if scores[i] <= 0 or used >= budget:
            break
        if i not in chosen and used + len(paras[i][1]) <= budget * 1.1:
            chosen.add(i)
            used += len(paras[i][1])
    out: list[str] = []
    pos = 0
    for i in sorted(chosen):
        start, para = paras[i]
        if start > pos:
            out.append(f"[… {start - pos} characters omitted …]")
        out.append(f"[offset={start}] {para}")
        pos = start + len(para)
    if pos < len(text.rstrip()):
        out.append(f"[… {len(text.rstrip()) - pos} characters omitted …]")
    return Excerpt("\n\n".join(out), len(chosen), len(paras), any(s > 0 for s in scores))


def spill_dir(ctx: ToolContext) -> Path:
    """``<workspace>/.kairos/spill``: kairos's state, where file tools may read but never write."""
    return ctx.workspace / STATE_DIR_NAME / SPILL_DIR


def spill(ctx: ToolContext, text: str, stem: str) -> str:
    """Save ``text`` under the spill area (named by its hash: saving it twice is one file); the path to show.

    Raises:
        OSError: the file cannot be written.
    """
    digest = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem)[:40].strip("-.") or "text"
    folder = spill_dir(ctx)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{safe}-{digest}.txt"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8", errors="surrogatepass")
        tmp.replace(path)
    base = ctx.cwd or ctx.workspace
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def is_spill(ctx: ToolContext, path: Path) -> bool:
    """Whether ``path`` is one of the spill files (read back by offset, never compressed again)."""
    return spill_dir(ctx).resolve() in path.parents


__all__ = ["Excerpt", "Page", "focus_excerpt", "is_spill", "page", "paragraphs", "spill", "spill_dir"]
