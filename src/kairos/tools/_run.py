"""Where blocking tool code runs, so that a timeout or a cancel really stops it.

- :func:`run_in_thread`: kairos's own daemon worker threads (never the loop's default executor,
  whose threads the interpreter waits for at exit: a hung tool would hang kairos). On cancel the
  thread gets an asynchronous ``ToolStopped`` exception, raised at its next Python instruction,
  and is retired.
- :func:`run_in_process`: a fresh child process per call, killed on cancel: for CPU-bound or
  blocking work (a C extension that never returns) that must stop for sure.
"""

from __future__ import annotations

import _thread
import asyncio
import contextvars
import ctypes
import multiprocessing
import queue
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any


class ToolStopped(BaseException):
    """Raised inside a tool's worker thread when its call was cancelled or timed out."""


class _Job:
    """One call on a worker thread. ``running`` and ``retired`` change only under ``lock``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        self.loop = loop
        self.fn = fn
        self.kwargs = kwargs
        self.context = contextvars.copy_context()
        self.future: asyncio.Future[Any] = loop.create_future()
        self.lock = threading.Lock()
        self.thread_id: int | None = None
        self.running = False
        self.retired = False
        """Cancelled: its thread is asked to stop, and never takes another job."""

    def execute(self) -> None:
        with self.lock:
            if self.retired:
                return
            self.thread_id, self.running = threading.get_ident(), True
        ok, value = False, None
        try:
            value, ok = self.context.run(self.fn, **self.kwargs), True
        except ToolStopped:
            return
        except BaseException as e:  # handed to the awaiting task, which decides
            value = e
        finally:
            with self.lock:
                self.running = False
        _post(self.loop, self.settle, ok, value)

    def settle(self, ok: bool, value: Any) -> None:
        if self.future.done():
            return
        if ok:
            self.future.set_result(value)
        else:
            self.future.set_exception(value)

    def stop(self) -> None:
        """Retire the job; if it runs, raise ``ToolStopped`` in its thread at the next bytecode."""
        with self.lock:
            self.retired = True
            if self.running and self.thread_id is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self.thread_id), ctypes.py_object(ToolStopped)
                )


class _Workers:
    """Daemon worker threads, reused across calls.

    Starting a thread per call costs milliseconds on a busy machine. A thread whose job was stopped
    is retired: it exits instead of taking another job, so a late stop can never hit the wrong call.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, job: _Job) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1  # reserved for this job: a waiting job always has a free thread
        self._jobs.put(job)
        if spawn:
            _thread.start_new_thread(self._work, ())  # no wait for the start (threading.Thread waits)

    def _work(self) -> None:
        try:
            while True:
                job = self._jobs.get()
                job.execute()
                if job.retired:
                    return
                with self._lock:
                    self._idle += 1
        except ToolStopped:  # a stop that landed just after its job ended: this thread is retired
            return


_WORKERS = _Workers()


async def run_in_thread(fn: Callable[..., Any], kwargs: dict[str, Any], *, name: str = "tool") -> Any:
    """``fn(**kwargs)`` on a daemon worker thread; cancelling the await stops it as far as Python can."""
    job = _Job(asyncio.get_running_loop(), fn, kwargs)
    _WORKERS.submit(job)
    try:
        return await job.future
    except asyncio.CancelledError:
        job.stop()
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
