"""``kairos run``, ``chat`` and ``sessions``: the agent at work on a session, from the terminal.

``run`` does one task with the product agent; ``chat`` talks with the agent of the event runtime
(the one ``kairos serve`` runs); ``sessions`` lists what both left behind. Registered on the main
app by :mod:`kairos.cli`.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kairos.cli._console import _text, console
from kairos.cli._options import BaseUrlOpt, ModelOpt, WorkspaceOpt
from kairos.cli._workspace import _fail, _model, _open, _session_store, _setup
from kairos.errors import KairosError

if TYPE_CHECKING:  # each command imports what it needs when it runs: `kairos --help` loads none of it
    from collections.abc import Callable, Sequence

    from kairos.agent import Agent
    from kairos.agent.events import AgentEvent
    from kairos.config import KairosConfig
    from kairos.context.session import Session
    from kairos.models.types import ToolCall

TraceOpt = Annotated[bool, typer.Option("--trace", help="per request: tokens, cached tokens, TTFT, prefix audit")]
SessionOpt = Annotated[str | None, typer.Option("--session", "-s", help="resume this session id")]
BrowserOpt = Annotated[
    bool,
    typer.Option(
        "--browser",
        help="computer use: the agent drives a Chromium by numbered elements ([browser]); only the browser tools",
    ),
]
UrlOpt = Annotated[str | None, typer.Option("--url", help="with --browser: the page to start on (its host is allowed)")]
AllowHostOpt = Annotated[
    list[str] | None,
    typer.Option("--allow-host", help="with --browser: another host the browser may reach (repeat; * for any)"),
]
ShowOpt = Annotated[bool, typer.Option("--show", help="with --browser: a visible browser window (needs a display)")]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Each one posts an immediate interrupt: the turn stops at its next safe point, the session stays valid."""


async def _drive(
    agent: Agent,
    session: Session,
    text: str,
    printer: Callable[[AgentEvent], None],
    opening: Sequence[ToolCall] = (),
) -> int | None:
    """Run one turn (after the harness's ``opening`` calls); returns the signal that interrupted it, if one did.

    Ctrl-C, SIGTERM and SIGHUP interrupt the turn at a safe point instead of killing the process.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    received: list[int] = []

    def stop(signum: int) -> None:
        received.append(signum)
        session.interrupt(reason=signal.Signals(signum).name)

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    try:
        async for event in agent.run(session, text, opening):
            printer(event)
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
    return received[0] if received else None


def run(
    task: Annotated[str, typer.Argument(help="what the agent should do")],
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    workspace: WorkspaceOpt = Path("."),
    session: SessionOpt = None,
    trace: TraceOpt = False,
    browser: BrowserOpt = False,
    url: UrlOpt = None,
    allow_host: AllowHostOpt = None,
    headed: ShowOpt = False,
) -> None:
    """Run one task to completion, streaming tool calls, results and the answer.

    With --browser the agent works in a Chromium of its own (profile in .kairos/browser/, downloads in
    downloads/): it reads each page as numbered elements, acts by number and re-checks every action;
    controls that pay, order, send or delete ask you first. Example:
    kairos run --browser --url http://127.0.0.1:8000/ "order a kettle for Ada Lovelace"
    """
    import asyncio

    from kairos.agent.events import RunError
    from kairos.cli._output import EventPrinter, finish_memory_with_status
    from kairos.errors import ContextOverflowError
    from kairos.models.types import ToolCall

    if (url or allow_host or headed) and not browser:
        raise _fail("--url, --allow-host and --show go with --browser")
    adjust = _browser_config(url, allow_host or [], headed) if browser else None
    # the start page is opened by the harness, its look a tool result: page text stays external content,
    # and the request names no URL the model would go back to after each step
    opening = [ToolCall("open_start_page", "open_url", json.dumps({"url": url}))] if browser and url else []
    agent, store, sess = _setup(workspace, model, base_url, session, title=task[:80], adjust=adjust)
    printer = EventPrinter(trace)
    overflowed = False

    def show(event: AgentEvent) -> None:
        nonlocal overflowed
        overflowed |= isinstance(event, RunError) and isinstance(event.error, ContextOverflowError)
        printer(event)

    async def main() -> int | None:
        try:
            return await _drive(agent, sess, task, show, opening)
        finally:
            printer.status.clear()
            await sess.aclose()
            await finish_memory_with_status(agent)  # stops saving memory at once ([memory] enabled); the rest is later

    try:
        stopped_by = asyncio.run(main())
    except KeyboardInterrupt:  # Ctrl-C while closing: the session itself is complete
        console.print(f"[yellow]stopped[/]; session {sess.id} is saved")
        store.close()
        raise typer.Exit(130) from None
    # a session over the window fails the same way when continued (the error says what helps instead)
    hint = "" if overflowed else f" (continue with: kairos chat --session {sess.id})"
    console.print(f"[dim]session {sess.id}{hint}[/]")
    store.close()
    if stopped_by is not None:
        raise typer.Exit(128 + stopped_by)
    if printer.failed:
        raise typer.Exit(1)


def _browser_config(url: str | None, hosts: list[str], show: bool) -> Callable[[KairosConfig], KairosConfig]:
    """``--browser``: the browser toolset instead of the built-in tools, the hosts named here allowed."""
    from kairos.browser.session import host_of

    start = host_of(url) if url else ""

    def adjust(config: KairosConfig) -> KairosConfig:
        browser = config.browser.model_copy(
            update={
                "allow_hosts": tuple(dict.fromkeys([*config.browser.allow_hosts, *hosts, *([start] if start else [])])),
                "headless": config.browser.headless and not show,
            }
        )
        # a lean prompt for a small model: the page's tools only (files and shell stay with plain kairos run)
        tools = config.tools.model_copy(update={"builtins": (), "toolsets": ("browser",)})
        off = {"enabled": False}
        return config.model_copy(
            update={
                "browser": browser,
                "tools": tools,
                "skills": config.skills.model_copy(update=off),
                "subagents": config.subagents.model_copy(update=off),
                "discovery": config.discovery.model_copy(update=off),
            }
        )

    return adjust


def chat(
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    workspace: WorkspaceOpt = Path("."),
    session: SessionOpt = None,
    trace: TraceOpt = False,
) -> None:
    """Multi-turn chat on the event runtime that `kairos serve` runs, with the same tools and sources.

    Timers, finished async tasks, file watches and mail wake the agent here too; those runs print as they happen.
    notify_user messages and ask_user questions (and approvals) appear in the terminal.
    When the agent asks something, the next line you type answers it (or: /answer ID TEXT).
    You can type while the agent works: the line goes to the running turn at its next safe point.
    Ctrl-C stops a running turn; Ctrl-C at the prompt, Ctrl-D or /exit quits. /help repeats this.
    """
    config, store = _open(workspace, model, base_url, session)
    llm = _model(config, store)
    import asyncio

    from kairos.cli._chat import run_chat  # the runtime loads only once the checks above passed
    from kairos.cli._runtime import build_runtime
    from kairos.context.store import new_session_id

    try:
        resumed = ""
        if session:
            probe = store.resume(session)  # unknown or held by another process: a clear error now
            resumed = f", resumed with {len(probe)} messages"
            asyncio.run(probe.aclose())
        sid = session or new_session_id()
        interactive = sys.stdin.isatty()
        # approvals (approver auto or interactive) are outbox questions: the chat shows them, a typed line answers
        runtime = build_runtime(llm, workspace, config, store, default_session=sid)
        if not session:  # only once the configuration is known to work: a failed start leaves no empty session
            store.trajectories.create_session("", session_id=sid)
    except KairosError as e:
        store.close()
        raise _fail(str(e)) from e
    console.print(f"[dim]session {sid}{resumed}. /help for help, /exit to quit.[/]")
    stopped_by: int | None = None
    try:
        stopped_by = asyncio.run(run_chat(runtime, sid, trace=trace, interactive=interactive))
    except KeyboardInterrupt:  # Ctrl-C before the chat took the signal over
        stopped_by = None
    console.print(f"\n[dim]session {sid} saved.[/]")
    store.close()
    if stopped_by is not None:
        raise typer.Exit(128 + stopped_by)


def sessions(workspace: WorkspaceOpt = Path(".")) -> None:
    """List the stored sessions, newest first: the workspace's, or the deployment's in ``[storage] store``."""
    from kairos.config import load_config

    try:
        store = _session_store(load_config(workspace), workspace)
    except KairosError as e:
        raise _fail(str(e)) from e
    for info in store.list():
        console.print(f"{info.id}  {info.messages:4d} msgs  {_text(info.title)}")
    store.close()
