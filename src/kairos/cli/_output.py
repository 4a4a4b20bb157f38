"""What the CLI prints: the consoles, untrusted text made safe, and a run's events as they stream."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rich.console import Console
from rich.control import Control
from rich.segment import ControlType
from rich.text import Text

from kairos.agent.events import Activity, AgentEvent, FinalAnswer, RequestStats, RunError
from kairos.cli._console import _text as _text  # re-exported: _chat.py imports them from here
from kairos.cli._console import console as console
from kairos.cli._console import err_console as err_console
from kairos.security.terminal import safe_for_terminal

if TYPE_CHECKING:
    from kairos.agent import Agent


class StatusLine:
    """One transient line on the terminal saying what the agent is doing and for how long.

    It goes to stderr and only where stderr is a terminal: piped or redirected output never gets
    it. It is redrawn when the activity changes and once a second (the elapsed time), and erased
    before anything else is printed (:meth:`hide`, then :meth:`redraw`).
    """

    def __init__(self, target: Console) -> None:
        self.console = target
        self.enabled = target.is_terminal and not target.is_dumb_terminal
        self.text = ""
        self.kind = ""
        """The kind of activity shown (an ``Activity.kind``), empty when none is."""
        self._since = 0.0
        self._drawn = False
        self._tick: asyncio.TimerHandle | None = None

    def show(self, text: str, kind: str) -> None:
        """Make ``text`` the status; its seconds count from when this ``kind`` of activity began."""
        if not self.enabled:
            return
        if kind != self.kind or not self.text:
            self.kind, self._since = kind, time.monotonic()
        self.text = safe_for_terminal(text)
        self._draw()

    def hide(self) -> None:
        """Erase the line (before printing something else); :meth:`redraw` brings it back."""
        if self._drawn:
            self.console.control(Control((ControlType.CARRIAGE_RETURN,)), Control((ControlType.ERASE_IN_LINE, 2)))
            self._drawn = False

    def left_behind(self) -> None:
        """The cursor left the drawn line (the user pressed Enter); it is redrawn on the current one."""
        self._drawn = False

    def redraw(self) -> None:
        """Draw the status again after something was printed (nothing when there is none)."""
        if self.text:
            self._draw()

    def clear(self) -> None:
        """No status any more (reply text took its place, or the run ended)."""
        self.text = self.kind = ""
        self.hide()
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None

    def _draw(self) -> None:
        elapsed = time.monotonic() - self._since
        line = f"{self.text} · {elapsed:.0f} s" if elapsed >= 2 else self.text
        width = max(20, self.console.width - 1)  # never wrap: a wrapped line cannot be erased
        if len(line) > width:
            line = line[: width - 1] + "…"
        self.hide()
        self.console.print(Text(line, style="dim"), end="", soft_wrap=True)
        self._drawn = True
        if self._tick is None:
            with contextlib.suppress(RuntimeError):  # no running loop: no ticking seconds
                self._tick = asyncio.get_running_loop().call_later(1.0, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        if self.text and self._drawn:
            self._draw()
        elif self.text:  # hidden for now (a streamed line is open): keep counting
            with contextlib.suppress(RuntimeError):
                self._tick = asyncio.get_running_loop().call_later(1.0, self._on_tick)


class EventPrinter:
    """Streams a run to the terminal: tool calls, results, answer text, a live status line, optional trace.

    Every piece of model or tool text goes through :func:`safe_for_terminal` first: file contents
    and model output must not set the window title, write the clipboard, clear the screen or
    overwrite a line (and so forge what the user sees, such as an approval prompt). One printer
    serves many runs (``kairos chat``): its per-reply state resets when a run ends. Between the
    printed lines, :attr:`status` says what the agent is doing (``Activity`` events) until reply
    text streams in its place.
    """

    def __init__(self, trace: bool) -> None:
        self.trace = trace
        self.streamed = False
        """Text of the current model reply has been printed (so the final answer is not repeated)."""
        self.open_line = False
        self.failed = False
        self.status = StatusLine(err_console)
        self._running: list[str] = []
        """Tools started and not finished (the ``running …`` status follows them)."""

    def line_typed(self) -> None:
        """The user typed a line and Enter: the terminal moved to a new line, leaving what was on the old one."""
        self.open_line = False
        self.status.left_behind()

    @contextlib.contextmanager
    def above(self) -> Iterator[None]:
        """Print something else (a question, a notification): on its own line, the status below it."""
        self.status.hide()
        self._newline()
        try:
            yield
        finally:
            self.status.redraw()

    def __call__(self, event: AgentEvent) -> None:
        """Print one event."""
        if event.type == "model_delta":
            if event.delta.type == "text":
                self.status.clear()  # the text takes the status line's place
                console.print(_text(event.delta.text), end="", style="bold")
                self.streamed = self.open_line = True
        elif isinstance(event, Activity):
            if self.status.enabled:  # a status never overwrites a streamed line (piped output: nothing changes)
                self._newline()
                self.status.show(event.describe(), event.kind)
        elif event.type == "tool_started":
            self.streamed = False
            self._running.append(event.call.name)
            with self.above():
                console.print(f"[cyan]→ {_text(event.call.name)}[/]([dim]{_text(event.call.arguments)}[/])")
        elif event.type == "tool_finished":
            lines = event.result.content.splitlines() or [""]
            preview = "\n  ".join(_text(line[:160]) for line in lines[:6])
            more = f"\n  [dim]… {len(lines) - 6} more lines[/]" if len(lines) > 6 else ""
            style = "red" if event.result.is_error else "green"
            name = _text(event.call.name)
            with self.above():
                console.print(f"[{style}]← {name}[/] [dim]({event.duration_s:.2f} s)[/]\n  {preview}{more}")
            self._finished(event.call.name)
        elif isinstance(event, RequestStats):
            if self.trace:
                with self.above():
                    console.print(_text(trace_line(event)), style="magenta")
        elif isinstance(event, FinalAnswer):
            self.status.clear()
            self._running.clear()
            self._final(event)
            self.streamed = False
        elif event.type == "notice":
            with self.above():
                err_console.print(f"[yellow]{_text(event.text)}[/]")
        elif event.type == "hook_failed":
            with self.above():
                err_console.print(
                    f"[yellow]plugin {_text(event.plugin)} failed in {event.hook}: {_text(event.message)}[/]"
                )
        elif isinstance(event, RunError):
            self.status.clear()
            self._running.clear()
            self._newline()
            self.failed = True
            self.streamed = False
            err_console.print(f"[bold red]error:[/] {_text(event.message)}")

    def _finished(self, name: str) -> None:
        """One tool is done: the ``running …`` status names the others, or goes."""
        if name in self._running:
            self._running.remove(name)
        if self.status.kind == "tool":
            if self._running:
                self.status.show(Activity("tool", detail=", ".join(dict.fromkeys(self._running))).describe(), "tool")
            else:
                self.status.clear()

    def _final(self, event: FinalAnswer) -> None:
        self._newline()
        if event.stop_reason == "answer":
            if not self.streamed:
                console.print(_text(event.text), style="bold")
            return
        # a stopped reply's text was streamed already: say why it stopped, do not print it twice
        text = "" if self.streamed and event.stop_reason == "interrupted" else event.text
        console.print(f"[yellow]{_text(text) or '(stopped)'}[/] [dim]({_text(event.stop_reason)})[/]")

    def _newline(self) -> None:
        if self.open_line:
            console.print()
        self.open_line = False


def trace_line(s: RequestStats) -> str:
    """One line of ``--trace`` output for a request (callers print it through :func:`safe_for_terminal`)."""
    u = s.usage
    share = f"{u.cached_prompt_tokens / u.prompt_tokens:.0%}" if u.prompt_tokens else "-"
    ttft = f"{u.ttft_s:.2f} s" if u.ttft_s is not None else "-"
    return (
        f"[request {s.index}] prompt {u.prompt_tokens} tok · cached {u.cached_prompt_tokens} ({share}) · "
        f"new {u.new_prompt_tokens} · out {u.completion_tokens} · TTFT {ttft} · total {u.total_s:.2f} s · "
        f"{s.audit.describe()}"
    )


async def finish_memory_with_status(agent: Agent) -> None:
    """Stop saving user memory (nothing waits for the model) and say what is left for later."""
    from kairos.app import finish_memory

    left = await finish_memory(agent)
    if left:
        console.print(
            f"[dim]memory: {left} session{'s' if left > 1 else ''} not saved yet; saved while `kairos chat` or "
            "`kairos serve` is idle, or now with `kairos memory save`[/]"
        )


__all__ = ["EventPrinter", "StatusLine", "console", "err_console", "finish_memory_with_status", "trace_line"]
