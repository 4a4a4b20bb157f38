"""Text extraction tells binary from text whatever the name, and reads a legacy encoding as what it is."""

from __future__ import annotations

import gzip
import zlib

import pytest

from kairos.tools.toolsets.documents import DocumentError, decode_text, extract

PROSE = b"# Deploys\n\nDeploys run every Friday at noon, after the release notes are approved.\n" * 40


@pytest.mark.parametrize(
    "data",
    [
        gzip.compress(PROSE),  # an archive: NUL bytes
        bytes(b for b in zlib.compress(PROSE * 5) if b),  # compressed bytes with the NULs taken out
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 20,
        b"\x7fELF\x02\x01\x01\x00" + bytes(1000),
    ],
    ids=["gzip", "no-nul-bytes", "png", "elf"],
)
@pytest.mark.parametrize("kind", ["markdown", "text", "html"])
def test_binary_content_is_refused_whatever_the_kind(data: bytes, kind: str) -> None:
    with pytest.raises(DocumentError, match="skipped: binary content"):
        extract(data, kind)


def test_text_stays_text() -> None:
    assert decode_text(PROSE).text == PROSE.decode() and decode_text(PROSE).notes == []
    assert decode_text("\ufeffcafé".encode()).text == "café"
    log = b"\x1b[31mERROR\x1b[0m the build failed\n\x0cnext page\n" * 50  # escapes and form feeds are text
    assert decode_text(log).text.startswith("\x1b[31mERROR")
    stray = decode_text(PROSE[:500] + b"\x00" + PROSE[500:])  # one NUL in a text file
    assert "\x00" not in stray.text and "Friday" in stray.text


def test_a_few_bad_bytes_become_replacement_characters_with_a_note() -> None:
    doc = decode_text("caf\xe9 cr\xe8me br\xfbl\xe9e recipe, and the rest of it in plain English".encode("latin-1"))
    assert doc.text.startswith("caf\ufffd cr\ufffdme") and "4 byte sequence(s) were not UTF-8" in doc.notes[0]


def test_a_legacy_encoding_or_utf16_is_read_as_what_it_is() -> None:
    russian = "Развёртывание идёт каждую пятницу в полдень. " * 30
    doc = decode_text(russian.encode("cp1251"))
    assert doc.text == russian and doc.notes == ["the text is not UTF-8: read as cp1251"]
    assert decode_text("Grüße aus Köln".encode("utf-16")).text == "Grüße aus Köln"
    no_bom = ("Grüße aus Köln, wo es heute regnet. " * 20).encode("utf-16-le")
    assert decode_text(no_bom).text.startswith("Grüße aus Köln")
