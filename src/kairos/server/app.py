"""The HTTP API of ``kairos serve`` (issue 9 §5): sessions, messages, streams, webhooks, questions, outbox.

:func:`create_app` wraps a :class:`~kairos.runtime.Runtime`. The app starts the runtime in its
lifespan and drains it on shutdown (``runtime.aclose(grace_s)``), unless it was given one already
running (tests drive such an app through ``httpx.ASGITransport``). Routes are versioned under
``/v1``; every error is ``{"error": {"type", "message"}}`` with a 4xx or 5xx status.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, FastAPI, Header, Query, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, Field

from kairos.context.store import SessionInfo
from kairos.errors import SessionNotFoundError
from kairos.runtime import Event, Runtime
from kairos.runtime.events import URGENT_TYPES, Strategy
from kairos.server import auth
from kairos.server.auth import LOOPBACK_NAMES, host_name
from kairos.server.middleware import ApiError, Guard, install_handlers
from kairos.server.outbox import OutboxAPI, settle
from kairos.server.state import ServerState, Workers, state_of, submit_user
from kairos.server.webui import mount_ui

if TYPE_CHECKING:
    from kairos.knowledge.base import KnowledgeBase
    from kairos.mcp.client import McpServerSource
    from kairos.memory import UserMemory

log = logging.getLogger("kairos.server")
DOCS_ASSETS = "/docs-assets"
MAX_BODY = 1 << 20
"""Default largest request body (1 MiB)."""
router = APIRouter()

INTERNAL_NAMESPACES = frozenset({"user", "timer", "async", "agent", "session", "supervisor", "event", "heartbeat"})
"""Event types kairos itself makes (a timer firing, a task's result …): the model reads them as kairos's own
blocks, so a webhook naming one would not read as external content."""
RESERVED_SOURCES = frozenset({"user", "kairos", "system", "harness", "timer", "task", "agent"})
"""Source types a webhook cannot claim: the model's wrapper says who sent the content."""


class NewSession(BaseModel):
    """``POST /v1/sessions``."""

    title: str = Field("", max_length=500)


class NewMessage(BaseModel):
    """``POST /v1/sessions/{id}/messages``."""

    text: str = Field(min_length=1, description="the user's message")
    strategy: Strategy | None = Field(None, description="force a strategy instead of the router's choice")


class InterruptBody(BaseModel):
    """``POST /v1/sessions/{id}/interrupt``."""

    reason: str = Field("", max_length=500)


class Answer(BaseModel):
    """``POST /v1/questions/{id}/answer``."""

    text: str = Field(min_length=1)


class ReadBody(BaseModel):
    """``POST /v1/outbox/read``."""

    ids: list[str] = Field(min_length=1, max_length=10_000)


def _session_records(state: ServerState, infos: Sequence[SessionInfo]) -> list[dict[str, Any]]:
    """Sessions as the API shows them; ``active``/``busy`` across the deployment's workers."""
    active, busy = state.runtime.session_states()
    return [
        {"id": i.id, "title": i.title, "created_at": i.created_at, "messages": i.messages,
         "active": i.id in active, "busy": i.id in busy}
        for i in infos
    ]  # fmt: skip


@router.get("/v1/health", tags=["server"])
async def health(request: Request) -> dict[str, Any]:
    """Liveness and whether the runtime accepts events (no auth)."""
    rt = state_of(request).runtime
    return {"ok": rt.accepting, "accepting": rt.accepting, "active_sessions": len(rt.active_sessions())}


@router.post("/v1/sessions", status_code=201, tags=["sessions"])
async def create_session(request: Request, body: Annotated[NewSession | None, Body()] = None) -> dict[str, Any]:
    """Create a session; its first message starts its worker."""
    state = state_of(request)
    title = body.title if body else ""
    sid = state.runtime.create_session(title, {"created_by": "http"})
    return {"id": sid, "title": title}


@router.get("/v1/sessions", tags=["sessions"])
async def list_sessions(request: Request, limit: int = Query(50, ge=1, le=1000)) -> dict[str, Any]:
    """Sessions, newest first."""
    state = state_of(request)
    return {"sessions": _session_records(state, state.runtime.sessions(limit))}


@router.get("/v1/sessions/{session_id}", tags=["sessions"])
async def get_session(request: Request, session_id: str) -> dict[str, Any]:
    """One session: title, message count, whether it works now, how many events wait."""
    state = state_of(request)
    [record] = _session_records(state, [state.runtime.session_info(session_id)])
    record["pending"] = state.runtime.pending(session_id)
    return record


@router.patch("/v1/sessions/{session_id}", tags=["sessions"])
async def rename_session(request: Request, session_id: str, body: NewSession) -> dict[str, Any]:
    """Rename a session (its title in lists and the web UI)."""
    state = state_of(request)
    state.runtime.rename_session(session_id, body.title)
    return _session_records(state, [state.runtime.session_info(session_id)])[0]


@router.get("/v1/sessions/{session_id}/messages", tags=["sessions"])
async def session_messages(
    request: Request, session_id: str, offset: int = Query(0, ge=0), limit: int = Query(200, ge=1, le=5000)
) -> dict[str, Any]:
    """The session's messages in order, as stored (role, content, tool calls, origin)."""
    runtime = state_of(request).runtime
    messages = runtime.history(session_id, offset, limit)
    return {"offset": offset, "messages": [m.to_record() for m in messages]}


@router.get("/v1/sessions/{session_id}/timeline", tags=["sessions"])
async def session_timeline(
    request: Request, session_id: str, after: int = Query(0, ge=0), limit: int = Query(500, ge=1, le=5000)
) -> dict[str, Any]:
    """The session's records as its stream sent them, oldest first after the cursor ``after`` (paged).

    Events accepted or dropped and why, runs, tool calls, requests: the event timeline.
    """
    records = state_of(request).runtime.timeline(session_id, after, limit)
    return {"records": [r.to_record() for r in records]}


@router.post("/v1/sessions/{session_id}/messages", status_code=202, tags=["sessions"])
async def send_message(
    request: Request,
    session_id: str,
    body: NewMessage,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> dict[str, Any]:
    """Queue the user's message (durable when this returns); a repeated ``Idempotency-Key`` is queued once."""
    state = state_of(request)
    receipt = await submit_user(state, session_id, body.text, body.strategy, idempotency_key)
    if not receipt.duplicate and not state.runtime.session_info(session_id).title:
        state.runtime.rename_session(session_id, _title_from(body.text))  # an untitled session reads as its start
    return receipt.to_record()


def _title_from(text: str, limit: int = 60) -> str:
    """The first line of a message, cut at a word near ``limit`` characters."""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else line[:limit]) + "…"


@router.post("/v1/sessions/{session_id}/interrupt", tags=["sessions"])
async def interrupt(
    request: Request, session_id: str, body: Annotated[InterruptBody | None, Body()] = None
) -> dict[str, Any]:
    """Stop the running turn now (a stop button); ``interrupted`` is false when nothing ran.

    On a front end of several workers the turn runs in one of them: the request reaches it there.
    """
    state = state_of(request)
    if not state.runtime.has_session(session_id):
        raise SessionNotFoundError(session_id)
    reason = (body.reason if body else "") or "interrupted over http"
    stopped = state.runtime.interrupt(session_id, reason)
    if not stopped and state.workers is not None:
        reply = await state.workers.ask(session_id, "interrupt", reason=reason)
        stopped = bool(reply and reply.get("interrupted"))
    return {"interrupted": stopped}


@router.post("/v1/events", tags=["events"])
async def post_event(request: Request) -> JSONResponse:
    """A webhook: a signed external event (see :mod:`kairos.server.auth` for the signature).

    Body: ``{type, content, source?, context?, session?, id?, urgent?, strategy?}``. The content
    is external data, never the user's words: ``user.*`` types, kairos's own types (``timer.*``,
    ``async.*`` …) and sources claiming to be the user or kairos are refused. 202 with the receipt,
    ``duplicate: true`` for an ``id`` seen before (without an ``id``: the same signature,
    i.e. a replay of the same request).
    """
    state = state_of(request)
    if not state.webhook_secret:
        raise ApiError(503, f"webhooks are off: set {auth.WEBHOOK_SECRET_ENV} to a shared secret and restart")
    raw = await request.body()
    problem = auth.verify(
        state.webhook_secret,
        raw,
        request.headers.get(auth.SIGNATURE_HEADER),
        request.headers.get(auth.TIMESTAMP_HEADER),
    )
    if problem:
        raise ApiError(401, f"webhook refused: {problem}")
    try:
        data = json.loads(raw)
    except ValueError:
        raise ApiError(400, "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    urgent = data.pop("urgent", False)
    if not isinstance(urgent, bool):
        raise ApiError(400, "'urgent' must be true or false")
    try:
        event = Event.from_record({**data, "channel": "webhook"})
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    if event.type.startswith("user.") or event.from_user:
        raise ApiError(400, f"a webhook cannot send {event.type!r}: webhook content is external data, not the user")
    if event.type.split(".")[0] in INTERNAL_NAMESPACES or event.type in URGENT_TYPES:
        raise ApiError(400, f"a webhook cannot send {event.type!r}: that type is kairos's own; name your own, such "
                       "as 'ci.build_failed' (and set urgent: true for an urgent one)")  # fmt: skip
    source = dict(event.source) or {"type": "webhook"}
    if source.get("type", "").strip().lower() in RESERVED_SOURCES:
        raise ApiError(400, f"a webhook's source cannot be {source['type']!r}: that is kairos or the user; name the "
                       "system that sent it, such as 'github'")  # fmt: skip
    # without an id, a captured request replayed within the signature's window is the same signature: one event
    dedupe = event.id or "sig:" + hashlib.sha256(request.headers.get(auth.SIGNATURE_HEADER, "").encode()).hexdigest()
    event = Event(
        event.type,
        event.content,
        source,
        "webhook",
        event.context,
        event.session,
        dedupe,
        "interrupt" if urgent else event.strategy,
    )
    receipt = await state.runtime.submit(event)
    return JSONResponse(receipt.to_record(), status_code=202)  # a duplicate too, as for messages: the first answer


def _outbox(request: Request) -> OutboxAPI:
    outbox = state_of(request).outbox
    if outbox is None:
        raise ApiError(503, "no outbox runs in this server")
    return outbox


@router.get("/v1/questions", tags=["outbox"])
async def questions(request: Request, all: bool = False) -> dict[str, Any]:
    """Questions waiting for the user (``ask_user``, approvals); ``?all=1`` includes answered ones."""
    return {"questions": await settle(_outbox(request).questions(open_only=not all))}


@router.post("/v1/questions/{question_id}/answer", tags=["outbox"])
async def answer(request: Request, question_id: str, body: Answer) -> dict[str, Any]:
    """Answer a question; 404 when it is unknown, answered or timed out; 400 when not one of its options."""
    try:
        answered = await settle(_outbox(request).answer(question_id, body.text))
    except ValueError as e:  # not one of the options, empty, or closed meanwhile
        raise ApiError(400, str(e)) from None
    if not answered:
        raise ApiError(404, f"no open question {question_id!r} (unknown, answered or timed out)")
    return {"answered": True}


@router.get("/v1/outbox", tags=["outbox"])
async def outbox_messages(
    request: Request, unread: bool = False, limit: int = Query(100, ge=1, le=1000)
) -> dict[str, Any]:
    """Messages for the user, oldest first (``?unread=1``: only unread ones)."""
    return {"messages": await settle(_outbox(request).messages(unread_only=unread, limit=limit))}


@router.post("/v1/outbox/read", tags=["outbox"])
async def outbox_read(request: Request, body: ReadBody) -> dict[str, Any]:
    """Mark messages read."""
    return {"marked": await settle(_outbox(request).mark_read(body.ids))}


def _offline_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI from files in a package, not FastAPI's CDN (it must work offline).

    Its Authorize button takes the bearer token; the page and the API description need none.
    """
    import fastapi_offline
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles

    assets = Path(fastapi_offline.__file__).parent / "static"
    app.mount(DOCS_ASSETS, StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title="kairos API", swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css", swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        )  # fmt: skip

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            schema["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(
    runtime: Runtime,
    *,
    token: str | None = None,
    webhook_secret: str | None = None,
    outbox: OutboxAPI | None = None,
    model_name: str = "kairos",
    max_body: int = MAX_BODY,
    heartbeat_s: float = 15.0,
    completion_timeout_s: float = 600.0,
    grace_s: float = 10.0,
    allowed_hosts: Sequence[str] = (),
    settings: dict[str, Any] | None = None,
    memory: UserMemory | None = None,
    knowledge: KnowledgeBase | None = None,
    mcp: Sequence[McpServerSource] = (),
    workers: Workers | None = None,
) -> FastAPI:
    """The API app over ``runtime``.

    Args:
        runtime: started by the app's lifespan unless it already runs (then the caller closes it).
        token: bearer token every route but health and webhooks needs; None: no auth (loopback only,
            see :func:`kairos.server.auth.check_bind`).
        webhook_secret: HMAC secret of ``POST /v1/events``; None: webhooks are refused (503).
        outbox: what the questions and outbox routes use; None: they answer 503.
        model_name: the id ``/v1/models`` lists and chat completions report.
        max_body: largest request body in bytes (413 above).
        heartbeat_s: a stream sends a keep-alive after this long without records.
        completion_timeout_s: how long a chat completion waits for the agent's answer (504 after).
        grace_s: on shutdown, running turns get this long to finish before they are interrupted.
        allowed_hosts: more names the ``Host`` and ``Origin`` of a request may carry than this machine's
            loopback names. Without a token every request is checked (DNS rebinding: a web page that
            re-points its name at 127.0.0.1 must not drive the agent); with a token, only when some are given.
        memory: the user's memory the agent uses (``/v1/memory``); None: those routes answer 503.
        knowledge: the workspace's knowledge base (``/v1/knowledge``); None: those routes answer 503.
        mcp: the agent's MCP servers (``/v1/mcp``: their state, tools and approval; approve, revoke).
        workers: where turns run when this process is a front end only (the work queue): a stop button
            reaches the worker that runs the session.
        settings: what ``GET /v1/settings`` shows (``kairos serve`` passes the effective configuration,
            its sources and notices; it holds no secrets, only the names of the variables that do).
    """
    from kairos.server import browser_view, data_routes, inspect, openai_compat, streams, voice_ws

    state = ServerState(
        runtime,
        token or None,
        webhook_secret or None,
        outbox,
        model_name,
        heartbeat_s,
        completion_timeout_s,
        grace_s,
        memory,
        knowledge,
        tuple(mcp),
        dict(settings or {}),
        max_body,
        workers=workers,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = not runtime.accepting
        if owned:
            await runtime.__aenter__()
        try:
            yield
        finally:
            state.begin_shutdown()
            if owned:
                await runtime.aclose(grace_s)

    app = FastAPI(
        title="kairos", version="1", summary="The kairos agent runtime's HTTP API", lifespan=lifespan,
        docs_url=None, redoc_url=None,
    )  # fmt: skip
    app.state.kairos = state
    _offline_docs(app)
    mount_ui(app)
    install_handlers(app)
    app.include_router(router)
    app.include_router(streams.router)
    app.include_router(openai_compat.router)
    app.include_router(data_routes.router)
    app.include_router(inspect.router)
    app.include_router(browser_view.router)
    app.include_router(voice_ws.router)
    hosts = LOOPBACK_NAMES | {host_name(h) for h in allowed_hosts if h.strip()}
    checked = hosts if state.token is None or allowed_hosts else None
    app.add_middleware(Guard, token=state.token, max_body=max_body, allowed_hosts=checked)
    return app


__all__ = ["MAX_BODY", "create_app"]
