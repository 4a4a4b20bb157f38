r"""Make untrusted text safe to print on a terminal.

File contents, tool output and model text can carry escape sequences that a terminal obeys:
``ESC ] 0;title BEL`` sets the window title, ``ESC ] 52;c;BASE64 BEL`` writes the clipboard,
``ESC [2J`` clears the screen, a bare ``\r`` returns to the start of the line so later text
overwrites it, and bidi overrides (U+202E) reorder what is shown. Any of these could hide text
or forge an approval prompt. :func:`safe_for_terminal` renders them as visible escapes instead.
"""

from __future__ import annotations

_BIDI = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
"""Embedding, override and isolate controls (the "Trojan Source" set)."""


def _table() -> dict[int, str]:
    table: dict[int, str] = {}
    for code in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)):
        table[code] = f"\\x{code:02x}"
    table[ord("\r")] = "\\r"
    for code in _BIDI:
        table[code] = f"\\u{code:04x}"
    del table[ord("\n")], table[ord("\t")]  # layout, not control: kept as they are
    return table


_TABLE = _table()


def safe_for_terminal(text: str) -> str:
    r"""``text`` with every terminal control rendered visibly, in linear time.

    Kept as they are: ``\n``, ``\t`` and ``\r\n`` (read as ``\n``). Rendered as escapes:
    ESC and every other C0 control (``\x1b``, a bare ``\r`` as ``\r``), DEL (``\x7f``), the C1
    controls U+0080-U+009F (U+009B is a one-character CSI on some terminals) and the bidi
    embedding, override and isolate characters (``\u202e``).

    Args:
        text: untrusted text (model output, tool results, file contents).

    Returns:
        Text that moves the cursor only by newlines and tabs and sends no command to the terminal.
    """
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    return text.translate(_TABLE)


__all__ = ["safe_for_terminal"]
