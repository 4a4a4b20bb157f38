"""``kairos serve``: the runtime behind the HTTP API (issue 9 §5)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import webbrowser
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

import typer

from kairos.cli._console import existing_workspace
from kairos.cli._options import BaseUrlOpt, BusOpt, GraceOpt, ModelOpt, StoreOpt, TokenEnvOpt, WorkspaceOpt
from kairos.server.auth import TOKEN_ENV, WEBHOOK_SECRET_ENV


def ui_address(url: str, token: str | None) -> str:
    """The page's address; the token rides in the fragment, which the browser never sends to a server."""
    return f"{url}/#token={quote(token, safe='')}" if token else f"{url}/"


def open_ui(url: str, token: str | None) -> None:
    """Open the web UI in the user's browser (says where it is when no browser can be opened)."""
    from kairos.cli import console

    if not webbrowser.open(ui_address(url, token)):
        console.print(f"open {url}/ in a browser" + (" and paste the API token" if token else ""))


def ui(
    host: Annotated[str, typer.Option("--host", help="the server's address")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="the server's port")] = 8765,
    workspace: Annotated[
        Path,
        typer.Option("--workspace", "-w", help="workspace to serve when no server runs", callback=existing_workspace),
    ] = Path("."),
    token_env: TokenEnvOpt = TOKEN_ENV,
) -> None:
    """Open the web UI: of the kairos server on --host:--port, or of a new one (kairos serve --open) when none runs."""
    import httpx

    url = f"http://{host}:{port}"
    token = os.environ.get(token_env) or None
    try:
        running = httpx.get(f"{url}/v1/health", timeout=2).json().get("accepting") is not None
    except (httpx.HTTPError, ValueError, AttributeError):
        running = False
    if running:
        open_ui(url, token)
        return
    serve(host=host, port=port, workspace=workspace, token_env=token_env, open_browser=True)


def serve(
    host: Annotated[str, typer.Option("--host", help="address to bind; non-loopback needs a token")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="port (0: any free one)")] = 8765,
    workspace: WorkspaceOpt = Path("."),
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    token_env: TokenEnvOpt = TOKEN_ENV,
    webhook_secret_env: Annotated[
        str, typer.Option("--webhook-secret-env", help="env var holding the webhook HMAC secret")
    ] = WEBHOOK_SECRET_ENV,
    grace: GraceOpt = 10.0,
    keepalive: Annotated[
        float, typer.Option("--keepalive", min=1, help="seconds of silence before a stream sends a keep-alive comment")
    ] = 15.0,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="a name browsers and clients may use for this server besides localhost, 127.0.0.1 and ::1 "
            "(repeatable); other Host and Origin headers are refused",
        ),
    ] = None,
    open_browser: Annotated[bool, typer.Option("--open", help="open the web UI in the browser once serving")] = False,
    store_url: StoreOpt = None,
    bus_url: BusOpt = None,
    no_worker: Annotated[
        bool,
        typer.Option(
            "--no-worker",
            help="a front end only: store events and queue them for `kairos worker` processes (PostgreSQL and NATS)",
        ),
    ] = False,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=0,
            help="start N `kairos worker` processes beside this front end (implies --no-worker; stopped with it)",
        ),
    ] = 0,
) -> None:
    """Serve the agent over HTTP and the web UI at /: sessions, event streams, webhooks, an OpenAI-compatible endpoint.

    The agent runs on the event runtime with the tools of [runtime] toolsets and every source
    (async tasks, timers, file watches, the outbox, mail when [runtime.mail] is set).

    --store and --bus override [storage] in your user config (a password in a URL is never shown).
    With --no-worker it runs no turns: events go to the deployment's work queue, and `kairos worker`
    processes (any number, on any machine) run them; --workers N starts N of them here.
    Secrets come only from the environment (never the workspace's kairos.toml). SIGTERM, SIGHUP or
    Ctrl-C drains: no new requests, running turns get --grace seconds, everything accepted is kept.
    """
    from kairos.cli import _fail, _notices, _text, console, err_console
    from kairos.cli._runtime import build_runtime
    from kairos.cli.worker import spawn_workers, stop_workers
    from kairos.config import load_config
    from kairos.errors import KairosError
    from kairos.models import load_model
    from kairos.plugins.mcp import McpTools
    from kairos.plugins.memory import KnowledgeTools, MemoryPlugin
    from kairos.runtime import Outbox
    from kairos.runtime.backends import describe, open_store, open_work_queue
    from kairos.runtime.workqueue import WorkQueue
    from kairos.server import check_bind, create_app
    from kairos.server.heap import keep_heap
    from kairos.server.outbox import RuntimeOutbox
    from kairos.server.serving import serve as run_server

    token = os.environ.get(token_env) or None
    secret = os.environ.get(webhook_secret_env) or None
    queue: WorkQueue | None = None
    no_worker = no_worker or workers > 0
    try:
        check_bind(host, token)
        storage = {k: v for k, v in (("store", store_url), ("bus", bus_url)) if v is not None}
        config = load_config(workspace, {"model": model, "base_url": base_url, "storage": storage or None})
        _notices(config)
        llm = load_model(config.model, config.model_settings())
        if no_worker:
            queue = open_work_queue(config.storage, workspace)
        store = open_store(config.storage.store, workspace)
    except KairosError as e:
        if queue is not None:
            queue.close()
        raise _fail(str(e)) from e
    try:
        runtime = build_runtime(llm, workspace, config, store, dispatch=queue.announce if queue else None)
    except KairosError as e:
        store.close()
        if queue is not None:
            queue.close()
        raise _fail(str(e)) from e
    outbox = runtime.service(Outbox)
    app = create_app(
        runtime,
        token=token,
        webhook_secret=secret,
        outbox=RuntimeOutbox(outbox) if outbox else None,
        model_name="kairos",
        grace_s=grace,
        heartbeat_s=keepalive,
        allowed_hosts=allow_host or (),
        memory=next((p.memory for p in runtime.agent.plugins if isinstance(p, MemoryPlugin)), None),
        knowledge=next((p.kb for p in runtime.agent.plugins if isinstance(p, KnowledgeTools)), None),
        mcp=[s for p in runtime.agent.plugins if isinstance(p, McpTools) for s in p.sources],
        workers=queue,
        settings={
            "settings": config.model_dump(mode="json"),
            "sources": list(config.sources),
            "notices": list(config.notices),
        },  # fmt: skip
    )
    if not secret:
        err_console.print(
            f"[yellow]notice:[/] webhooks are off (set {_text(webhook_secret_env)} to enable POST /v1/events)"
        )

    keeping: list[asyncio.Task[None]] = []

    def started(url: str) -> None:
        keeping.append(keep_heap())  # full GC passes stay short while it serves (kairos.server.heap)
        auth = "bearer token required" if token else "no auth (loopback only)"
        console.print(
            f"kairos serving {_text(str(workspace))} on {url} ({auth}); web UI at {url}/, API docs at {url}/docs"
        )
        if config.storage.store_kind != "embedded" or config.storage.bus_kind != "embedded":
            console.print(_text(describe(config.storage, workspace)))
        if queue is not None:
            console.print(f"a front end: turns run in kairos worker processes (work queue {_text(queue.stream)})")
        if open_browser:
            open_ui(url, token)

    spawned: list[subprocess.Popen[bytes]] = []

    async def main() -> None:
        if workers:
            given = (("--model", model), ("--base-url", base_url), ("--store", store_url), ("--bus", bus_url))
            spawned.extend(spawn_workers(workers, workspace, [a for k, v in given if v for a in (k, v)]))
            console.print(f"started {workers} kairos worker processes (pids {', '.join(str(p.pid) for p in spawned)})")
        # the runtime starts before the server: its recovery reads the databases, and an unreadable one is a
        # one-line error here rather than a traceback in the server's log (the app then leaves it to us)
        await runtime.__aenter__()
        try:
            await run_server(app, host, port, on_started=started, log_level="warning")
        finally:
            await runtime.aclose(grace)

    try:
        asyncio.run(main())
    except (KairosError, OSError) as e:
        raise _fail(str(e)) from e
    finally:
        stop_workers(spawned, grace)
        store.close()
        if queue is not None:
            queue.close()
    console.print("kairos stopped; everything accepted is saved")
