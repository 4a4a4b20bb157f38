"""Where blocking tool code runs, so that a timeout or a cancel really stops it.

- :func:`run_in_thread`: a daemon thread per call (never the loop's default executor, whose
  threads the interpreter waits for at exit: a hung tool would hang kairos). On cancel the
  thread gets an asynchronous ``ToolStopped`` exception, raised at its next Python instruction.
- :func:`run_in_process`: a fresh child process per call, killed on cancel: for CPU-bound or
  blocking work (a C extension that never returns) that must stop for sure.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import multiprocessing
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any


class ToolStopped(BaseException):
    """Raised inside a tool's worker thread when its call was cancelled or timed out."""


def _stop_thread(thread: threading.Thread) -> None:
    """Ask ``thread`` to raise ``ToolStopped`` at its next bytecode (no effect once it is done)."""
    ident = thread.ident
    if ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(ToolStopped))


async def run_in_thread(fn: Callable[..., Any], kwargs: dict[str, Any], *, name: str = "tool") -> Any:
    """``fn(**kwargs)`` in a daemon thread; cancelling the await stops the thread as far as Python can."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def work() -> None:
        try:
            value = context.run(fn, **kwargs)
        except ToolStopped:
            return
        except BaseException as e:  # handed to the awaiting task, which decides
            _post(loop, settle, False, e)
        else:
            _post(loop, settle, True, value)

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    try:
        return await future
    except asyncio.CancelledError:
        _stop_thread(thread)
        raise


def _post(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop is closed: nobody waits for this result any more
        pass


def _child(conn: Connection, fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    try:
        value = fn(**kwargs)
    except BaseException as e:
        try:
            conn.send((False, e))
        except Exception:  # the exception does not pickle: send its text
            conn.send((False, RuntimeError(f"{type(e).__name__}: {e}")))
    else:
        conn.send((True, value))
    conn.close()


async def run_in_process(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """``fn(**kwargs)`` in a fresh child process (spawned: no copy of the loop's threads or sockets).

    Cancelling the await kills the child. ``fn`` must be importable by name and ``kwargs`` picklable.

    Raises:
        RuntimeError: the child died without answering (killed, out of memory).
    """
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, kwargs), daemon=True)
    proc.start()
    child.close()
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    fd = parent.fileno()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await ready
        try:
            ok, value = parent.recv()
        except EOFError:
            await asyncio.to_thread(proc.join, 5)
            raise RuntimeError(f"the tool's process ended without a result (exit code {proc.exitcode})") from None
    finally:
        loop.remove_reader(fd)
        parent.close()
        if proc.is_alive():
            proc.kill()
        await asyncio.to_thread(proc.join, 5)
        if not proc.is_alive():
            proc.close()
    if not ok:
        raise value
    return value
