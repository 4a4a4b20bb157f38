"""Terminal escape sequences are shown, never obeyed."""

from __future__ import annotations

import time

import pytest

from kairos.security.terminal import safe_for_terminal


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b]52;c;ZWNobyBwd25lZA==\x07", "\\x1b]52;c;ZWNobyBwd25lZA==\\x07"),  # OSC 52: write the clipboard
        ("\x1b]0;x\x07", "\\x1b]0;x\\x07"),  # window title
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear screen, cursor home
        ("rm -rf /\rls -la", "rm -rf /\\rls -la"),  # a bare CR would overwrite the line
        ("abc\u202edcba\u202c", "abc\\u202edcba\\u202c"),  # right-to-left override
        ("\u2066x\u2069", "\\u2066x\\u2069"),  # isolates
        ("a\x9b2Jb", "a\\x9b2Jb"),  # C1 CSI
        ("\x00\x07\x08\x7f", "\\x00\\x07\\x08\\x7f"),
    ],
)
def test_controls_are_rendered_visibly(text: str, shown: str) -> None:
    assert safe_for_terminal(text) == shown


def test_layout_and_ordinary_text_are_kept() -> None:
    text = "line 1\n\tindented — ünïcödé ✓ 日本語 [bold]not markup[/]\n"
    assert safe_for_terminal(text) == text
    assert safe_for_terminal("a\r\nb\r\n") == "a\nb\n"  # Windows line ends are line ends


def test_every_c0_c1_and_bidi_control_is_neutralised() -> None:
    controls = [*range(0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
    out = safe_for_terminal("".join(chr(c) for c in controls))
    assert set(out) & {chr(c) for c in controls} == {"\n", "\t"}


def test_linear_time_on_large_hostile_input() -> None:
    text = ("\x1b[2J\r\u202e" * 200_000) + "x" * 1_000_000
    start = time.perf_counter()
    out = safe_for_terminal(text)
    assert time.perf_counter() - start < 2.0
    assert "\x1b" not in out and out.endswith("x" * 1000)
