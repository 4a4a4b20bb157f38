"""Real mail servers on loopback for tests and benches: a private dovecot (IMAP) and aiosmtpd (SMTP).

Dovecot runs in the foreground with a generated config (one user, a maildir, no SSL, no system
service) on a free 127.0.0.1 port. As root, mail processes run as ``nobody`` (dovecot refuses
uid 0), so the instance lives in its own temporary directory that user can enter (pytest's
``tmp_path`` is private to root); as any other user it runs rootless. The SMTP server delivers
what it receives into that dovecot's INBOX by IMAP APPEND, so mail sent over SMTP is readable
over IMAP. ``make test-deps`` installs dovecot (Debian's ``dovecot-imapd``); without it
:meth:`MailServer.start` raises :class:`MailServerUnavailable` (the tests skip, benches report it).
``aiosmtpd`` is a test/bench dependency, imported only when a server starts.

Use ``with MailServer.running() as server:`` (it sets the password variable the config names for
the duration); pytest fixtures live in ``tests/support/mailserver.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Any

from imapclient import IMAPClient  # type: ignore[import-untyped]

from kairos.errors import KairosError
from kairos.runtime.integrations.mail import MailConfig

USER = "alice"
ADDRESS = "alice@example.test"
PASSWORD_ENV = "KAIROS_TEST_MAIL_PASSWORD"
INSTALL_HINT = "install dovecot: `make test-deps` (apt-get install dovecot-imapd)"


class MailServerUnavailable(KairosError):
    """Dovecot or aiosmtpd is missing; the message says how to install it."""


def find_dovecot() -> str | None:
    """The dovecot binary (``/usr/sbin`` is not on every PATH)."""
    return shutil.which("dovecot") or next(
        (p for p in ("/usr/sbin/dovecot", "/usr/local/sbin/dovecot") if os.access(p, os.X_OK)), None
    )


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for the servers' listeners)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_CONFIG = """
protocols = imap
listen = 127.0.0.1
base_dir = {root}/run
state_dir = {root}/state
instance_name = kairos-test-{port}
log_path = {root}/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
{users}
mail_location = maildir:{root}/mail/%u
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/users
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={root}/mail/%u
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
namespace inbox {{
  inbox = yes
  separator = /
  mailbox Drafts {{
    auto = create
    special_use = \\Drafts
  }}
}}
{extra}
"""

NO_IDLE = "imap_capability = IMAP4rev1 LITERAL+ SASL-IR ID ENABLE NAMESPACE UIDPLUS MOVE SPECIAL-USE CHILDREN"
"""A capability list without IDLE (dovecot then advertises no IDLE: the client must poll)."""


@dataclass
class Dovecot:
    """One private dovecot instance; ``imap()`` opens a logged-in client for checks."""

    root: Path
    port: int
    password: str
    binary: str
    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls, binary: str, *, idle: bool = True) -> Dovecot:
        """Configure and start an instance in a new temporary directory (``idle=False``: no IDLE)."""
        root = Path(tempfile.mkdtemp(prefix="kairos-dovecot-"))
        port, password = free_port(), secrets.token_hex(12)
        for sub in ("run", "state", "mail"):
            (root / sub).mkdir()
        if os.geteuid() == 0:  # mail processes may not run as root: give the maildir to nobody
            user = pwd.getpwnam("nobody")
            uid, gid = user.pw_uid, user.pw_gid
            os.chmod(root, 0o755)
            os.chown(root / "mail", uid, gid)
            users = "first_valid_uid = 1"
        else:  # rootless: every dovecot process runs as this user
            uid, gid = os.getuid(), os.getgid()
            me = pwd.getpwuid(uid).pw_name
            users = f"default_internal_user = {me}\ndefault_login_user = {me}\nfirst_valid_uid = {uid}"
        (root / "users").write_text(f"{USER}:{{PLAIN}}{password}\n")
        conf = _CONFIG.format(root=root, port=port, uid=uid, gid=gid, users=users, extra="" if idle else NO_IDLE)
        (root / "dovecot.conf").write_text(conf)
        self = cls(root, port, password, binary)
        self.run()
        return self

    def run(self) -> None:
        """Start the server process (again, after :meth:`halt`) and wait until it accepts connections."""
        root, port = self.root, self.port
        self.process = subprocess.Popen(
            [self.binary, "-F", "-c", str(root / "dovecot.conf")], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = self.log()
                self.stop()
                raise RuntimeError(f"dovecot did not start on port {port}:\n{log}")
            time.sleep(0.05)

    def log(self) -> str:
        """The end of the server's log (for error messages)."""
        path = self.root / "dovecot.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"

    def stop(self) -> None:
        """Stop the server and delete its directory."""
        self.halt()
        shutil.rmtree(self.root, ignore_errors=True)

    def halt(self) -> None:
        """Stop the server process, keeping its mail (a server going down)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def imap(self) -> IMAPClient:
        """A logged-in IMAP client (the caller logs out)."""
        client = IMAPClient("127.0.0.1", self.port, ssl=False, timeout=20)
        client.login(USER, self.password)
        return client

    def append(self, raw: bytes, folder: str = "INBOX") -> None:
        """Put a raw message into a folder directly (no SMTP)."""
        client = self.imap()
        try:
            client.append(folder, raw)
        finally:
            client.logout()


class _Deliver:
    """aiosmtpd handler: every accepted message goes into the dovecot INBOX (IMAP APPEND)."""

    def __init__(self, dovecot: Dovecot) -> None:
        self.dovecot = dovecot
        self.received: list[bytes] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = bytes(envelope.original_content or envelope.content)
        self.received.append(raw)
        await asyncio.to_thread(self.dovecot.append, raw)
        return "250 OK delivered"


@dataclass
class MailServer:
    """Dovecot plus an SMTP server delivering into it."""

    dovecot: Dovecot
    smtp_port: int
    handler: _Deliver
    extra: dict[str, Any] = field(default_factory=dict)
    controller: Any = None

    @classmethod
    def start(cls, *, idle: bool = True) -> MailServer:
        """Start dovecot and the SMTP server (stop them with :meth:`close`).

        Raises:
            MailServerUnavailable: dovecot or aiosmtpd is not installed.
        """
        binary = find_dovecot()
        if binary is None:
            raise MailServerUnavailable(f"dovecot is not installed: {INSTALL_HINT}")
        try:
            from aiosmtpd.controller import Controller
        except ImportError:
            raise MailServerUnavailable("aiosmtpd is not installed: pip install aiosmtpd") from None
        dovecot = Dovecot.start(binary, idle=idle)
        handler = _Deliver(dovecot)
        try:
            controller = Controller(handler, hostname="127.0.0.1", port=free_port())
            controller.start()
        except BaseException:
            dovecot.stop()
            raise
        return cls(dovecot, controller.port, handler, controller=controller)

    @classmethod
    @contextlib.contextmanager
    def running(cls, *, idle: bool = True) -> Iterator[MailServer]:
        """A started server with its password in ``PASSWORD_ENV`` (restored afterwards)."""
        server = cls.start(idle=idle)
        before = os.environ.get(PASSWORD_ENV)
        os.environ[PASSWORD_ENV] = server.password
        try:
            yield server
        finally:
            if before is None:
                os.environ.pop(PASSWORD_ENV, None)
            else:
                os.environ[PASSWORD_ENV] = before
            server.close()

    def close(self) -> None:
        """Stop both servers and delete the mail."""
        try:
            if self.controller is not None:
                self.controller.stop()
                self.controller = None
        finally:
            self.dovecot.stop()

    @property
    def password(self) -> str:
        """The user's password (random per server)."""
        return self.dovecot.password

    def config(self, **overrides: Any) -> MailConfig:
        """A MailConfig for this server (plain IMAP and SMTP on loopback, quick polls)."""
        values: dict[str, Any] = {
            "imap_host": "127.0.0.1",
            "imap_port": self.dovecot.port,
            "imap_ssl": False,
            "user": USER,
            "password_env": PASSWORD_ENV,
            "from_address": ADDRESS,
            "smtp_host": "127.0.0.1",
            "smtp_port": self.smtp_port,
            "smtp_starttls": False,
            "smtp_user": "",
            "poll_s": 0.2,
        }
        values.update(overrides)
        return MailConfig(**values)

    def send(
        self,
        subject: str,
        body: str,
        sender: str = "someone@example.org",
        message_id: str | None = None,
        html: str | None = None,
        in_reply_to: str | None = None,
    ) -> str:
        """Send a mail to alice over SMTP (it lands in her INBOX); returns its Message-ID."""
        import smtplib

        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = sender, ADDRESS, subject
        msg["Message-ID"] = message_id or make_msgid(domain="example.org")
        if in_reply_to:
            msg["In-Reply-To"] = in_reply_to
        msg.set_content(body)
        if html is not None:
            msg.add_alternative(html, subtype="html")
        with smtplib.SMTP("127.0.0.1", self.smtp_port, timeout=20) as smtp:
            smtp.send_message(msg)
        return str(msg["Message-ID"])

    def folder(self, name: str) -> dict[int, dict[bytes, Any]]:
        """Map uid → {FLAGS, BODY[]} of every message in a folder ({} when it does not exist)."""
        client = self.dovecot.imap()
        try:
            if not client.folder_exists(name):
                return {}
            client.select_folder(name, readonly=True)
            uids = client.search(["ALL"])
            return dict(client.fetch(uids, ["FLAGS", "BODY.PEEK[]"])) if uids else {}
        finally:
            client.logout()


__all__ = [
    "ADDRESS",
    "NO_IDLE",
    "PASSWORD_ENV",
    "USER",
    "Dovecot",
    "MailServer",
    "MailServerUnavailable",
    "find_dovecot",
    "free_port",
]
