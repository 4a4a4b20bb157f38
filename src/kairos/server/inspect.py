"""What the model saw and what it cost: the per-request routes behind the web UI's context inspector.

``GET /v1/sessions/{id}/requests`` lists each model request's numbers; ``…/requests/{index}`` lays one
request out again in its parts (static system, cache boundary, deployment part, tools in order, the
trajectory, the trailing status) with the prefix audit's divergence from the request before.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request

from kairos.context.layout import LAYOUT_KEY, LayoutMissingError, Prompt, digest, divergence_point, expand
from kairos.server.middleware import ApiError
from kairos.server.state import state_of

router = APIRouter()


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != LAYOUT_KEY}


@router.get("/v1/sessions/{session_id}/requests", tags=["sessions"])
async def session_requests(request: Request, session_id: str) -> dict[str, Any]:
    """Each model request: prompt, cached and generated tokens, times, ``tool_choice``, the prefix audit."""
    return {"requests": [_summary(r) for r in state_of(request).runtime.requests(session_id)]}


@router.get("/v1/sessions/{session_id}/requests/{index}", tags=["sessions"])
async def session_request(request: Request, session_id: str, index: int) -> dict[str, Any]:
    """One request laid out in its parts, which plugin added which message where, and its divergence.

    ``divergence`` (null when the prefix held): the part, the item among its kind, the byte where this
    request first differs from the previous one, both texts, and the reason (null: an accidental break).
    """
    records = state_of(request).runtime.requests(session_id)
    try:
        current, previous = expand(records, index)
    except IndexError:
        raise ApiError(404, f"session has no request {index} (it has {len(records)})") from None
    except LayoutMissingError as e:
        raise ApiError(404, str(e)) from None
    record = records[index]
    parts = _parts(current)
    return {
        "request": _summary(record),
        "parts": parts,
        "divergence": _divergence(record, current, previous),
        "added": _added(current, parts),
    }


@router.get("/v1/sessions/{session_id}/compression", tags=["sessions"])
async def session_compression(request: Request, session_id: str) -> dict[str, Any]:
    """What compression replaced in what the model sees (spilled, shrunk, summarised, archived), with the original."""
    return {"replacements": state_of(request).runtime.compression(session_id)}


@router.get("/v1/sessions/{session_id}/background", tags=["sessions"])
async def session_background(request: Request, session_id: str) -> dict[str, Any]:
    """The session's async tasks (state, progress, exit code) and timers (schedule, next due time)."""
    return state_of(request).runtime.background(session_id)


def _parts(p: Prompt) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"part": "system_static", "text": p.system_static}]
    if p.system_deployment:
        parts += [{"part": "cache_boundary", "text": ""}, {"part": "system_deployment", "text": p.system_deployment}]
    for text in p.tools:
        parts.append({"part": "tool", "name": _tool_name(text), "text": _pretty(text)})
    for i, text in enumerate(p.messages):
        parts.append({"part": "message" if i < p.stable else "status", **_message(text)})
    return parts


def _tool_name(serialized: str) -> str:
    try:
        spec = json.loads(serialized)
        return str(spec.get("function", spec).get("name", "?"))
    except (ValueError, AttributeError):
        return "?"


def _pretty(serialized: str) -> str:
    try:
        return json.dumps(json.loads(serialized), indent=2, ensure_ascii=False)
    except ValueError:
        return serialized


def _message(serialized: str) -> dict[str, Any]:
    """Role, origin and readable text of a message's canonical record (tool calls as ``→ name(arguments)``)."""
    try:
        rec = json.loads(serialized)
    except ValueError:
        return {"role": "?", "origin": None, "text": serialized}
    lines = [str(rec.get("content") or "")]
    lines += [f"→ {name}({arguments})" for _, name, arguments in rec.get("tool_calls") or ()]
    origin = rec.get("origin")
    return {
        "role": rec.get("role", "?"),
        "origin": {"kind": origin[0], "source": origin[1] if len(origin) > 1 else ""} if origin else None,
        "name": rec.get("name"),
        "text": "\n".join(x for x in lines if x),
    }


def _divergence(record: dict[str, Any], current: Prompt, previous: Prompt | None) -> dict[str, Any] | None:
    where = None if record.get("prefix_ok", True) else divergence_point(record.get("diverged_at"))
    if where is None:
        return None
    part, item, byte = where

    def item_of(p: Prompt | None) -> str:
        if p is None:
            return ""
        if part == "system":
            return p.system_static + ("\n\n" + p.system_deployment if p.system_deployment else "")
        texts = p.tools if part == "tool" else p.messages
        return texts[item] if item < len(texts) else ""

    return {
        "part": part, "item": item, "byte": byte, "reason": record.get("deliberate"),
        "previous": item_of(previous), "current": item_of(current),
    }  # fmt: skip


def _added(p: Prompt, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``{plugin, at, parts}``: the parts (indexes) each plugin appended at a safe point before this request."""
    first = len(parts) - len(p.messages)
    where: dict[str, int] = {}
    for i, text in enumerate(p.messages):
        where[digest(text)] = first + i  # the last occurrence: the message this request got
    return [
        {"plugin": a.get("plugin", "?"), "at": a.get("at", "?"),
         "parts": [where[d] for d in a.get("messages", ()) if d in where]}
        for a in p.added
    ]  # fmt: skip


__all__ = ["router"]
