"""Blocking IMAP and SMTP operations (run in threads by :mod:`kairos.runtime.integrations.mail`).

Every function here blocks; callers run them with ``asyncio.to_thread``. Errors become
:class:`MailError` (or :class:`MailAuthError` for refused credentials) with a message that says
what failed and what to check, never the password.
"""

from __future__ import annotations

import hashlib
import re
import smtplib
import socket
import ssl
from collections.abc import Callable
from email import policy
from email.message import EmailMessage
from email.utils import formatdate, getaddresses, make_msgid
from typing import TYPE_CHECKING, Any, TypeVar

from imapclient import IMAPClient  # type: ignore[import-untyped]  # imapclient ships no type information
from imapclient.exceptions import IMAPClientError, LoginError  # type: ignore[import-untyped]

from kairos.errors import KairosError
from kairos.runtime.integrations._mail_parse import ParsedMail, parse_message

if TYPE_CHECKING:
    from kairos.runtime.integrations.mail import MailConfig

T = TypeVar("T")
_FOLDER_RE = re.compile(r"^[^\x00-\x1f\x7f*%\"\\]{1,200}$")
_KEYWORD_RE = re.compile(r"^\$?[A-Za-z0-9_.-]{1,60}$")
FLAG_NAMES = {
    "flagged": "\\Flagged",
    "high priority": "\\Flagged",
    "high": "\\Flagged",
    "important": "\\Flagged",
    "urgent": "\\Flagged",
    "seen": "\\Seen",
    "read": "\\Seen",
    "answered": "\\Answered",
    "replied": "\\Answered",
}


class MailError(KairosError):
    """A mail operation failed; the message says what to check."""


class MailAuthError(MailError):
    """The server refused the credentials (a retry needs a corrected password or user)."""


def connect(cfg: MailConfig, password: str) -> IMAPClient:
    """A logged-in IMAP client (not yet in a folder).

    Raises:
        MailAuthError: the login was refused.
        MailError: the server cannot be reached or spoke unexpectedly.
    """
    where = f"{cfg.imap_host}:{cfg.imap_port}"
    try:
        client = IMAPClient(cfg.imap_host, cfg.imap_port, ssl=cfg.imap_ssl, timeout=cfg.timeout_s)
    except (OSError, IMAPClientError) as e:
        raise MailError(f"cannot reach the IMAP server {where}: {e}") from e
    try:
        client.login(cfg.user, password)
    except LoginError as e:
        close(client)
        raise MailAuthError(
            f"the IMAP server {where} refused the login of {cfg.user!r}: check the password in "
            f"the environment variable {cfg.password_env} ({_text(e)})"
        ) from None
    except (OSError, IMAPClientError) as e:
        close(client)
        raise MailError(f"IMAP login at {where} failed: {_text(e)}") from None
    return client


def close(client: IMAPClient) -> None:
    """Drop the connection now; safe from another thread (unblocks a thread waiting in IDLE)."""
    try:
        client.socket().shutdown(socket.SHUT_RDWR)
    except Exception:
        pass
    try:
        client.shutdown()
    except Exception:
        pass


def session(cfg: MailConfig, password: str, work: Callable[[IMAPClient], T]) -> T:
    """Connect, select the configured folder, run ``work``, log out (one tool call)."""
    client = connect(cfg, password)
    try:
        client.select_folder(cfg.folder)
        return work(client)
    except (OSError, IMAPClientError) as e:
        raise MailError(f"IMAP operation failed: {_text(e)}") from None
    finally:
        try:
            client.logout()
        except Exception:
            close(client)


def fetch(client: IMAPClient, uid: int, max_bytes: int) -> tuple[ParsedMail, list[str]] | None:
    """Parse message ``uid`` of the selected folder (at most ``max_bytes`` read); None if absent."""
    section = f"BODY.PEEK[]<0.{max_bytes}>"
    data = client.fetch([uid], ["RFC822.SIZE", "FLAGS", section])
    row = data.get(uid)
    if not row:
        return None
    raw = next((v for k, v in row.items() if k.startswith(b"BODY[")), None) or b""
    size = int(row.get(b"RFC822.SIZE", len(raw)))
    flags = [f.decode() if isinstance(f, bytes) else str(f) for f in row.get(b"FLAGS", ())]
    return parse_message(bytes(raw), truncated=size > len(raw)), flags


def require(client: IMAPClient, uid: int, folder: str) -> None:
    """Raises MailError when the selected folder has no message ``uid``."""
    if uid not in client.search(["UID", str(uid)]):
        raise MailError(f"no message with uid {uid} in {folder}; use the uid from the email event")


def check_folder(name: str) -> str:
    """A mailbox name the model may use (no wildcards or control characters)."""
    name = name.strip()
    if not _FOLDER_RE.match(name):
        raise MailError(f"{name!r} is not a usable folder name (no wildcards *, %, quotes or control characters)")
    return name


def ensure_folder(client: IMAPClient, name: str) -> None:
    """Create the folder when it does not exist yet."""
    if not client.folder_exists(name):
        client.create_folder(name)


def flag_of(name: str) -> str:
    r"""An IMAP flag from a name the model gives (``high priority`` → ``\\Flagged``)."""
    text = name.strip()
    key = text.lower().lstrip("\\")
    if key in FLAG_NAMES:
        return FLAG_NAMES[key]
    if text.startswith("\\"):
        raise MailError(f"unknown system flag {text!r}; use \\Flagged, \\Seen or \\Answered, or a keyword")
    if not _KEYWORD_RE.match(text):
        raise MailError(f"{text!r} is not a usable flag: use 'flagged', 'seen', 'answered' or a one-word keyword")
    return text


def message_id(key: str | None, sender: str) -> str:
    """A Message-ID: deterministic for an idempotency key (a resend carries the same id), else fresh."""
    domain = sender.rpartition("@")[2].strip("<> ") or "kairos.invalid"
    if key:
        return f"<kairos-{hashlib.sha256(key.encode()).hexdigest()[:40]}@{domain}>"
    return make_msgid(domain=domain)


def compose(
    cfg: MailConfig, to: str, subject: str, body: str, mid: str, in_reply_to: str = "", references: str = ""
) -> EmailMessage:
    """A plain-text message; header injection (line breaks) and bad addresses raise MailError."""
    addresses = [a for _, a in getaddresses([to]) if a]
    if not addresses or any("@" not in a or any(c in a for c in "\r\n") for a in addresses):
        raise MailError(f"{to!r} is not a list of email addresses (name@example.com, comma-separated)")
    msg = EmailMessage(policy=policy.SMTP)
    try:
        msg["From"] = cfg.from_address
        msg["To"] = to
        msg["Subject"] = subject
        msg["Date"] = formatdate(localtime=True)
        msg["Message-ID"] = mid
        if in_reply_to:
            msg["In-Reply-To"] = in_reply_to
            msg["References"] = f"{references} {in_reply_to}".strip()
    except (ValueError, TypeError) as e:
        raise MailError(f"bad header: {e}") from None
    msg.set_content(body)
    return msg


def smtp_send(cfg: MailConfig, password: str | None, msg: EmailMessage) -> None:
    """Send over SMTP (SSL, STARTTLS or plain per config; login when a user is configured)."""
    host, where = cfg.smtp_host or cfg.imap_host, f"{cfg.smtp_host or cfg.imap_host}:{cfg.smtp_port}"
    try:
        smtp: smtplib.SMTP
        if cfg.smtp_ssl:
            smtp = smtplib.SMTP_SSL(host, cfg.smtp_port, timeout=cfg.timeout_s, context=ssl.create_default_context())
        else:
            smtp = smtplib.SMTP(host, cfg.smtp_port, timeout=cfg.timeout_s)
        with smtp:
            if cfg.smtp_starttls and not cfg.smtp_ssl:
                smtp.starttls(context=ssl.create_default_context())
            if cfg.smtp_login_user and password is not None:
                smtp.login(cfg.smtp_login_user, password)
            smtp.send_message(msg)
    except smtplib.SMTPAuthenticationError:
        raise MailAuthError(f"the SMTP server {where} refused the login of {cfg.smtp_login_user!r}") from None
    except (OSError, smtplib.SMTPException) as e:
        raise MailError(f"sending through the SMTP server {where} failed: {_text(e)}") from None


def append_uid(response: Any) -> int | None:
    """The new message's uid from an APPEND reply (``[APPENDUID v uid]``, UIDPLUS)."""
    text = response.decode(errors="replace") if isinstance(response, bytes) else str(response)
    m = re.search(r"APPENDUID \d+ (\d+)", text)
    return int(m.group(1)) if m else None


def _text(e: BaseException) -> str:
    return str(e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else e)


__all__ = [
    "FLAG_NAMES",
    "MailAuthError",
    "MailError",
    "append_uid",
    "check_folder",
    "close",
    "compose",
    "connect",
    "ensure_folder",
    "fetch",
    "flag_of",
    "message_id",
    "require",
    "session",
    "smtp_send",
]
