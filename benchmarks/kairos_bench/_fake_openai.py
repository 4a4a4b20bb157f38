"""A deterministic OpenAI-compatible chat-completions server on loopback, for the crash and load benches.

It speaks what ``kairos.models.openai_compat`` sends and reads: ``POST …/chat/completions`` with
``stream: true`` answered by a ``text/event-stream`` of ``chat.completion.chunk`` objects (role
chunk, content or tool-call deltas, finish chunk, usage chunk, ``[DONE]``), over HTTP/1.1 with
keep-alive. It runs on its own event loop in a thread, so the bench's own loop (the webhook poster)
does not slow it down, and it answers at once: the benches measure the runtime, not a model.

The answer depends only on the request. Events carry a marker ``EVT-<id>`` (and in the load bench
``@<unix send time>``); the server looks at the messages after the last assistant message:

- ``effect`` mode (crash bench): new markers → one ``bash`` call per marker appending the id to
  ``effects.log`` (the side effect to count); nothing new (tool results only) → a final answer.
- ``answer`` mode (load bench): always a final answer.

Either way it records, per marker, when it saw the marker first (the dispatch latency is that
moment minus the send time carried in the marker).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

EVENT_RE = re.compile(r"EVT-([A-Za-z0-9_-]+)(?:@([0-9]+\.[0-9]+))?")
"""An event marker: ``EVT-<id>`` or ``EVT-<id>@<send time>``."""
EFFECTS_FILE = "effects.log"
EFFECT_RE = re.compile(r"echo ([A-Za-z0-9_-]+) >> " + re.escape(EFFECTS_FILE))
"""The event id in an :func:`effect_command`."""
STATUS_TAG = "<agent_status>"
MAX_BODY = 64 << 20
Mode = Literal["effect", "answer"]


def effect_command(event_id: str, pause_s: float) -> str:
    """The side-effecting shell command for one event: pause, append the id, pause (so kills land mid-tool)."""
    return f"sleep {pause_s}; echo {event_id} >> {EFFECTS_FILE}; sleep {pause_s}"


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "bench",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def sse_reply(text: str = "", calls: list[tuple[str, str, str]] | None = None) -> bytes:
    """A whole streamed reply: a text answer, or ``(id, name, arguments JSON)`` tool calls."""
    parts = [_chunk({"role": "assistant", "content": ""})]
    if calls:
        for i, (cid, name, args) in enumerate(calls):
            call = {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            parts.append(_chunk({"tool_calls": [call]}))
        parts.append(_chunk({}, "tool_calls"))
    else:
        parts.append(_chunk({"content": text}))
        parts.append(_chunk({}, "stop"))
    parts.append(_chunk(None, usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


@dataclass
class DeterministicModel:
    """The server; ``start()`` returns its ``/v1`` base URL, ``stop()`` ends it.

    Args:
        mode: ``effect`` (a ``bash`` call per new event) or ``answer`` (always a text answer).
        pause_s: the pauses around the effect in ``effect`` mode.
        latency_s: how long each chat-completions reply waits before it is sent (a model's fixed latency).
    """

    mode: Mode = "answer"
    pause_s: float = 0.05
    latency_s: float = 0.0
    base_url: str = ""
    requests: int = 0
    bad_requests: int = 0
    first_seen: dict[str, float] = field(default_factory=dict)
    """Marker id → wall-clock time the model first saw it."""
    sent_at: dict[str, float] = field(default_factory=dict)
    """Marker id → send time carried in the marker (load bench)."""
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.Server | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    def start(self) -> str:
        """Serve on a free loopback port in a thread; the OpenAI base URL."""
        ready = threading.Event()
        port: list[int] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=1024))
            port.append(self._server.sockets[0].getsockname()[1])
            ready.set()
            try:
                loop.run_until_complete(self._server.serve_forever())
            except asyncio.CancelledError:
                pass
            finally:
                handlers = asyncio.all_tasks(loop)
                if handlers:  # their connections were closed: they end on their own
                    loop.run_until_complete(asyncio.wait(handlers, timeout=5))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=main, name="bench-model", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the bench model server did not start")
        self.base_url = f"http://127.0.0.1:{port[0]}/v1"
        return self.base_url

    def stop(self) -> None:
        """Stop serving and join the thread."""
        loop, server = self._loop, self._server
        if loop is not None and server is not None and not loop.is_closed():

            def close() -> None:
                server.close()
                for writer in list(self._writers):
                    writer.close()

            loop.call_soon_threadsafe(close)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> DeterministicModel:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def latencies_ms(self) -> dict[str, float]:
        """Marker id → first seen minus sent, in ms (markers that carried a send time)."""
        with self._lock:
            return {k: (self.first_seen[k] - t) * 1000 for k, t in self.sent_at.items() if k in self.first_seen}

    def seen(self) -> set[str]:
        """Every marker id the model has been shown."""
        with self._lock:
            return set(self.first_seen)

    # -- the protocol ---------------------------------------------------------------------

    def answer(self, body: Any) -> bytes:
        """The SSE body for one chat-completions request (see the module docstring)."""
        now = time.time()
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list):
            raise ValueError("'messages' must be a list")
        last = max(
            (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"), default=-1
        )
        new: list[str] = []
        with self._lock:
            self.requests += 1
            for m in messages[last + 1 :]:
                text = _text(m) if isinstance(m, dict) and m.get("role") == "user" else ""
                if STATUS_TAG in text:  # the status bar quotes the task: not a new event
                    continue
                for eid, sent in EVENT_RE.findall(text):
                    if eid not in self.first_seen:
                        self.first_seen[eid] = now
                        if sent:
                            self.sent_at[eid] = float(sent)
                    if eid not in new:
                        new.append(eid)
        if self.mode == "effect" and new:
            calls = [
                (f"call_{uuid.uuid4().hex[:12]}", "bash", json.dumps({"command": effect_command(e, self.pause_s)}))
                for e in new
            ]
            return sse_reply(calls=calls)
        return sse_reply(f"handled {len(new)} event(s)")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                length = int(headers.get("content-length") or 0)
                if length > MAX_BODY:
                    break
                raw = await reader.readexactly(length) if length else b""
                status, ctype, payload = self._route(method, path, raw)
                if self.latency_s and method == "POST":
                    await asyncio.sleep(self.latency_s)
                keep = headers.get("connection", "").lower() != "close"
                writer.write(
                    f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(payload)}\r\n"
                    f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n".encode()
                    + payload
                )
                await writer.drain()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def _route(self, method: str, path: str, raw: bytes) -> tuple[str, str, bytes]:
        if method == "POST" and path.rstrip("/").endswith("/chat/completions"):
            try:
                return "200 OK", "text/event-stream", self.answer(json.loads(raw))
            except ValueError as e:
                with self._lock:
                    self.bad_requests += 1
                error = {"error": {"message": f"bench model: {e}", "type": "invalid_request_error"}}
                return "400 Bad Request", "application/json", json.dumps(error).encode()
        if method == "GET" and path.rstrip("/").endswith("/models"):
            return "200 OK", "application/json", b'{"object":"list","data":[{"id":"bench","object":"model"}]}'
        return "404 Not Found", "application/json", b'{"error":{"message":"not found","type":"not_found"}}'


__all__ = ["EFFECTS_FILE", "EFFECT_RE", "EVENT_RE", "DeterministicModel", "effect_command", "sse_reply"]
