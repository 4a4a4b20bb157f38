"""Run the API under uvicorn; SIGTERM, SIGHUP or SIGINT stops accepting, ends the streams, drains the runtime.

The order on a stop signal: the listening socket closes (no new connections), every SSE and
WebSocket stream ends (so its connection can close), requests in flight finish, then the app's
lifespan drains the runtime (``runtime.aclose(grace_s)``: running turns get ``grace_s`` to finish,
everything pending stays in the database). The process then exits normally (code 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Generator

import uvicorn
from fastapi import FastAPI

from kairos.server.state import ServerState

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""SIGHUP too: a server started from a terminal that closes drains like a stopped service."""


class KairosServer(uvicorn.Server):
    """uvicorn's server with the drain above; a second SIGINT forces the exit.

    Args:
        config: uvicorn's config (its app is a :func:`~kairos.server.create_app` app).
        signals: install the stop-signal handlers (off when embedded, e.g. in tests).
    """

    def __init__(self, config: uvicorn.Config, *, signals: bool = True) -> None:
        super().__init__(config)
        self.signals = signals

    @property
    def kairos(self) -> ServerState:
        """The app's shared state."""
        app = self.config.app
        assert isinstance(app, FastAPI)
        state = app.state.kairos
        assert isinstance(state, ServerState)
        return state

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """Handle the stop signals on the loop (and, unlike uvicorn, do not re-raise them afterwards)."""
        if not self.signals or threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self.stop, sig)
        try:
            yield
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)

    def stop(self, sig: int | None = None) -> None:
        """Begin the drain (call on the event loop's thread)."""
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True
        self.kairos.begin_shutdown()

    def url(self) -> str:
        """``http://host:port`` of the bound socket (after start; the real port when 0 was asked)."""
        sock = self.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        return f"http://{host}:{port}"


def make_server(
    app: FastAPI, host: str, port: int, *, signals: bool = True, log_level: str = "warning"
) -> KairosServer:
    """A :class:`KairosServer` for ``app`` (its graceful timeout follows the app's ``grace_s``)."""
    state = app.state.kairos
    assert isinstance(state, ServerState)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http="h11",  # its header-size limit refuses oversized headers (httptools has none)
        ws="websockets-sansio",
        lifespan="on",
        timeout_graceful_shutdown=int(state.grace_s) + 5,
        ws_max_size=state.max_body,  # as for HTTP bodies (uvicorn's own default is 16 MiB)
        server_header=False,
    )
    return KairosServer(config, signals=signals)


async def serve(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    signals: bool = True,
    on_started: Callable[[str], None] | None = None,
    log_level: str = "warning",
) -> None:
    """Serve ``app`` until a stop signal (or ``stop()``), then drain; ``on_started`` gets the URL."""
    server = make_server(app, host, port, signals=signals, log_level=log_level)
    task = asyncio.create_task(server.serve())
    if on_started is not None:
        while not server.started and not task.done():  # noqa: ASYNC110  (uvicorn offers no started event)
            await asyncio.sleep(0.02)
        if server.started:
            on_started(server.url())
    await task
    if not server.started:
        raise OSError(f"could not serve on {host}:{port} (see the log above)")


__all__ = ["KairosServer", "make_server", "serve"]
