"""A thin streaming client for ``POST /chat/completions``: httpx2 plus a small SSE decoder.

Replaces the ``openai`` SDK's request/stream path for :class:`~kairos.models.openai_compat.OpenAICompatModel`:
the body is already encoded JSON, and the SDK's generic machinery (request options, header merging,
its SSE decoder, per-chunk processing) was most of ``kairos serve``'s CPU per event in the ``load``
bench. The errors keep the SDK's names and fields (``APITimeoutError``, ``APIConnectionError``,
``APIStatusError``, ``APIError`` for an error event in the stream), so
:meth:`kairos.models._remote.RemoteModel._classify` treats both backends alike. The API key goes
only into the ``Authorization`` header: never into an error, a ``repr`` or a log line.

``httpx2`` (pydantic's continuation of httpx, the SDK's own HTTP library) rather than ``httpx``:
httpcore's pool scans every connection (a ``select`` on each idle socket) twice per request, and
with it one streamed call cost ~1.0 ms of CPU against ~0.6 ms with httpx2's pool.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx2

LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
"""The SDK's pool limits (one ``kairos serve`` runs many sessions' model calls at once)."""
STREAM_ERROR = "An error occurred during streaming"
DRAIN_TIMEOUT_S = 0.1
"""How long the rest of a body after ``[DONE]`` is waited for (the SDK's figure)."""


class APIError(Exception):
    """The server failed the request: an ``{"error": ...}`` event in the stream (or a status, below)."""

    def __init__(self, message: str, *, body: object | None) -> None:
        super().__init__(message)
        self.message = message
        self.body = body
        code = body.get("code") if isinstance(body, dict) else None
        self.code: str | None = None if code is None else str(code)


class APIStatusError(APIError):
    """A non-2xx answer; ``body`` is the JSON ``error`` object (or the whole JSON, or the text)."""

    def __init__(self, message: str, *, response: httpx2.Response, body: object | None) -> None:
        super().__init__(message, body=body)
        self.response = response
        self.status_code = response.status_code


class APIConnectionError(Exception):
    """The request never got an answer; ``__cause__`` is httpx2's error (refused, reset, DNS...)."""


class APITimeoutError(APIConnectionError):
    """Connecting, sending or waiting for the response headers took longer than the timeout."""


class MalformedStreamError(Exception):
    """An event's data is not JSON: the server does not speak the protocol (not worth a retry)."""


class ChatCompletionsClient:
    """Streams chat completions from one base URL over a pooled ``httpx2.AsyncClient``.

    Proxies come from the environment (``HTTPS_PROXY``, ``NO_PROXY``...), redirects are followed,
    and ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` become their headers, as with the SDK.
    """

    max_retries = 0
    """One attempt per call: the retries are the caller's (``kairos.models._retry``)."""

    def __init__(self, *, base_url: str, api_key: str, timeout_s: float) -> None:
        self.api_key = api_key
        self.timeout = timeout_s
        self.url = base_url.rstrip("/") + "/chat/completions"
        headers = {
            "Accept": "application/json",
            "Accept-Encoding": "gzip, deflate",
            "Content-Type": "application/json",
            "User-Agent": "kairos",
            "Authorization": f"Bearer {api_key}",
        }
        for header, variable in (("OpenAI-Organization", "OPENAI_ORG_ID"), ("OpenAI-Project", "OPENAI_PROJECT_ID")):
            if value := os.environ.get(variable):
                headers[header] = value
        timeout = httpx2.Timeout(timeout_s)  # each phase: connect, write, every read, pool
        # Each request is built from these parts, parsed once: the client's generic
        # build_request (merging URL, headers and cookies per call) cost a tenth of a call's CPU.
        self._url = httpx2.URL(self.url)
        self._headers = httpx2.Headers(headers)
        self._extensions = {"timeout": timeout.as_dict()}
        self._http = httpx2.AsyncClient(timeout=timeout, limits=LIMITS, follow_redirects=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r})"  # never the key

    async def close(self) -> None:
        await self._http.aclose()

    async def stream(self, body: bytes) -> AsyncIterator[object]:
        """POST ``body``; yield each event's JSON until ``[DONE]`` or the end of the body.

        Raises ``APITimeoutError`` / ``APIConnectionError`` before an answer, ``APIStatusError``
        for a non-2xx one and ``APIError`` for an error event. A body broken off mid-way raises
        httpx2's own ``TransportError`` (as the SDK lets it through); a clean end simply stops,
        and only the caller can tell a complete reply (it saw a ``finish_reason``) from a cut one.
        The response is closed however the iteration ends, cancellation included.
        """
        request = httpx2.Request("POST", self._url, headers=self._headers, content=body, extensions=self._extensions)
        try:
            response = await self._http.send(request, stream=True)
        except httpx2.TimeoutException as exc:
            raise APITimeoutError("Request timed out.") from exc
        except httpx2.HTTPError as exc:
            raise APIConnectionError("Connection error.") from exc
        try:
            if not response.is_success:
                raise await _status_error(response)
            decoder, chunks = SSEDecoder(), response.aiter_bytes()
            async for chunk in chunks:
                for _event, data in decoder.feed(chunk):
                    if data.startswith(b"[DONE]"):
                        await _drain(chunks)
                        return
                    yield _parse(data)
        finally:
            await response.aclose()


class SSEDecoder:
    """Server-sent events from raw body chunks, as the WHATWG spec reads them.

    Lines end in LF, CRLF or CR (also split across chunks); a blank line dispatches the event;
    lines starting with ``:`` are comments (keep-alives); only ``data`` and ``event`` matter here.
    An event without data is dropped, and so is one the body ends before its blank line (cut off).
    Works on bytes so a UTF-8 character split between chunks is never decoded half.
    """

    __slots__ = ("_data", "_event", "_partial", "_skip_lf")

    def __init__(self) -> None:
        self._partial = b""
        self._data: list[bytes] = []
        self._event: bytes | None = None
        self._skip_lf = False
        """The last chunk ended in CR: an LF starting the next one ends no second line."""

    def feed(self, chunk: bytes) -> list[tuple[bytes | None, bytes]]:
        """The ``(event name, data)`` of each event that ``chunk`` completes."""
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = False
        if b"\r" in chunk:
            self._skip_lf = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        events: list[tuple[bytes | None, bytes]] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append((self._event, b"\n".join(self._data)))
                self._data, self._event = [], None
            elif line[0] != 0x3A:  # ":" starts a comment
                name, _, value = line.partition(b":")
                if value[:1] == b" ":
                    value = value[1:]
                if name == b"data":
                    self._data.append(value)
                elif name == b"event":
                    self._event = value
        return events


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what follows ``[DONE]`` (normally nothing), so the connection can go back to the pool.

    Briefly, as the SDK does: a server that keeps the stream open after ``[DONE]`` costs its
    connection (closed instead of reused), never the finished reply.
    """
    try:
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            async for _ in chunks:
                pass
    except (TimeoutError, httpx2.HTTPError):
        pass


def _parse(data: bytes) -> object:
    try:
        chunk = json.loads(data)
    except ValueError as exc:  # UnicodeDecodeError included
        raise MalformedStreamError(f"the stream sent data that is not JSON: {data[:200]!r}") from exc
    if isinstance(chunk, dict) and chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else None
        raise APIError(message if isinstance(message, str) and message else STREAM_ERROR, body=error)
    return chunk


async def _status_error(response: httpx2.Response) -> APIStatusError:
    """The SDK's error for a non-2xx answer: ``Error code: 429 - <message>``, the error object as body."""
    text = (await response.aread()).decode(errors="replace").strip()
    message = f"Error code: {response.status_code}"
    body: Any = text
    try:
        body = json.loads(text)
    except ValueError:
        pass
    else:
        error = body.get("error", body) if isinstance(body, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"]:
            message += f" - {error['message']}"
        if isinstance(body, dict):
            body = body.get("error", body)
    return APIStatusError(message, response=response, body=body)
