"""Turn raw RFC 5322 bytes into what the agent reads: plain text, headers, attachment names.

Mail is untrusted and often broken (bad charsets, cut MIME parts, headers that do not parse).
:func:`parse_message` never raises: whatever cannot be read is replaced by a note in
``problems``, so a malformed message still becomes an event with what could be read.
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage, Message
from email.utils import getaddresses, parseaddr
from html.parser import HTMLParser

_SKIP_TAGS = {"script", "style", "head", "title"}
_BLOCK_TAGS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "blockquote"}


@dataclass(slots=True)
class ParsedMail:
    """The readable parts of one message."""

    subject: str = ""
    sender: str = ""
    """The From address alone (``client@example.com``)."""
    sender_name: str = ""
    to: str = ""
    date: str = ""
    message_id: str = ""
    """The Message-ID header, or a stable ``<sha256…@kairos.invalid>`` made from the bytes when absent."""
    in_reply_to: str = ""
    body: str = ""
    attachments: list[str] = field(default_factory=list)
    """``name (type, size)`` per attachment: listed, never inlined."""
    problems: list[str] = field(default_factory=list)
    """What could not be read (a broken header, an unknown charset, a cut message)."""

    def text(self, max_chars: int) -> str:
        """The body, trimmed to ``max_chars``, then the attachment list."""
        body = self.body.strip()
        if len(body) > max_chars:
            body = body[:max_chars].rstrip() + f"\n[… body cut at {max_chars} characters]"
        if self.attachments:
            body += "\n\nAttachments (not included): " + "; ".join(self.attachments)
        return body or "(no text)"


class _TextOfHtml(HTMLParser):
    """Collects an HTML document's visible text (tags stripped, blocks as line breaks)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_to_text(markup: str) -> str:
    """Visible text of an HTML mail body (no tags, scripts or styles; whitespace tidied)."""
    parser = _TextOfHtml()
    try:
        parser.feed(markup)
        parser.close()
        text = "".join(parser.parts)
    except Exception:  # HTMLParser is lenient, but never let a body crash the source
        text = re.sub(r"<[^>]*>", " ", markup)
    text = html.unescape(text) if "&" in text else text
    lines = [re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _header(msg: Message, name: str, problems: list[str]) -> str:
    try:
        value = msg.get(name)
        return " ".join(str(value).split()) if value is not None else ""
    except Exception as e:  # a header the parser cannot decode
        problems.append(f"unreadable {name} header ({type(e).__name__})")
        raw = msg.get_all(name, failobj=None) if isinstance(msg, Message) else None
        return " ".join(str(raw[0]).split()) if raw else ""


def _part_text(part: Message, problems: list[str]) -> str:
    """A text part's content, decoding leniently when the declared charset is wrong or unknown."""
    if isinstance(part, EmailMessage):
        try:
            content = part.get_content()
            if isinstance(content, str):
                return content
        except Exception as e:
            problems.append(f"text part not decodable as declared ({type(e).__name__}); read as UTF-8")
    payload = part.get_payload(decode=True)
    if isinstance(payload, bytes):
        return payload.decode("utf-8", errors="replace")
    raw = part.get_payload()
    return raw if isinstance(raw, str) else ""


def _attachment_line(part: Message) -> str:
    name = part.get_filename() or "(unnamed)"
    try:
        size = len(part.get_payload(decode=True) or b"")
    except Exception:
        size = 0
    shown = f"{size / 1024:.0f} KB" if size >= 1024 else f"{size} B"
    return f"{name} ({part.get_content_type()}, {shown})"


def parse_message(raw: bytes, *, truncated: bool = False) -> ParsedMail:
    """Parse one message; never raises (see the module docstring).

    Args:
        raw: the message bytes as the server sent them.
        truncated: the bytes are only the first part of a larger message (a size cap applied).
    """
    out = ParsedMail()
    if truncated:
        out.problems.append("message larger than the size cap: only its beginning was read")
    try:
        msg = message_from_bytes(raw, policy=policy.default)
    except Exception as e:  # pragma: no cover - the stdlib parser is itself lenient
        out.problems.append(f"not parseable as mail ({type(e).__name__})")
        out.body = raw.decode("utf-8", errors="replace")
        out.message_id = _synthetic_id(raw)
        return out
    if msg.defects:
        out.problems.append("malformed: " + ", ".join(sorted({type(d).__name__ for d in msg.defects})))
    out.subject = _header(msg, "Subject", out.problems)
    sender = _header(msg, "From", out.problems)
    out.sender_name, out.sender = parseaddr(sender)
    to = _header(msg, "To", out.problems)
    try:
        out.to = ", ".join(addr for _, addr in getaddresses([to]) if addr) or to
    except Exception:
        out.to = to
    out.date = _header(msg, "Date", out.problems)
    out.message_id = _header(msg, "Message-ID", out.problems) or _synthetic_id(raw)
    out.in_reply_to = _header(msg, "In-Reply-To", out.problems)
    out.body = _body(msg, out)
    return out


def _body(msg: Message, out: ParsedMail) -> str:
    plain: list[str] = []
    markup: list[str] = []
    for part in msg.walk():
        if part.is_multipart():
            continue
        disposition = (part.get_content_disposition() or "").lower()
        ctype = part.get_content_type()
        if disposition == "attachment" or (part.get_filename() and disposition != "inline"):
            out.attachments.append(_attachment_line(part))
        elif ctype == "text/plain":
            plain.append(_part_text(part, out.problems))
        elif ctype == "text/html":
            markup.append(_part_text(part, out.problems))
        elif not ctype.startswith("multipart/") and ctype != "message/rfc822":
            out.attachments.append(_attachment_line(part))
    if plain:
        return "\n\n".join(p.strip() for p in plain if p.strip())
    if markup:
        return "\n\n".join(html_to_text(m) for m in markup)
    return ""


def _synthetic_id(raw: bytes) -> str:
    return f"<sha256-{hashlib.sha256(raw).hexdigest()[:32]}@kairos.invalid>"


__all__ = ["ParsedMail", "html_to_text", "parse_message"]
