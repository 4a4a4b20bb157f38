"""Who may call the API: bearer tokens, signed webhooks, and the bind check.

Secrets come from the process environment or the caller (``kairos serve`` reads
``KAIROS_API_TOKEN`` and ``KAIROS_WEBHOOK_SECRET``), never from a workspace's ``kairos.toml``: the
workspace is untrusted and must not be able to choose the keys that guard it. Every comparison is
constant-time, and nothing here logs a secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import time

from kairos.errors import ConfigError

TOKEN_ENV = "KAIROS_API_TOKEN"
"""Environment variable ``kairos serve`` reads the bearer token from (by default)."""
WEBHOOK_SECRET_ENV = "KAIROS_WEBHOOK_SECRET"
"""Environment variable ``kairos serve`` reads the webhook signing secret from (by default)."""
SIGNATURE_HEADER = "X-Kairos-Signature"
TIMESTAMP_HEADER = "X-Kairos-Timestamp"
REPLAY_WINDOW_S = 300
"""A signed webhook older or newer than this (seconds) is refused: a captured request cannot be replayed later."""


def bearer_ok(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (constant-time)."""
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), token.encode())


BEARER_PROTOCOL = "kairos.bearer."
"""A browser's WebSocket cannot carry an ``Authorization`` header: the page offers the token as a subprotocol,
``kairos.bearer.<base64url of the token>``, beside the one it speaks (which the server answers)."""


def subprotocol_bearer_ok(header: str | None, token: str) -> bool:
    """Whether a ``Sec-WebSocket-Protocol`` header offers ``token`` as :data:`BEARER_PROTOCOL` (constant-time)."""
    for offered in (header or "").split(","):
        name = offered.strip()
        if not name.startswith(BEARER_PROTOCOL):
            continue
        encoded = name.removeprefix(BEARER_PROTOCOL)
        try:
            value = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (ValueError, binascii.Error):
            return False
        return hmac.compare_digest(value, token.encode())
    return False


def sign(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The headers a webhook sender adds: ``sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`` and the timestamp.

    For senders written in Python, tests and the load bench.
    """
    ts = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return {SIGNATURE_HEADER: f"sha256={digest}", TIMESTAMP_HEADER: str(ts)}


def verify(secret: str, body: bytes, signature: str | None, timestamp: str | None, now: float | None = None) -> str:
    """Why a webhook's signature is not acceptable, or ``""`` when it is.

    The reason is for the sender's 401 body; it never contains the secret or the expected digest.
    """
    if not signature or not timestamp:
        return f"missing {SIGNATURE_HEADER} or {TIMESTAMP_HEADER} header"
    try:
        ts = int(timestamp.strip())
    except ValueError:
        return f"{TIMESTAMP_HEADER} must be unix seconds"
    current = time.time() if now is None else now
    if abs(current - ts) > REPLAY_WINDOW_S:
        return f"{TIMESTAMP_HEADER} is outside the {REPLAY_WINDOW_S} s window (check the sender's clock)"
    scheme, _, given = signature.strip().partition("=")
    if scheme != "sha256" or not given:
        return f"{SIGNATURE_HEADER} must look like sha256=<hex>"
    expected = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(given.lower().encode(), expected.encode()):
        return "signature mismatch"
    return ""


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` reaches only this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""The names a browser uses for this machine: without a token, the only ``Host`` and ``Origin`` accepted
(with the names ``--allow-host`` adds)."""


def host_name(value: str) -> str:
    """The name of a ``Host`` header or ``Origin`` authority, without its port or IPv6 brackets, lowercased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def foreign_request(host: str | None, origin: str | None, allowed: frozenset[str]) -> tuple[int, str] | None:
    """(status, why) when a request names a host this server does not answer to, else None.

    DNS rebinding: a web page re-points its own name at 127.0.0.1 and its scripts reach this server as
    that name, from that origin; the ``Host`` header (421) and the ``Origin`` a browser adds (403) are
    what tell it from a local client. ``Origin: null`` (a sandboxed frame, a file) is refused too.
    """
    names = ", ".join(sorted(allowed))
    if host_name(host or "") not in allowed:
        return (
            421,
            f"Host {(host or '')[:100]!r} is not served here (allowed: {names}; kairos serve --allow-host adds one)",
        )
    if origin is not None:
        authority = origin.partition("://")[2].split("/", 1)[0] if "://" in origin else ""
        if not authority or host_name(authority) not in allowed:
            return 403, f"requests from the web page at {origin[:100]!r} are refused (allowed origins: {names})"
    return None


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve a non-loopback address without a bearer token.

    Raises:
        ConfigError: ``host`` is reachable from other machines and no token is set.
    """
    if not token and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} without a bearer token: anyone who can reach it could drive the "
            f"agent. Set {TOKEN_ENV} (or the variable --token-env names) or bind 127.0.0.1"
        )


__all__ = [
    "LOOPBACK_NAMES",
    "REPLAY_WINDOW_S",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "TOKEN_ENV",
    "WEBHOOK_SECRET_ENV",
    "bearer_ok",
    "check_bind",
    "foreign_request",
    "host_name",
    "is_loopback",
    "sign",
    "verify",
]
