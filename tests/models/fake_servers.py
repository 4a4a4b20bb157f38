"""Loopback HTTP servers that speak the OpenAI chat-completions and Anthropic Messages wire protocols.

Tests script the replies (status, headers, JSON body or an SSE event stream) and read back every
request body, so the backends are exercised through the real SDKs and real sockets, not mocks.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass
class Reply:
    """One scripted response. ``events`` makes it an SSE stream of ``(event name or None, data)``."""

    status: int = 200
    body: Any = None
    events: list[tuple[str | None, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hold_open: bool = False
    """After the events, keep the stream open until the client hangs up (cancellation tests)."""
    raw: list[bytes] | None = None
    """An event-stream body written as is, one write per item, then the connection closes
    (framing tests: CRLF, comments, lines split between writes)."""
    chunked_cut: bool = False
    """Send the events with chunked transfer encoding and hang up in the middle of a chunk after
    them: the client sees a broken HTTP body, not a clean end (a close-delimited stream cannot)."""


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


class FakeServer:
    """A threaded HTTP server on 127.0.0.1 with a random port; use as a context manager."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Recorded] = []
        self.client_hung_up = threading.Event()
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _make_handler(self))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-model-server", daemon=True
        )

    @property
    def root(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return self.root + "/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def bodies(self) -> list[Any]:
        with self._lock:
            return [r.body for r in self.requests]

    def _next(self, path: str, headers: dict[str, str], body: Any) -> Reply:
        with self._lock:
            self.requests.append(Recorded(path, headers, body))
            if self.replies:
                return self.replies.pop(0)
        return Reply(status=500, body={"error": {"message": "fake server: no reply scripted", "type": "server_error"}})

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()  # joins the handler threads
        self._thread.join(timeout=10)


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # so server_close() joins every handler: no thread outlives a test


def _make_handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection; a stream ends when we close

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            reply = server._next(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            if reply.chunked_cut:
                self.protocol_version = "HTTP/1.1"  # chunked framing exists only in HTTP/1.1
            self.send_response(reply.status)
            for key, value in reply.headers.items():
                self.send_header(key, value)
            if reply.raw is not None:
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for piece in reply.raw:
                    self.wfile.write(piece)
                    self.wfile.flush()
                return
            if reply.events is None:
                payload = json.dumps(reply.body if reply.body is not None else {}).encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            if reply.chunked_cut:
                self.send_header("Transfer-Encoding", "chunked")
                self.close_connection = True
            self.end_headers()
            for name, data in reply.events:
                text = data if isinstance(data, str) else json.dumps(data)
                frame = ((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode()
                if reply.chunked_cut:
                    frame = b"%x\r\n%s\r\n" % (len(frame), frame)
                self.wfile.write(frame)
                self.wfile.flush()
            if reply.chunked_cut:
                self.wfile.write(b"400\r\ndata: {")  # announces 1024 bytes, sends 7, hangs up
                self.wfile.flush()
                return
            if reply.hold_open:
                self.connection.settimeout(10)
                try:
                    hung_up = self.rfile.read(1) == b""  # b"" once the client closes its end
                except OSError:
                    return
                if hung_up:
                    server.client_hung_up.set()

    return Handler


# ---- OpenAI chat-completions stream builders ------------------------------------------------


def chat_chunk(
    delta: dict[str, Any] | None = None, *, finish_reason: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` with ``usage`` makes the final usage-only chunk."""
    chunk: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "fake-model",
        "choices": [],
    }
    if delta is not None or finish_reason is not None:
        chunk["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}]
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def chat_stream(
    *deltas: dict[str, Any],
    finish_reason: str = "stop",
    usage: dict[str, Any] | None = None,
    hold_open: bool = False,
    complete: bool = True,
    chunked_cut: bool = False,
) -> Reply:
    """A complete SSE reply: a role chunk, ``deltas``, the finish chunk, a usage chunk and ``[DONE]``.

    ``complete=False`` ends the stream (the server closes it) right after ``deltas``: no finish
    chunk, no ``[DONE]``, as when a connection drops. ``chunked_cut`` does so mid-chunk.
    """
    events: list[tuple[str | None, Any]] = [(None, chat_chunk({"role": "assistant", "content": ""}))]
    events += [(None, chat_chunk(d)) for d in deltas]
    if hold_open or not complete or chunked_cut:
        return Reply(events=events, hold_open=hold_open, chunked_cut=chunked_cut)
    events.append((None, chat_chunk({}, finish_reason=finish_reason)))
    if usage is not None:
        events.append((None, chat_chunk(usage=usage)))
    events.append((None, "[DONE]"))
    return Reply(events=events)


def tool_fragment(index: int, *, id: str | None = None, name: str | None = None, arguments: str = "") -> dict[str, Any]:
    """A delta carrying one tool-call fragment."""
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        call["id"] = id
        call["type"] = "function"
    if name is not None:
        call["function"]["name"] = name
    return {"tool_calls": [call]}


def openai_error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(
        status=status, body={"error": {"message": message, "type": "error", "code": None}}, headers=headers or {}
    )


# ---- Anthropic Messages stream builders -----------------------------------------------------


def anthropic_stream(
    *blocks: tuple[Any, ...],
    stop_reason: str = "end_turn",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int = 0,
    cache_creation: int = 0,
    hold_open: bool = False,
    complete: bool = True,
    chunked_cut: bool = False,
) -> Reply:
    """An SSE Messages reply. Blocks: ``("text", [pieces])``, ``("thinking", [pieces], signature)``,
    ``("tool_use", id, name, [json pieces])``.

    ``complete=False`` ends the stream right after the last block's deltas (no ``content_block_stop``,
    ``message_delta`` or ``message_stop``), as when a connection drops; ``chunked_cut`` does so mid-chunk.
    """
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": 1,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_creation,
    }
    message: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": message})]
    events.append(("ping", {"type": "ping"}))
    for index, block in enumerate(blocks):
        kind = block[0]
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": t} for t in block[1]]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": t} for t in block[1]]
            deltas.append({"type": "signature_delta", "signature": block[2]})
        else:
            start = {"type": "tool_use", "id": block[1], "name": block[2], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in block[3]]
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        if hold_open:
            return Reply(events=events, hold_open=True)
        if index == len(blocks) - 1 and (not complete or chunked_cut):
            return Reply(events=events, chunked_cut=chunked_cut)
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    if not complete or chunked_cut:  # no blocks: cut right after message_start
        return Reply(events=events, chunked_cut=chunked_cut)
    final_delta = {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }
    events.append(("message_delta", final_delta))
    events.append(("message_stop", {"type": "message_stop"}))
    return Reply(events=events)


def anthropic_error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Reply(status=status, body=body, headers=headers or {})
