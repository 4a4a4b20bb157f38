"""The live status line of ``kairos chat`` and ``kairos run``: on a terminal only, replaced by the reply's text."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import kairos.cli._output as output
from kairos.agent.events import Activity, FinalAnswer, ModelDeltaEvent, ToolCallFinished, ToolCallStarted
from kairos.cli._output import EventPrinter
from kairos.models.types import TextDelta, ToolCall
from kairos.tools.base import ToolResult

ERASE = "\r\x1b[2K"


def _consoles(monkeypatch: pytest.MonkeyPatch, *, terminal: bool) -> tuple[io.StringIO, io.StringIO]:
    """stdout and stderr consoles writing to buffers, as a terminal would get them (or a pipe)."""
    out, err = io.StringIO(), io.StringIO()
    kw = {"force_terminal": terminal, "width": 100, "highlight": False, "color_system": None}
    monkeypatch.setattr(output, "console", Console(file=out, **kw))  # type: ignore[arg-type]
    monkeypatch.setattr(output, "err_console", Console(file=err, **kw))  # type: ignore[arg-type]
    return out, err


def test_on_a_terminal_the_status_says_what_happens_and_the_text_replaces_it(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = _consoles(monkeypatch, terminal=True)
    printer = EventPrinter(trace=False)
    printer(Activity("waiting"))
    printer(Activity("reading", 512, 2653))
    assert err.getvalue().endswith(ERASE + "reading the prompt — 512 of 2,653 tokens")
    printer(Activity("generating"))
    printer(ModelDeltaEvent(TextDelta("Hello")))
    assert err.getvalue().endswith(ERASE) and printer.status.text == ""  # erased before the text came
    assert out.getvalue() == "Hello"
    printer(FinalAnswer("Hello"))
    assert out.getvalue() == "Hello\n"  # the streamed answer is not printed twice


def test_a_status_for_running_tools_follows_them_and_lines_print_above_it(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = _consoles(monkeypatch, terminal=True)
    printer = EventPrinter(trace=False)
    a, b = ToolCall("c1", "bash", "{}"), ToolCall("c2", "read_file", "{}")
    printer(Activity("tool", detail="bash, read_file"))
    printer(ToolCallStarted(a))
    printer(ToolCallStarted(b))
    assert err.getvalue().endswith(ERASE + "running bash, read_file")
    printer(ToolCallFinished(b, ToolResult("text"), 0.1))
    assert err.getvalue().endswith(ERASE + "running bash")
    assert "← read_file" in out.getvalue()
    printer(ToolCallFinished(a, ToolResult("ok"), 2.0))
    assert printer.status.text == "" and err.getvalue().endswith(ERASE)


def test_an_open_line_of_text_is_ended_before_the_status_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = _consoles(monkeypatch, terminal=True)
    printer = EventPrinter(trace=False)
    printer(ModelDeltaEvent(TextDelta("Let me look.")))
    printer(Activity("generating", detail="read_file"))
    assert out.getvalue() == "Let me look.\n"  # the status never overwrites the streamed text
    assert err.getvalue().endswith("generating a call to read_file")


def test_piped_output_gets_no_status_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = _consoles(monkeypatch, terminal=False)
    printer = EventPrinter(trace=False)
    for event in (Activity("waiting"), Activity("reading", 0, 90), Activity("tool", detail="bash"), Activity("memory")):
        printer(event)
    printer(ModelDeltaEvent(TextDelta("plain")))
    printer(FinalAnswer("plain"))
    assert err.getvalue() == "" and out.getvalue() == "plain\n"


def test_status_text_from_a_model_cannot_drive_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    _, err = _consoles(monkeypatch, terminal=True)
    printer = EventPrinter(trace=False)
    printer(Activity("generating", detail="evil\x1b]0;owned\x07\x1b[2J"))  # a tool name as a remote model sent it
    drawn = err.getvalue().removeprefix(ERASE)
    assert "\x1b]0" not in drawn and "\x07" not in drawn and "\x1b[2J" not in drawn


def test_describe_names_each_activity() -> None:
    assert Activity("reading", 1024, 2653).describe() == "reading the prompt — 1,024 of 2,653 tokens"
    assert Activity("waiting").describe() == "waiting for the first token"
    assert Activity("generating", detail="bash").describe() == "generating a call to bash"
    assert Activity("tool", detail="bash").describe() == "running bash"
    assert Activity("memory").describe() == "waiting for memory"
