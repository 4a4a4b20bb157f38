"""One bash command's output: captured with bounded memory, saved in full to a spill file, shown cut.

:class:`Capture` keeps the first ``HEAD_BYTES`` and the most recent bytes (``MAX_BUFFER`` in
all) in memory. Once the output outgrows that, everything from the first byte on also goes to
``<workspace>/.kairos/spill/bash-<id>.log`` (up to ``SPILL_MAX_BYTES``), so nothing is lost:
:func:`render` then shows a head and a tail that fit the tool's output budget, with a note in
between giving the true size and the file to read the rest from (``read_file`` may read
``.kairos/spill``). Smaller outputs that still do not fit are written to a spill file when the
command ends.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

HEAD_BYTES = 256 * 1024
MAX_BUFFER = 1024 * 1024
"""Bytes of output kept in memory per command: the first ``HEAD_BYTES`` and the most recent rest."""
SPILL_MAX_BYTES = 64_000_000
"""The spill file stops growing here; the size reported is still the true total."""
DISPLAY_MAX_CHARS = 10_000
"""Outputs up to this many characters are shown whole (below the harness's 12,000-character cap)."""
DISPLAY_HEAD_CHARS = 2_000
DISPLAY_TAIL_CHARS = 6_000
"""A longer output shows its start and, larger, its end: errors and summaries come last."""
_O_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class Spill:
    """A file that receives a command's complete output, opened on the first write."""

    def __init__(self, directory: Path, workspace: Path) -> None:
        self.directory = directory
        self.workspace = workspace
        self.path: Path | None = None
        self.written = 0
        self.capped = False
        self.problem = ""
        self._fd: int | None = None

    def _open(self) -> int | None:
        if self._fd is not None or self.problem:
            return self._fd
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            real = self.directory.resolve()
            if real != self.workspace and self.workspace not in real.parents:
                raise PermissionError(f"{self.directory} leads outside the workspace")
            ignore = real / ".gitignore"  # spilled outputs stay out of the user's commits
            if not ignore.exists():
                ignore.write_text("*\n", encoding="utf-8")
            path = real / f"bash-{uuid.uuid4().hex[:12]}.log"
            self._fd = os.open(path, _O_FLAGS, 0o600)
            self.path = path
        except OSError as exc:
            self.problem = exc.strerror or str(exc)
        return self._fd

    def write(self, data: bytes) -> None:
        fd = self._open()
        if fd is None or self.capped:
            return
        room = SPILL_MAX_BYTES - self.written
        if len(data) > room:
            data, self.capped = data[:room], True
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
                self.written += n
        except OSError as exc:
            self.problem = exc.strerror or str(exc)
            self.close()

    def finish(self, length: int) -> None:
        """Cut the file to the output's ``length`` (it may hold the start of the end marker) and close it."""
        if self._fd is not None and self.written > length:
            try:
                os.ftruncate(self._fd, length)
                self.written = length
            except OSError as exc:
                self.problem = exc.strerror or str(exc)
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def saved(self) -> bool:
        return self.path is not None and not self.problem


class Capture:
    """Collects one command's output until its sentinel line; bounded memory, full copy spilled."""

    def __init__(self, marker: bytes, spill: Spill | None = None) -> None:
        self.marker = marker
        self.spill = spill
        self.spilling = False
        """Every chunk now also goes to the spill file (the output outgrew the buffer)."""
        self.buf = bytearray()
        self.omitted = 0
        self.found = -1
        self.fed = 0
        self.newlines = 0
        self.status: int | None = None
        self.pwd = ""
        self.eof = False

    def feed(self, chunk: bytes) -> bool:
        """Add output; True once the sentinel line is complete."""
        self.buf += chunk
        self.fed += len(chunk)
        self.newlines += chunk.count(b"\n")
        if self.spilling and self.spill is not None:
            self.spill.write(chunk)
        if self.found < 0:
            self.found = self.buf.find(self.marker, max(0, len(self.buf) - len(chunk) - len(self.marker)))
            if self.found < 0 and len(self.buf) > MAX_BUFFER:
                if self.spill is not None and not self.spilling:
                    self.spilling = True
                    self.spill.write(bytes(self.buf))  # everything so far: the file starts at the first byte
                drop = len(self.buf) - MAX_BUFFER
                del self.buf[HEAD_BYTES : HEAD_BYTES + drop]
                self.omitted += drop
                return False
        if self.found < 0:
            return False
        end = self.buf.find(b"\n", self.found + len(self.marker))
        if end < 0:
            return False
        status, _, pwd = bytes(self.buf[self.found + len(self.marker) : end]).decode(errors="replace").partition(" ")
        self.status = int(status) if status.isdigit() else 1
        self.pwd = pwd
        return True

    @property
    def _end(self) -> int:
        return self.found if self.found >= 0 else len(self.buf)

    @property
    def kept(self) -> bytes:
        """The output bytes in memory (without the sentinel): the whole output unless ``omitted``."""
        return bytes(self.buf[: self._end])

    @property
    def total(self) -> int:
        """The true size of the command's output in bytes."""
        return self.omitted + self._end

    @property
    def lines(self) -> int:
        """How many lines the output has (a last line without a newline counts)."""
        end = self._end
        n = self.newlines - self.buf.count(b"\n", end)
        return n + (1 if end and self.buf[end - 1] != ord("\n") else 0)

    def finish(self) -> None:
        """Close the spill file; an output too long to show whole is written to one now if not yet."""
        if self.spill is None:
            return
        if self.spill.path is None and not self.omitted and self._end > DISPLAY_MAX_CHARS:
            kept = self.kept
            if len(kept.decode("utf-8", errors="replace")) > DISPLAY_MAX_CHARS:
                self.spill.write(kept)
        self.spill.finish(self.total)


@dataclass(slots=True)
class Rendered:
    text: str
    total_bytes: int
    full_output: Path | None = None
    """The spill file holding the output (all of it unless ``capped``), when it was cut for display."""
    capped: bool = False


def render(cap: Capture, cwd: Path) -> Rendered:
    """The output as the model sees it: whole if it fits, else head, a note and tail.

    Paths in the note are relative to ``cwd``, the form read_file accepts there.
    """
    kept = cap.kept
    total = cap.total
    if not cap.omitted:
        text = kept.decode("utf-8", errors="replace")
        if len(text) <= DISPLAY_MAX_CHARS:
            return Rendered(text, total)
        head, tail = text[: DISPLAY_HEAD_CHARS * 2], text[-DISPLAY_TAIL_CHARS * 2 :]
    else:
        head = kept[: min(HEAD_BYTES, DISPLAY_HEAD_CHARS * 8)].decode("utf-8", errors="replace")
        tail = kept[max(HEAD_BYTES, len(kept) - DISPLAY_TAIL_CHARS * 8) :].decode("utf-8", errors="replace")
    head, whole_lines = _cut_head(head)
    tail = _cut_tail(tail)
    hidden = total - len(head.encode()) - len(tail.encode())
    from_line = head.count("\n") + (2 if whole_lines else 1)
    spill = cap.spill
    lines = cap.lines
    size = f"{total:,} bytes ({_mb(total)}), {lines:,} line{'' if lines == 1 else 's'}"
    if spill is not None and spill.saved and spill.path is not None:
        where = Path(os.path.relpath(spill.path, cwd)).as_posix()
        if spill.capped:
            saved = (
                f"the first {spill.written:,} bytes of it ({_mb(SPILL_MAX_BYTES)}, where saving stopped) are in {where}"
            )
        else:
            saved = f"all of it is in {where}"
        how = f"read on with read_file(path={where!r}, offset={from_line}) or search it with grep"
        note = f"[... {hidden:,} bytes not shown: the output was {size}; {saved}: {how} ...]"
        full = spill.path
    else:
        why = f": {spill.problem}" if spill is not None and spill.problem else ""
        note = (
            f"[... {hidden:,} bytes not shown: the output was {size}; it could not be saved to a file{why}. "
            "Rerun it with less output (e.g. | tail -n 50, | grep PATTERN, > out.log) ...]"
        )
        full = None
    return Rendered(f"{head}\n{note}\n{tail}", total, full, bool(spill and spill.capped))


def _cut_head(head: str) -> tuple[str, bool]:
    """The head to show, ending at a line end unless that line is very long; and whether it does."""
    head = head[:DISPLAY_HEAD_CHARS]
    at = head.rfind("\n")
    return (head[:at], True) if at >= DISPLAY_HEAD_CHARS // 2 else (head, False)


def _cut_tail(tail: str) -> str:
    tail = tail[-DISPLAY_TAIL_CHARS:]
    at = tail.find("\n")
    return tail[at + 1 :] if 0 <= at < DISPLAY_TAIL_CHARS // 2 else tail


def _mb(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB" if size >= 100_000 else f"{size / 1000:.1f} KB"
