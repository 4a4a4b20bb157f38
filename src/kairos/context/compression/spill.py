"""Layer 1: large tool outputs go to a file; the context keeps a frozen preview.

The decision is made before the model first sees the result, so the raw output never enters
the prompt and the prefix is not broken. The preview (head and tail lines, size, path, how to
read on) is frozen in the session: a resumed session shows it byte for byte, even if the file
was deleted meanwhile (it is then rewritten from the stored trajectory).

The file must be readable with ``read_file``, which is confined to the workspace. The spill
folder is therefore inside the workspace: ``<state dir>/spill/<session>/`` when the state dir
is (the default ``<workspace>/.kairos``), else ``<workspace>/.kairos/spill/<session>/`` (for a
``KAIROS_HOME`` elsewhere). If the file cannot be written, the preview says so.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

from kairos.context.compression.config import SpillConfig
from kairos.context.session import SessionView
from kairos.models.types import Message
from kairos.paths import default_state_dir
from kairos.security.sanitize import wrap_external, wrapped_source

_LINE_CHARS = 300
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def spill_root(session: SessionView, configured: str | None = None) -> Path:
    """The folder spill files of all sessions go to (always inside the workspace)."""
    ws = session.workspace
    if configured:
        root = (ws / configured).resolve()
        if root == ws or ws in root.parents:
            return root
    state = default_state_dir(ws).resolve()
    if ws in state.parents:
        return state / "spill"
    return ws / ".kairos" / "spill"


def spill_path(session: SessionView, seq: int, call_id: str | None, configured: str | None = None) -> Path:
    """The file the result at ``seq`` is spilled to: one folder per session, named by position and call id."""
    name = f"{seq}-{_SAFE.sub('_', call_id or 'result')[:64]}.txt"
    return spill_root(session, configured) / _SAFE.sub("_", session.id) / name


def display(session: SessionView, path: Path) -> str:
    """``path`` relative to the workspace: what read_file accepts from the workspace root."""
    return path.relative_to(session.workspace).as_posix()


def write_spill(session: SessionView, path: Path, content: str) -> None:
    """Write atomically; a ``.gitignore`` keeps spilled outputs out of the user's commits.

    Raises:
        OSError: the folder or file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    ignore = path.parent.parent / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n", encoding="utf-8")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(content if content.endswith("\n") else content + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _clip(line: str) -> str:
    return line if len(line) <= _LINE_CHARS else line[:_LINE_CHARS] + f"… [{len(line)} chars]"


def _take(lines: list[str], budget: int) -> list[str]:
    out: list[str] = []
    for line in lines:
        if out and sum(len(x) + 1 for x in out) + len(line) > budget:
            break
        out.append(line)
    return out


def preview(
    content: str, cfg: SpillConfig, where: str | None, problem: str | None = None, total: int | None = None
) -> str:
    """Head and tail lines, the size, and how to read the rest.

    Args:
        content: the result as stored.
        cfg: how many lines and characters the preview keeps.
        where: the spill file's path as the model should pass it to read_file; None if not saved.
        problem: why the full output could not be saved, said instead of a path.
        total: the output's full size when ``content`` is only its capped part.
    """
    lines = content.splitlines() or [""]
    head = _take([_clip(x) for x in lines[: cfg.head_lines]], cfg.preview_chars * 2 // 3)
    rest = lines[len(head) :]
    tail_src = rest[-cfg.tail_lines :] if cfg.tail_lines else []
    tail = list(reversed(_take([_clip(x) for x in reversed(tail_src)], cfg.preview_chars // 3)))
    hidden = len(lines) - len(head) - len(tail)
    size = f"{len(content):,} chars in {len(lines):,} lines"
    if total is not None and total > len(content):
        size = f"{total:,} chars in all ({len(content):,} kept in the context before this preview)"
    if where is not None:
        top = f"[large output: {size}, saved to {where}; only its start and end are shown here]"
        more = (
            f'[to see more: read_file(path="{where}", offset={len(head) + 1}) reads on from line {len(head) + 1}; '
            f'grep(pattern="...", path="{where}") searches it]'
        )
    else:
        top = f"[large output: {size}; only its start and end are shown here]"
        more = (
            f"[the full output could not be saved ({problem or 'no spill folder'}); ask the tool for less "
            "(a narrower pattern, path or line range) to see other parts]"
        )
    parts = [top, *head]
    if hidden > 0:
        parts.append(f"[… {hidden:,} lines not shown …]")
    parts += [*tail, more]
    return "\n".join(parts)


class Spiller:
    """Decides, writes and freezes spill previews for one agent's sessions."""

    def __init__(self, cfg: SpillConfig) -> None:
        self.cfg = cfg

    def needs(self, message: Message) -> bool:
        """A tool result over the spill threshold."""
        return message.role == "tool" and len(message.content) > self.cfg.max_chars

    def path(self, session: SessionView, seq: int, message: Message) -> Path:
        """Where the result at ``seq`` is spilled."""
        return spill_path(session, seq, message.tool_call_id, self.cfg.dir)

    def save(
        self, session: SessionView, seq: int, message: Message, whole: str | None = None
    ) -> tuple[str | None, str | None]:
        """Write the full content (``whole`` when the stored message was capped).

        Returns:
            ``(display path, None)``, or ``(None, why it failed)``.
        """
        path = self.path(session, seq, message)
        try:
            write_spill(session, path, whole if whole is not None else message.content)
        except OSError as e:
            return None, e.strerror or type(e).__name__
        return display(session, path), None

    def decide(self, session: SessionView, seq: int, message: Message, whole: str | None = None) -> str:
        """The preview text for a new large result (the caller freezes it).

        ``whole`` is the uncapped output when the stored message holds only its capped part.
        """
        if whole is not None:
            source = wrapped_source(message.content)
            if source is not None:  # external output stays marked as such in the file too
                whole = wrap_external(whole, html.unescape(source))
        where, problem = self.save(session, seq, message, whole)
        return preview(message.content, self.cfg, where, problem, len(whole) if whole is not None else None)

    def restore(self, session: SessionView, seq: int, message: Message, frozen: str) -> None:
        """Rewrite a deleted spill file that a frozen preview points to (content from the trajectory)."""
        path = self.path(session, seq, message)
        if not path.exists() and display(session, path) in frozen:
            try:
                write_spill(session, path, message.content)
            except OSError:
                pass  # the preview stays as frozen; read_file will report the missing file
