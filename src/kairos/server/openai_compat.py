"""An OpenAI-compatible ``POST /v1/chat/completions`` in front of the kairos agent (issue 9 §5).

Any OpenAI client can talk to the agent: the request's last user message becomes a ``user.input``
event in a session, and the agent's answer comes back as a ``chat.completion`` (or streamed as
``chat.completion.chunk`` events ending with ``data: [DONE]``) built from the bus records
``agent.text`` and ``agent.final``. A stream sends its role chunk at once and, while no text
comes, SSE comments: what the agent is doing (``: reading the prompt — 512 of 2,653 tokens``)
and ``: keep-alive`` after ``heartbeat_s`` of silence, so no client or proxy gives up on a
silent connection while a slow model reads its prompt. The joined deltas of a stream are the
non-streamed content (text the agent wrote before a tool call included). The agent uses its own
system prompt and tools: the request's system messages, tools (``tool_choice`` other than ``auto``
or ``none`` with tools is refused: it cannot be honoured) and sampling settings are ignored.

Which session a request goes to:

1. the ``X-Kairos-Session`` header names one: that session (it keeps the history, so only the last
   user message is sent in);
2. else the ``user`` field: a session kept per user name (created on first use, remembered by the
   runtime: :meth:`~kairos.runtime.Runtime.named_session`), with the same rule;
3. else a new session per request, seeded with the request's earlier user and assistant messages
   (the stateless way OpenAI clients send a whole conversation each time).

Every reply carries the session in its ``X-Kairos-Session`` header, so a client can continue there.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from kairos.errors import SessionNotFoundError
from kairos.models.types import Message
from kairos.runtime import BusEvent
from kairos.runtime.outbound import (
    AgentActivity,
    AgentError,
    AgentFinal,
    AgentRequest,
    AgentText,
    AgentToolStarted,
    ParallelAnswer,
)
from kairos.server.middleware import ApiError, error_body
from kairos.server.state import ServerState, state_of, submit_user
from kairos.server.streams import follow

router = APIRouter()
SESSION_HEADER = "X-Kairos-Session"
_FINISH = {"answer": "stop", "length": "length", "max_iterations": "length"}


class ChatMessage(BaseModel):
    """One message of the request (extra fields such as ``name`` are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The text parts joined (images and other parts are not read)."""
        if isinstance(self.content, str):
            return self.content
        parts = self.content or []
        return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")


class StreamOptions(BaseModel):
    """``stream_options``."""

    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ChatRequest(BaseModel):
    """The chat-completions body (sampling settings, tools and the like are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, max_length=200)


_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>)]+", re.IGNORECASE)


@dataclass
class _Answer:
    text: str = ""
    """Every text delta of the turn joined: the non-streamed content is what a stream would have sent."""
    streamed: str = ""
    """Text streamed since the last tool call (what the final answer should repeat)."""
    finish: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    done: bool = False

    def usage(self) -> dict[str, int]:
        total = self.prompt_tokens + self.completion_tokens
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens, "total_tokens": total}


def _session_for(state: ServerState, body: ChatRequest, header: str | None) -> str:
    rt = state.runtime
    if header:
        if not rt.has_session(header):
            raise SessionNotFoundError(header, f" (from the {SESSION_HEADER} header)")
        return header
    if body.user:
        meta = {"created_by": "openai", "user": body.user}
        return rt.named_session("openai", body.user, f"openai user {body.user}"[:200], meta)
    history = [
        Message.user(m.text()) if m.role == "user" else Message.assistant(m.text())
        for m in body.messages[:-1]
        if m.role in ("user", "assistant") and m.text()
    ]
    return rt.create_session("openai conversation", {"created_by": "openai"}, history=history)


def _apply(answer: _Answer, ev: BusEvent, question: str) -> str | None:
    """Fold one record into the answer; returns a text delta to stream, or None. Sets ``finish`` at the end."""
    match ev.payload:
        case AgentText(text=text):
            answer.streamed += text
            answer.text += text
            return text
        case AgentToolStarted():
            answer.streamed = ""
        case AgentRequest() as req:
            answer.prompt_tokens += req.prompt_tokens
            answer.completion_tokens += req.completion_tokens
        case AgentError(message=message):
            message = _URL.sub("<the model endpoint>", message)  # never the internal address
            raise ApiError(502, f"the agent failed: {message[:500]}", "agent_error")
        case AgentFinal(text=final, stop_reason=reason):
            return _finish(answer, final, _FINISH.get(reason, "stop"))
        case ParallelAnswer(question=asked, answer=final) if asked == question:
            return _finish(answer, final, "stop")
    return None


def _finish(answer: _Answer, final: str, finish: str) -> str:
    """End the answer with ``final``; returns what of it was not streamed yet."""
    answer.finish = finish
    rest = final[len(answer.streamed) :] if final.startswith(answer.streamed) else ("" if answer.streamed else final)
    answer.text += rest
    answer.done = True
    return rest


async def _submit(state: ServerState, sid: str, text: str, key: str | None) -> AsyncGenerator[BusEvent | None, None]:
    """Submit the message; the session's records from just before it (None: a heartbeat of silence).

    Raises:
        ApiError: the message was dropped (422).
        KairosError: the session is unknown or the runtime is stopping.
    """
    rt = state.runtime
    records = follow(rt, sid, rt.bus.last_cursor(), [state.stopping], state.heartbeat_s)
    receipt = await submit_user(state, sid, text, None, key, channel="openai")
    if receipt.strategy == "drop":
        await records.aclose()
        raise ApiError(422, f"the message was dropped: {receipt.reason}")
    return records


async def _answers(
    state: ServerState, sid: str, records: AsyncIterator[BusEvent | None], text: str
) -> AsyncIterator[tuple[_Answer, str, str]]:
    """``(answer so far, text delta, note)`` until the final answer.

    A note says what the agent is doing while no text comes (``reading the prompt — 512 of 2,653
    tokens``), or ``keep-alive`` after ``heartbeat_s`` of silence; a stream sends it as an SSE comment.
    """
    answer = _Answer()
    async with asyncio.timeout(state.completion_timeout_s):
        async for ev in records:
            if ev is None:
                yield answer, "", "keep-alive"
                continue
            if isinstance(ev.payload, AgentActivity):
                yield answer, "", ev.payload.text
                continue
            delta = _apply(answer, ev, text)
            if delta:
                yield answer, delta, ""
            if answer.done:
                yield answer, "", ""
                return
    raise ApiError(503, "the server is stopping; the message is queued in session " + sid)


def _comment(note: str) -> str:
    """An SSE comment line (clients ignore it; proxies see bytes): one line, whatever the note holds."""
    return f": {' '.join(note.split())}\n\n"


def _chunk(cid: str, model: str, created: int, delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    obj = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [choice]}
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


@router.post("/v1/chat/completions", tags=["openai"], response_model=None)
async def chat_completions(
    request: Request,
    body: ChatRequest,
    x_kairos_session: Annotated[str | None, Header(max_length=200)] = None,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> JSONResponse | StreamingResponse:
    """OpenAI chat completions answered by the kairos agent (see the module docstring)."""
    state = state_of(request)
    extra = body.model_extra or {}
    if extra.get("tools") and extra.get("tool_choice") not in (None, "auto", "none"):
        raise ApiError(400, "tool_choice cannot be honoured: the kairos agent answers with its own tools, and the "
                       "request's tools are never called (send tool_choice 'auto' or none)")  # fmt: skip
    last = body.messages[-1]
    if last.role != "user" or not last.text().strip():
        raise ApiError(400, "the last message must be a user message with text")
    sid = _session_for(state, body, x_kairos_session)
    cid, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), body.model
    headers = {SESSION_HEADER: sid}
    records = await _submit(state, sid, last.text(), idempotency_key)  # a refusal is still an HTTP error
    answers = _answers(state, sid, records, last.text())
    if not body.stream:
        answer = _Answer()
        try:
            async for got, _, _ in answers:
                answer = got
        except TimeoutError:
            raise ApiError(
                504, f"no answer within {state.completion_timeout_s:g} s; it will land in session {sid}"
            ) from None
        message = {"role": "assistant", "content": answer.text}
        choice = {"index": 0, "message": message, "finish_reason": answer.finish}
        reply = {"id": cid, "object": "chat.completion", "created": created, "model": model, "choices": [choice]}
        return JSONResponse({**reply, "usage": answer.usage()}, headers=headers)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    async def frames() -> AsyncIterator[str]:
        # the role chunk at once: a client (or a proxy) waiting minutes for the first token sees a live stream
        yield _chunk(cid, model, created, {"role": "assistant", "content": ""})
        answer = _Answer()
        try:
            async for got, delta, note in answers:
                answer = got
                if delta:
                    yield _chunk(cid, model, created, {"content": delta})
                elif note:
                    yield _comment(note)
            yield _chunk(cid, model, created, {}, answer.finish)
            if include_usage:
                usage = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
                yield f"data: {json.dumps({**usage, 'choices': [], 'usage': answer.usage()})}\n\n"
        except ApiError as e:
            yield f"data: {json.dumps(error_body(e.status, e.message, e.type))}\n\n"
        except TimeoutError:
            yield f"data: {json.dumps(error_body(504, f'no answer in time; it will land in session {sid}'))}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(frames(), media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache"})


@router.get("/v1/models", tags=["openai"])
async def models(request: Request) -> dict[str, Any]:
    """The one model this server offers: the kairos agent."""
    name = state_of(request).model_name
    return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "kairos"}]}


__all__ = ["SESSION_HEADER", "router"]
