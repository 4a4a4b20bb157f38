"""The guard in front of every route: bearer auth, a body size limit, and errors as JSON.

Every refusal has the same shape, ``{"error": {"type": ..., "message": ...}}`` (what OpenAI clients
parse too), and no request can take the server down: an exception a route did not expect becomes a
500 with that body and one log line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kairos.errors import IdempotencyConflictError, KairosError, MessageTooLongError, SessionNotFoundError
from kairos.server.auth import bearer_ok, foreign_request, subprotocol_bearer_ok

log = logging.getLogger("kairos.server")
OPEN_PATHS = frozenset({"/", "/v1/health", "/v1/events", "/docs", "/openapi.json"})
"""Paths without bearer auth: health checks, webhooks (their HMAC signature is their auth), and the API's
description with its Swagger page (a browser cannot send the token; the page's Authorize button does)."""
OPEN_PREFIXES = ("/docs-assets/", "/ui/")
"""Folders without bearer auth: the Swagger page's and the web UI's scripts and styles (no data in them)."""
_TYPES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}
_TYPES |= {421: "misdirected_request"}
_TYPES |= {409: "conflict", 413: "payload_too_large", 415: "unsupported_media_type", 422: "invalid_request"}
_TYPES |= {429: "rate_limited", 500: "internal_error", 503: "unavailable", 504: "timeout"}


class ApiError(Exception):
    """A refusal with its status and error type (raised by routes)."""

    def __init__(self, status: int, message: str, type: str | None = None, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _TYPES.get(status, "error")
        self.headers = dict(headers or {})


class _BodyTooLarge(Exception):
    pass


def error_body(status: int, message: str, type: str | None = None) -> dict[str, Any]:
    """The JSON of every error reply."""
    return {"error": {"type": type or _TYPES.get(status, "error"), "message": message}}


def error_response(
    status: int, message: str, type: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """An error reply."""
    return JSONResponse(error_body(status, message, type), status_code=status, headers=dict(headers or {}))


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    parts = []
    status = 422
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            return 400, "the body is not valid JSON"
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
    return status, "; ".join(parts[:5]) or "invalid request"


def kairos_error_reply(exc: KairosError) -> tuple[int, str, str | None]:
    """(status, message, type) of a runtime error in the API.

    An unknown session (404), a reused idempotency key (422), a message longer than the model's window
    (413), else the runtime stopping or a store unavailable (503).
    """
    if isinstance(exc, SessionNotFoundError):
        return 404, exc.api_message, None
    if isinstance(exc, IdempotencyConflictError):
        return 422, str(exc), "idempotency_conflict"
    if isinstance(exc, MessageTooLongError):
        return 413, str(exc), None
    return 503, str(exc), None


def install_handlers(app: FastAPI) -> None:
    """Map every expected exception to a JSON error reply."""

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(exc.status, exc.message, exc.type, exc.headers)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        status, message = _validation_message(exc)
        return error_response(status, message)

    async def too_large(request: Request, exc: Exception) -> JSONResponse:
        return error_response(413, str(exc))

    async def kairos_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, KairosError)
        return error_response(*kairos_error_reply(exc))

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)

    app.add_exception_handler(_BodyTooLarge, too_large)
    app.add_exception_handler(KairosError, kairos_error)


class Guard:
    """ASGI middleware: the host check, auth (when a token is set), the body limit, and a last-resort 500.

    Args:
        app: the wrapped application.
        token: the bearer token every path outside :data:`OPEN_PATHS` needs; None: no auth (loopback).
        max_body: the largest request body accepted, in bytes (413 above it).
        allowed_hosts: the names a request's ``Host`` and ``Origin`` may carry
            (:func:`kairos.server.auth.foreign_request`); None: any.
    """

    def __init__(
        self, app: ASGIApp, *, token: str | None, max_body: int, allowed_hosts: frozenset[str] | None = None
    ) -> None:
        self.app = app
        self.token = token
        self.max_body = max_body
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check, limit and guard one request."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.allowed_hosts is not None and (
            refused := foreign_request(headers.get("host"), headers.get("origin"), self.allowed_hosts)
        ):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": refused[1][:120]})
                return
            await error_response(*refused)(scope, receive, send)
            return
        if (
            self.token
            and scope.get("path") not in OPEN_PATHS
            and not str(scope.get("path", "")).startswith(OPEN_PREFIXES)
            and not bearer_ok(headers.get("authorization"), self.token)
            and not (
                scope["type"] == "websocket"
                and subprotocol_bearer_ok(headers.get("sec-websocket-protocol"), self.token)
            )
        ):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
                return
            message = "missing or wrong bearer token (Authorization: Bearer <token>)"
            await error_response(401, message, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        if scope["type"] == "websocket":
            try:
                await self.app(scope, receive, send)
            except Exception:
                log.exception("websocket %s failed", scope.get("path"))
            return
        try:
            declared = int(headers.get("content-length") or 0)
        except ValueError:
            await error_response(400, "Content-Length is not a number")(scope, receive, send)
            return
        if declared > self.max_body:
            await error_response(413, f"the body is larger than {self.max_body} bytes")(scope, receive, send)
            return
        started = False
        seen = 0
        too_large = f"the body is larger than {self.max_body} bytes"
        overflow = False

        async def counted() -> Message:
            nonlocal seen, overflow
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    overflow = True
                    raise _BodyTooLarge(too_large)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if overflow:  # whatever the route made of the cut body (FastAPI: a 400), the answer is 413
                if message["type"] == "http.response.start":
                    started = True
                    await _send_json(send, 413, error_body(413, too_large))
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except Exception as e:
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                await _send_json(send, 500, error_body(500, f"internal error: {type(e).__name__}"))


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


__all__ = [
    "OPEN_PATHS",
    "ApiError",
    "Guard",
    "error_body",
    "error_response",
    "install_handlers",
    "kairos_error_reply",
]
