"""What the CLI prints: the consoles, untrusted text made safe, and a run's events as they stream."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from kairos.agent.events import AgentEvent, FinalAnswer, RequestStats, RunError
from kairos.security.terminal import safe_for_terminal

if TYPE_CHECKING:
    from kairos.agent import Agent

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def _text(text: str) -> str:
    """Untrusted text (model output, tool results, file content) as Rich prints it.

    Printed literally, with terminal escape sequences shown instead of obeyed.
    """
    return escape(safe_for_terminal(text))


class EventPrinter:
    """Streams a run to the terminal: tool calls, results, answer text, optional trace.

    Every piece of model or tool text goes through :func:`safe_for_terminal` first: file contents
    and model output must not set the window title, write the clipboard, clear the screen or
    overwrite a line (and so forge what the user sees, such as an approval prompt). One printer
    serves many runs (``kairos chat``): its per-reply state resets when a run ends.
    """

    def __init__(self, trace: bool) -> None:
        self.trace = trace
        self.streamed = False
        """Text of the current model reply has been printed (so the final answer is not repeated)."""
        self.open_line = False
        self.failed = False

    def __call__(self, event: AgentEvent) -> None:
        """Print one event."""
        if event.type == "model_delta":
            if event.delta.type == "text":
                console.print(_text(event.delta.text), end="", style="bold")
                self.streamed = self.open_line = True
        elif event.type == "tool_started":
            self.streamed = False
            self._newline()
            console.print(f"[cyan]→ {_text(event.call.name)}[/]([dim]{_text(event.call.arguments)}[/])")
        elif event.type == "tool_finished":
            lines = event.result.content.splitlines() or [""]
            preview = "\n  ".join(_text(line[:160]) for line in lines[:6])
            more = f"\n  [dim]… {len(lines) - 6} more lines[/]" if len(lines) > 6 else ""
            style = "red" if event.result.is_error else "green"
            name = _text(event.call.name)
            console.print(f"[{style}]← {name}[/] [dim]({event.duration_s:.2f} s)[/]\n  {preview}{more}")
        elif isinstance(event, RequestStats):
            if self.trace:
                self._newline()
                console.print(_text(trace_line(event)), style="magenta")
        elif isinstance(event, FinalAnswer):
            self._final(event)
            self.streamed = False
        elif event.type == "notice":
            self._newline()
            err_console.print(f"[yellow]{_text(event.text)}[/]")
        elif event.type == "hook_failed":
            self._newline()
            err_console.print(f"[yellow]plugin {_text(event.plugin)} failed in {event.hook}: {_text(event.message)}[/]")
        elif isinstance(event, RunError):
            self._newline()
            self.failed = True
            self.streamed = False
            err_console.print(f"[bold red]error:[/] {_text(event.message)}")

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


__all__ = ["EventPrinter", "console", "err_console", "finish_memory_with_status", "trace_line"]
