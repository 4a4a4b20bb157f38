"""Fixtures of the toolset tests: a workspace context, document builders and a loopback HTTP server."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from kairos.tools.base import Tool, ToolContext, ToolResult


async def run(t: Tool, ctx: ToolContext, **args: Any) -> ToolResult:
    t.validate(args)
    return await t.call(args, ctx)


def make_pdf(pages: list[str]) -> bytes:
    """A real PDF with one text line per page line (Helvetica), built by hand: pypdf cannot write text."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    for text in pages:
        ops = ["BT", "/F1 11 Tf", "14 TL", "50 780 Td"]
        for line in text.splitlines():
            safe = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            ops.append(f"({safe}) Tj T*")
        ops.append("ET")
        stream = "\n".join(ops).encode("latin-1")
        content_id = len(objects) + 2
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Resources << /Font << /F1 "
            + f"{len(pages) * 2 + 3}".encode()
            + b" 0 R >> >> /Contents "
            + f"{content_id}".encode()
            + b" 0 R >>"
        )
        kids.append(len(objects))
        objects.append(b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream")
    objects[1] = (
        b"<< /Type /Pages /Kids ["
        + b" ".join(f"{k} 0 R".encode() for k in kids)
        + b"] /Count "
        + str(len(pages)).encode()
        + b" >>"
    )
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


@dataclass
class Route:
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class HttpFixture:
    """A real ``http.server`` on 127.0.0.1: ``routes[path]`` answers GETs; ``requests`` records them."""

    base: str
    routes: dict[str, Route | Callable[[], Route]]
    requests: list[dict[str, Any]]

    def url(self, path: str) -> str:
        return self.base + path


@pytest.fixture
def http_fixture() -> Iterator[HttpFixture]:
    routes: dict[str, Route | Callable[[], Route]] = {}
    requests: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body})
            route = routes.get(self.path.split("?")[0])
            if callable(route):
                route = route()
            if route is None:
                route = Route(404, "text/plain", b"not found")
            self.send_response(route.status)
            self.send_header("Content-Type", route.content_type)
            self.send_header("Content-Length", str(len(route.body)))
            for k, v in route.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(route.body)

        do_GET = _answer
        do_POST = _answer

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield HttpFixture(f"http://127.0.0.1:{server.server_address[1]}", routes, requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
