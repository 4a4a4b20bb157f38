"""The web UI: static ES modules served from the package at ``/`` (no build step, no CDN, no fonts).

The page holds no ambient credential: with a token set, the user pastes it once (or ``kairos ui`` passes it
in the URL fragment, which never reaches a server) and the page sends it as a bearer header; there are no
cookies, so another site cannot ride on the user's browser (no CSRF). A strict Content-Security-Policy keeps
the page to its own origin: it loads and connects to nothing else.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

UI_DIR = Path(__file__).parent / "ui"
UI_PREFIX = "/ui/"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
UI_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class _UiFiles(StaticFiles):
    """The UI's files with its security headers (a module loaded from here keeps the page's policy)."""

    def file_response(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        response = super().file_response(*args, **kwargs)
        response.headers.update(UI_HEADERS)
        return response


def mount_ui(app: FastAPI) -> None:
    """Serve ``/`` (the page) and ``/ui/*`` (its modules, styles and icon)."""
    app.mount(UI_PREFIX.rstrip("/"), _UiFiles(directory=UI_DIR), name="ui")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(UI_DIR / "index.html", headers=UI_HEADERS)


__all__ = ["UI_DIR", "UI_PREFIX", "mount_ui"]
