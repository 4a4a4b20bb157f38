"""A session's browser as the web UI shows it: the latest numbered screenshot and the page it shows.

The browser session (:mod:`kairos.browser`) writes both after every observation, in the state directory
(:mod:`kairos.browser.paths`); these routes read them from there. A front end that runs no turns
(``kairos serve --no-worker``) sees them only when its workers share its state directory; else it answers 404,
saying so. Bearer auth as for every session route (the guard in :mod:`kairos.server.middleware`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from kairos.browser.paths import page_path, screen_path
from kairos.errors import SessionNotFoundError
from kairos.server.middleware import ApiError
from kairos.server.state import state_of

router = APIRouter()
NO_BROWSER = "no_browser"
"""The error type of the 404 for a session that has not used a browser (here)."""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_END = b"IEND\xaeB`\x82"
"""The last bytes of every complete PNG: a screenshot still being written lacks them."""
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _browser_file(request: Request, session_id: str, where: Callable[[Path, str], Path]) -> Path:
    """The session's browser file ``where`` names; 404 for an unknown session or a file that is not there."""
    state = state_of(request)
    if not state.runtime.has_session(session_id):
        raise SessionNotFoundError(session_id)
    root = state.runtime.state_dir / "browser"
    path = where(state.runtime.state_dir, session_id)
    # paths sanitises the id to one folder name; ".." is one too: the file must be two levels below <state>/browser
    if path.resolve().parent.parent != root.resolve():
        raise ApiError(404, f"session {session_id[:80]!r} has no browser here", NO_BROWSER)
    if not path.is_file():
        elsewhere = (
            " on this server (its turns run on the deployment's workers: their screenshots are visible here only "
            "when they share this server's state directory)"
            if state.workers is not None
            else ""
        )
        raise ApiError(404, f"session {session_id[:80]!r} has no browser screenshot{elsewhere}", NO_BROWSER)
    return path


def _being_written() -> ApiError:
    return ApiError(503, "the browser is writing its observation: ask again", headers={"Retry-After": "1"})


@router.get(
    "/v1/sessions/{session_id}/browser/screen",
    tags=["sessions"],
    response_class=Response,
    responses={200: {"content": {"image/png": {}}, "description": "the latest screenshot, elements numbered"}},
)
async def browser_screen(request: Request, session_id: str) -> Response:
    """The session's latest browser screenshot (PNG) with its interactive elements numbered in boxes.

    404 when the session has not used a browser; 503 while one is being written (ask again).
    """
    path = _browser_file(request, session_id, screen_path)
    try:
        data = await asyncio.to_thread(path.read_bytes)
    except FileNotFoundError:  # replaced between the check and the read
        raise _being_written() from None
    if not (data.startswith(PNG_SIGNATURE) and data.endswith(PNG_END)):
        raise _being_written()
    return Response(data, media_type="image/png", headers=NO_STORE)


@router.get("/v1/sessions/{session_id}/browser/page", tags=["sessions"])
async def browser_page(request: Request, session_id: str) -> Response:
    """What the session's browser showed last: ``{url, title, at, elements: [{index, role, name, box}], screen_at}``.

    ``at``: when it was observed (unix seconds); ``screen_at``: when the screenshot was last written (null when
    there is none), so a page can fetch the image again when either changes. 404 when the session has not used
    a browser; 503 while the record is being written (ask again).
    """
    path = _browser_file(request, session_id, page_path)
    screen = screen_path(state_of(request).runtime.state_dir, session_id)
    try:
        record: Any = json.loads(await asyncio.to_thread(path.read_bytes))
    except (FileNotFoundError, ValueError):
        raise _being_written() from None
    if not isinstance(record, dict):
        raise ApiError(500, f"the browser's page record {path.name} is not a JSON object")
    try:
        record["screen_at"] = screen.stat().st_mtime
    except OSError:
        record["screen_at"] = None
    return Response(json.dumps(record), media_type="application/json", headers=NO_STORE)


__all__ = ["router"]
