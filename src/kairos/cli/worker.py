"""``kairos worker``: runs the turns of a deployment's sessions, pulled from its work queue (issue 26 §3)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from kairos.cli._options import BaseUrlOpt, BusOpt, GraceOpt, ModelOpt, StoreOpt, WorkspaceOpt


def worker(
    workspace: WorkspaceOpt = Path("."),
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    store_url: StoreOpt = None,
    bus_url: BusOpt = None,
    grace: GraceOpt = 10.0,
    ack_wait: Annotated[
        float,
        typer.Option(
            "--ack-wait",
            min=0.5,
            help="seconds before the work of a worker that stopped answering goes to another one "
            "(set by the first worker of a deployment)",
        ),
    ] = 10.0,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="sessions run at once")] = 64,
    idle_close: Annotated[
        float,
        typer.Option(
            "--idle-close",
            min=0.1,
            help="seconds without work before a session is let go (its lease holds a PostgreSQL connection)",
        ),
    ] = 30.0,
) -> None:
    """Run the turns of the deployment's sessions: pull the work queue that front ends (kairos serve --no-worker) fill.

    Needs PostgreSQL and NATS JetStream ([storage], or --store and --bus): one worker holds a
    session at a time; a worker that dies hands its sessions over after --ack-wait seconds, and
    nothing is answered twice. SIGTERM or Ctrl-C drains: running turns get --grace seconds, the
    rest goes back to the queue.
    """
    from kairos.cli import _fail, _notices, _text, console
    from kairos.cli._runtime import build_runtime
    from kairos.config import load_config
    from kairos.errors import KairosError
    from kairos.models import load_model
    from kairos.runtime.backends import describe, open_store, open_work_queue
    from kairos.runtime.worker import Workers

    try:
        storage = {k: v for k, v in (("store", store_url), ("bus", bus_url)) if v is not None}
        config = load_config(workspace, {"model": model, "base_url": base_url, "storage": storage or None})
        _notices(config)
        queue = open_work_queue(config.storage, workspace, ack_wait_s=ack_wait)
    except KairosError as e:
        raise _fail(str(e)) from e
    try:
        llm = load_model(config.model, config.model_settings())
        store = open_store(config.storage.store, workspace)
    except KairosError as e:
        queue.close()
        raise _fail(str(e)) from e
    try:
        runtime = build_runtime(llm, workspace, config, store, dispatch=queue.announce, idle_close_s=idle_close)
    except KairosError as e:
        queue.close()
        store.close()
        raise _fail(str(e)) from e

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, stop.set)
        await runtime.__aenter__()
        workers = Workers(runtime, queue, concurrency=concurrency)
        console.print(f"kairos worker {os.getpid()} running; " + _text(describe(config.storage, workspace)))
        try:
            await workers.run(stop)
        finally:
            await runtime.aclose(grace)
            await workers.close()

    try:
        asyncio.run(main())
    except (KairosError, OSError) as e:
        raise _fail(str(e)) from e
    finally:
        queue.close()
        store.close()
    console.print("kairos worker stopped; its unfinished work went back to the queue")


def spawn_workers(n: int, workspace: Path, options: list[str]) -> list[subprocess.Popen[bytes]]:
    """Start ``n`` ``kairos worker`` processes beside a front end (``kairos serve --workers N``).

    ``options`` are the front end's own ``--model``/``--base-url``/``--store``/``--bus`` flags (already
    on its command line, so nothing secret becomes visible); the rest comes from the same user config.
    Where util-linux's ``setpriv`` is installed, a worker gets SIGTERM when the front end dies.
    """
    argv = [sys.executable, "-m", "kairos", "worker", "-w", str(workspace), *options]
    setpriv = shutil.which("setpriv")
    if setpriv:
        argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
    return [subprocess.Popen(argv, stdin=subprocess.DEVNULL) for _ in range(n)]


def stop_workers(procs: list[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM every worker (they drain: running turns get ``grace_s``), then wait; kill what is left."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(grace_s + 10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
