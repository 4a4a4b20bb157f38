"""Sending a notification over a configured channel: SMTP mail or a signed webhook.

Recipients and URLs come from the user's ``[[notify.channels]]`` only; the model picks a channel
by name and writes the message. A webhook body is signed the way ``kairos serve`` checks incoming
webhooks (:func:`kairos.server.auth.verify`): ``X-Kairos-Signature: sha256=<HMAC-SHA256 of
"<timestamp>.<body>">`` and ``X-Kairos-Timestamp``. Secrets are read from the environment at send
time and never appear in a result or an error.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import smtplib
import ssl
import time
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

import httpx

from kairos.tools.toolsets.config import NotifyChannel, env_secret

SIGNATURE_HEADER = "X-Kairos-Signature"
TIMESTAMP_HEADER = "X-Kairos-Timestamp"
MAX_MESSAGE_CHARS = 20_000


class NotifyError(RuntimeError):
    """The notification was not sent; the message says why (without secrets)."""


def sign(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The signature headers of a webhook body (the scheme of :func:`kairos.server.auth.sign`)."""
    ts = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return {SIGNATURE_HEADER: f"sha256={digest}", TIMESTAMP_HEADER: str(ts)}


async def send(channel: NotifyChannel, message: str, *, subject: str = "", session: str = "") -> str:
    """Send ``message`` over ``channel``; returns a one-line receipt.

    Raises:
        NotifyError: the message is empty or too long, a secret is missing, or the server refused it.
    """
    if not message.strip():
        raise NotifyError("the message is empty")
    if len(message) > MAX_MESSAGE_CHARS:
        raise NotifyError(f"the message has {len(message):,} characters; the limit is {MAX_MESSAGE_CHARS:,}")
    if channel.kind == "webhook":
        return await _webhook(channel, message, subject, session)
    return await asyncio.to_thread(_smtp, channel, message, subject)


async def _webhook(channel: NotifyChannel, message: str, subject: str, session: str) -> str:
    secret = env_secret(channel.secret_env)
    if channel.secret_env and not secret:
        raise NotifyError(f"the signing secret is missing: the environment variable {channel.secret_env} is not set")
    payload = {"channel": channel.name, "subject": subject or channel.subject, "message": message,
               "session": session, "sent_at": int(time.time())}  # fmt: skip
    body = json.dumps(payload, ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "kairos-notify"}
    if secret:
        headers.update(sign(secret, body))
    try:
        async with asyncio.timeout(channel.timeout_s), httpx.AsyncClient(timeout=channel.timeout_s) as client:
            resp = await client.post(channel.url, content=body, headers=headers)
    except (TimeoutError, httpx.TimeoutException) as e:
        raise NotifyError(f"the webhook did not answer within {channel.timeout_s:g} s") from e
    except httpx.HTTPError as e:
        raise NotifyError(f"the webhook cannot be reached ({type(e).__name__})") from e
    if resp.status_code >= 300:
        raise NotifyError(f"the webhook answered HTTP {resp.status_code} {resp.reason_phrase}")
    return f"sent to webhook channel {channel.name!r} (HTTP {resp.status_code})"


def _smtp(channel: NotifyChannel, message: str, subject: str) -> str:
    password = env_secret(channel.password_env)
    if channel.user and not password:
        raise NotifyError(f"no SMTP password: the environment variable {channel.password_env or '(unset)'} is not set")
    msg = EmailMessage()
    msg["From"] = channel.from_address
    msg["To"] = ", ".join(channel.to)
    msg["Subject"] = " ".join((subject or channel.subject).split())[:200]
    msg["Date"] = formatdate(localtime=True)
    msg["Message-ID"] = make_msgid(domain=channel.from_address.rpartition("@")[2] or "kairos.local")
    msg.set_content(message)
    try:
        smtp: smtplib.SMTP
        if channel.ssl:
            smtp = smtplib.SMTP_SSL(channel.host, channel.port, timeout=channel.timeout_s,
                                    context=ssl.create_default_context())  # fmt: skip
        else:
            smtp = smtplib.SMTP(channel.host, channel.port, timeout=channel.timeout_s)
        with smtp:
            if channel.starttls and not channel.ssl:
                smtp.starttls(context=ssl.create_default_context())
            if channel.user:
                smtp.login(channel.user, password)
            refused = smtp.send_message(msg)
    except smtplib.SMTPAuthenticationError as e:
        raise NotifyError(f"the SMTP server refused the login for {channel.user!r}") from e
    except smtplib.SMTPNotSupportedError as e:
        raise NotifyError("the SMTP server does not offer STARTTLS; set starttls = false only for a local relay") from e
    except (OSError, smtplib.SMTPException) as e:
        raise NotifyError(f"cannot send through {channel.host}:{channel.port} ({type(e).__name__}: {e})") from e
    if refused:
        raise NotifyError(f"the server refused some recipients: {', '.join(sorted(refused))}")
    return f"mailed to {len(channel.to)} recipient(s) of channel {channel.name!r}"


__all__ = ["MAX_MESSAGE_CHARS", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "NotifyError", "send", "sign"]
