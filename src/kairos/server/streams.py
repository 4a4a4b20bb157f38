"""A session's bus records to clients: SSE and WebSocket, both resumable from a cursor.

A record is ``{"cursor", "session", "type", "data", "at"}``; what ``data`` holds for each ``type`` is
the OpenAPI document's ``StreamRecord`` schema (from :mod:`kairos.runtime.outbound`).

Each record carries the bus cursor (SSE ``id:``; ``cursor`` in the WebSocket frame). A client that
reconnects with the last cursor it saw (SSE ``Last-Event-ID`` or ``?after=``; WebSocket ``?after=``
or a first ``{"resume": cursor}`` frame) gets everything after it, first from storage, then live:
it misses nothing and sees nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi import APIRouter, Header, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse

from kairos.errors import KairosError, SessionNotFoundError
from kairos.runtime import BusEvent, Runtime, SubscriberTooSlow
from kairos.runtime.events import STRATEGIES
from kairos.runtime.outbound import stream_record
from kairos.server.middleware import ApiError, error_body, kairos_error_reply
from kairos.server.state import ServerState, state_of, submit_user

router = APIRouter()
RETRY_MS = 3000
"""What SSE clients are told to wait before reconnecting."""
_END = object()


async def _next(it: AsyncIterator[BusEvent]) -> object:
    try:
        return await anext(it)
    except StopAsyncIteration:
        return _END


async def follow(
    runtime: Runtime, session: str, after: int | None, stops: list[asyncio.Event], heartbeat_s: float
) -> AsyncGenerator[BusEvent | None, None]:
    """The session's records after ``after``; None every ``heartbeat_s`` of silence; ends when a stop is set.

    Raises:
        SubscriberTooSlow: the client fell too far behind (it reconnects from its last cursor).
    """
    sub = runtime.bus.subscribe(session, after=after)
    it = aiter(sub)
    waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(e.wait()) for e in stops]
    nxt: asyncio.Future[Any] | None = None
    try:
        while True:
            if nxt is None:
                nxt = asyncio.ensure_future(_next(it))
            pending: set[asyncio.Future[Any]] = {nxt, *waits}
            done, _ = await asyncio.wait(pending, timeout=heartbeat_s, return_when=asyncio.FIRST_COMPLETED)
            if nxt in done:
                item, nxt = nxt.result(), None
                if item is _END:
                    return
                assert isinstance(item, BusEvent)
                yield item
            elif done:
                return
            else:
                yield None
    finally:
        for task in (nxt, *waits):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        with contextlib.suppress(Exception):
            await sub.aclose()  # type: ignore[attr-defined]


def parse_after(value: str | None, name: str) -> int | None:
    """A resume cursor: an integer ≥ 0, ``latest`` (None: only new records), or absent (0: everything)."""
    if value is None or value == "":
        return 0
    if value == "latest":
        return None
    try:
        cursor = int(value)
    except ValueError:
        raise ApiError(400, f"{name} must be a cursor (an integer) or 'latest'") from None
    if cursor < 0:
        raise ApiError(400, f"{name} must not be negative")
    return cursor


def _known(state: ServerState, session: str) -> None:
    if not state.runtime.has_session(session):
        raise SessionNotFoundError(session)


_SSE_DOC: dict[str, Any] = {
    "responses": {
        "200": {
            "description": "An event stream; each event's data is a StreamRecord (JSON), its id the cursor.",
            "content": {
                "text/event-stream": {
                    "itemSchema": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "description": "the record's cursor"},
                            "data": {
                                "type": "string",
                                "contentMediaType": "application/json",
                                "contentSchema": {"$ref": "#/components/schemas/StreamRecord"},
                            },
                            "event": {"type": "string", "description": "error: the last frame, why the stream ends"},
                            "retry": {"type": "integer"},
                        },
                    }
                }
            },
        }
    }
}
"""The stream's 200 in the OpenAPI document (``response_model`` puts ``StreamRecord`` in its components)."""


@router.get(
    "/v1/sessions/{session_id}/events",
    tags=["streams"],
    response_model=stream_record(),
    response_class=StreamingResponse,
    openapi_extra=_SSE_DOC,
)
async def session_events(
    request: Request,
    session_id: str,
    after: str | None = Query(None, description="resume after this cursor; 'latest' for new records only"),
    last_event_id: str | None = Header(None, alias="Last-Event-ID"),
) -> StreamingResponse:
    """Server-sent events: every bus record of the session (``id:`` is its cursor), heartbeats as comments.

    Each event's data is a ``StreamRecord``: its ``type`` says what its ``data`` holds. Without a cursor
    the stream starts at the session's first record. ``Last-Event-ID`` (set by reconnecting
    EventSource clients) wins over ``?after=``.
    """
    state = state_of(request)
    _known(state, session_id)
    start = parse_after(last_event_id, "Last-Event-ID") if last_event_id else parse_after(after, "after")

    async def frames() -> AsyncIterator[str]:
        yield f"retry: {RETRY_MS}\n\n"
        try:
            async for item in follow(state.runtime, session_id, start, [state.stopping], state.heartbeat_s):
                if item is None:
                    yield ": keep-alive\n\n"
                else:
                    yield f"id: {item.cursor}\ndata: {json.dumps(item.to_record(), ensure_ascii=False)}\n\n"
        except SubscriberTooSlow as e:
            yield f"event: error\ndata: {json.dumps(error_body(503, str(e), 'too_slow'))}\n\n"
            return
        if state.stopping.is_set():
            yield f"event: error\ndata: {json.dumps(error_body(503, 'the server is stopping; reconnect later'))}\n\n"

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(frames(), media_type="text/event-stream", headers=headers)


@router.websocket("/v1/sessions/{session_id}/ws")
async def session_socket(websocket: WebSocket, session_id: str, after: str | None = None) -> None:
    """The session's records as JSON frames (each a ``StreamRecord``), and the client's messages in.

    Client frames: ``{"resume": cursor|null}`` (first frame, when ``?after=`` is absent; null: new
    records only), ``{"text": ..., "strategy"?, "id"?, "ref"?}`` (a message; answered with a
    ``receipt`` frame), ``{"interrupt": true, "reason"?}``. Without ``?after=`` the stream starts
    when the first frame arrives (any other first frame starts it at the newest record).
    """
    state = state_of(websocket)
    await websocket.accept()
    lock = asyncio.Lock()

    async def send(obj: dict[str, Any]) -> None:
        async with lock:
            await websocket.send_text(json.dumps(obj, ensure_ascii=False))

    async def fail(status: int, message: str, type: str | None = None) -> None:
        await send({"type": "error", **error_body(status, message, type)})

    if not state.runtime.has_session(session_id):
        await fail(404, f"no session {session_id!r}")
        await websocket.close(code=4404)
        return
    first: Any = None
    try:
        if after is not None:
            start = parse_after(after, "after")
        else:
            first = await _receive(websocket)
            if isinstance(first, dict) and "resume" in first:
                value = first["resume"]
                start = None if value is None else parse_after(str(value), "resume")
                first = None
            else:
                start = None
    except ApiError as e:
        await fail(e.status, e.message)
        await websocket.close(code=1008)
        return
    except WebSocketDisconnect:
        return
    closed = asyncio.Event()

    async def read() -> None:
        try:
            if first is not None:
                await _handle(state, session_id, first, send)
            while True:
                await _handle(state, session_id, await _receive(websocket), send)
        except WebSocketDisconnect:
            pass
        finally:
            closed.set()

    reader = asyncio.create_task(read())
    code = 1000
    try:
        async for item in follow(state.runtime, session_id, start, [closed, state.stopping], state.heartbeat_s):
            if item is None:
                await send({"type": "heartbeat"})
            else:
                await send(item.to_record())
        if state.stopping.is_set():
            await fail(503, "the server is stopping; reconnect later with your last cursor")
            code = 1012
    except SubscriberTooSlow as e:
        await fail(503, str(e), "too_slow")
        code = 1013
    except (WebSocketDisconnect, RuntimeError):
        pass  # the client left while a frame was sent
    finally:
        reader.cancel()
        with contextlib.suppress(BaseException):
            await reader
    with contextlib.suppress(Exception):
        await websocket.close(code=code)


_INVALID = object()


async def _receive(websocket: WebSocket) -> Any:
    """One client frame as JSON (``_INVALID`` when it is not JSON)."""
    text = await websocket.receive_text()
    try:
        return json.loads(text)
    except ValueError:
        return _INVALID


async def _handle(state: ServerState, session_id: str, frame: Any, send: Any) -> None:
    """Act on one client frame; every problem is answered with an error frame, never raised."""
    if frame is _INVALID or not isinstance(frame, dict):
        await send({"type": "error", **error_body(400, "a frame must be a JSON object")})
        return
    ref = frame.get("ref")
    if frame.get("interrupt") is True:
        reason = frame.get("reason")
        stopped = state.runtime.interrupt(
            session_id, reason if isinstance(reason, str) else "interrupted over websocket"
        )
        await send({"type": "interrupted", "interrupted": stopped, "ref": ref})
        return
    text, strategy, key = frame.get("text"), frame.get("strategy"), frame.get("id")
    problem = ""
    if not isinstance(text, str) or not text.strip():
        problem = "'text' must be a non-empty string (or send {\"interrupt\": true})"
    elif strategy is not None and strategy not in STRATEGIES:
        problem = f"'strategy' must be one of {', '.join(STRATEGIES)}"
    elif key is not None and not isinstance(key, str):
        problem = "'id' must be a string"
    if problem:
        await send({"type": "error", **error_body(400, problem), "ref": ref})
        return
    assert isinstance(text, str)
    try:
        receipt = await submit_user(state, session_id, text, strategy, key, channel="websocket")
    except KairosError as e:
        await send({"type": "error", **error_body(*kairos_error_reply(e)), "ref": ref})
        return
    await send({"type": "receipt", "receipt": receipt.to_record(), "ref": ref})


__all__ = ["follow", "parse_after", "router"]
