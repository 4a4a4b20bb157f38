"""pytest fixtures around :mod:`kairos.testing.mailserver` (real dovecot + aiosmtpd on loopback)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kairos.testing.mailserver import (
    ADDRESS,
    NO_IDLE,
    PASSWORD_ENV,
    USER,
    Dovecot,
    MailServer,
    MailServerUnavailable,
    find_dovecot,
    free_port,
)


def _start(monkeypatch: pytest.MonkeyPatch, *, idle: bool) -> Iterator[MailServer]:
    try:
        server = MailServer.start(idle=idle)
    except MailServerUnavailable as e:
        pytest.skip(str(e))
    monkeypatch.setenv(PASSWORD_ENV, server.password)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(name="mailserver")
def mailserver_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[MailServer]:
    """Dovecot with IDLE and an SMTP server delivering into it; the password is in ``PASSWORD_ENV``."""
    yield from _start(monkeypatch, idle=True)


@pytest.fixture(name="mailserver_no_idle")
def mailserver_no_idle_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[MailServer]:
    """The same, with a dovecot that does not offer IDLE."""
    yield from _start(monkeypatch, idle=False)


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
    "mailserver_fixture",
    "mailserver_no_idle_fixture",
]
