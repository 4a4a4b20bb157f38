"""Documents as plain text: PDF (pypdf), DOCX (python-docx), PPTX (python-pptx), HTML (trafilatura), text.

Each extractor returns the text and notes on what it could not keep (images, an empty page, bytes
that were not UTF-8), so the tool can tell the model instead of silently dropping them. The
libraries are imported on first use: a session that never reads a PDF never pays for pypdf.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import PurePath

MAX_DOCUMENT_BYTES = 50_000_000
"""Larger files are refused (parsing holds the whole document in memory)."""

KIND_BY_SUFFIX = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".md": "markdown",
    ".markdown": "markdown",
}
TEXT_SUFFIXES = {".txt", ".text", ".rst", ".csv", ".tsv", ".json", ".yaml", ".yml", ".toml", ".log", ".xml", ".ini"}
UNSUPPORTED = {".doc": "DOCX", ".ppt": "PPTX", ".xls": "CSV", ".xlsx": "CSV", ".odt": "DOCX or PDF", ".rtf": "DOCX"}
"""Legacy or unsupported formats, with the format to convert them to."""


_SNIFF_BYTES = 65_536
"""How much of a text file is looked at to tell text from binary (and a legacy encoding from UTF-8)."""
_LEGACY_SHARE = 0.3
"""Above this share of characters lost to invalid UTF-8, a text is read in the encoding it appears to be in.

Below it (a Latin-1 word in an English file) UTF-8 with U+FFFD is the safer reading: charset-normalizer
cannot tell cp1250 from cp1252 on a few accented letters, and a wrong guess turns "crème" into "crčme"."""
_CONTROL_BYTES = bytes(sorted(set(range(32)) - set(b"\b\t\n\v\f\r\x1b")))
"""Control bytes that text does not contain (backspace, tab, line breaks, form feed and ESC it does)."""
_CONTROL_SHARE = 0.05
"""More than this share of control bytes and it is not text (an ELF or PNG header, a NUL-padded image)."""
_BINARY = (
    "skipped: binary content, not text (an image, archive or program renamed? "
    "kairos reads Markdown, text, PDF, DOCX, PPTX and HTML)"
)
_UTF16_32_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"),
)  # fmt: skip


class DocumentError(ValueError):
    """The document cannot be read; the message says why and what to do instead (for the model)."""


@dataclass(slots=True)
class Document:
    """A document's text and what the extraction could not keep."""

    text: str
    kind: str
    parts: int = 0
    """Pages (PDF), slides (PPTX) or 0."""
    notes: list[str] = field(default_factory=list)


def kind_of(name: str, head: bytes = b"") -> str | None:
    """``pdf``, ``docx``, ``pptx``, ``html``, ``markdown`` or ``text`` from the name and first bytes; None if binary."""
    suffix = PurePath(name).suffix.lower()
    if suffix in KIND_BY_SUFFIX:
        return KIND_BY_SUFFIX[suffix]
    if head.startswith(b"%PDF-"):
        return "pdf"
    start = head[:512].lstrip().lower()
    if start.startswith((b"<!doctype html", b"<html")):
        return "html"
    if suffix in TEXT_SUFFIXES or (head and b"\0" not in head[:8192]):
        return "text"
    if not head and suffix not in UNSUPPORTED:
        return "text"
    return None


def extract(data: bytes, kind: str) -> Document:
    """The text of a document of ``kind`` (see :func:`kind_of`).

    Raises:
        DocumentError: the bytes are not a readable document of that kind (damaged, encrypted…).
    """
    try:
        if kind == "pdf":
            return _pdf(data)
        if kind == "docx":
            return _docx(data)
        if kind == "pptx":
            return _pptx(data)
        if kind == "html":
            page = decode_text(data, "html")
            doc = html_to_text(page.text)
            doc.notes[:0] = page.notes
            return doc
    except DocumentError:
        raise
    except Exception as e:  # the parsers raise anything on a damaged file; the model gets a clear error
        raise DocumentError(
            f"cannot read it as {kind.upper()} ({type(e).__name__}: {str(e)[:200]}); is it damaged?"
        ) from e
    return decode_text(data, kind)


def decode_text(data: bytes, kind: str = "text") -> Document:
    """The text of ``data``: UTF-8 (a BOM dropped), or a legacy encoding when that is what it is.

    Invalid UTF-8 in mostly-UTF-8 text becomes U+FFFD and a note says how many bytes; text that is
    not UTF-8 at all (cp1251, Shift JIS, UTF-16) is read in the encoding charset-normalizer finds.

    Raises:
        DocumentError: the bytes are binary, whatever the file is named (an image or archive renamed ``.md``).
    """
    for bom, codec in _UTF16_32_BOMS:
        if data.startswith(bom):
            return Document(data.decode(codec, errors="replace").removeprefix("\ufeff"), kind)
    sample = data[:_SNIFF_BYTES]
    if len(sample) - len(sample.translate(None, _CONTROL_BYTES)) > _CONTROL_SHARE * len(sample):
        wide = _encoding_of(sample)  # UTF-16 or UTF-32 without a BOM is mostly NUL bytes, and text
        if wide is None or not wide.startswith(("utf_16", "utf_32")):
            raise DocumentError(_BINARY)
        return Document(data.decode(wide, errors="replace"), kind, notes=[f"read as {wide}"])
    try:
        return Document(data.decode("utf-8").removeprefix("\ufeff").replace("\0", ""), kind)  # the common case
    except UnicodeDecodeError:
        pass
    guess = _encoding_of(sample)
    if guess is None:
        raise DocumentError(_BINARY)
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    bad = text.count("\ufffd") - data.decode("utf-8", errors="ignore").count("\ufffd")
    notes = []
    if bad > _LEGACY_SHARE * len(text) and guess not in ("utf_8", "ascii"):
        text = data.decode(guess, errors="replace")
        notes.append(f"the text is not UTF-8: read as {guess}")
    elif bad > 0:
        notes.append(f"{bad} byte sequence(s) were not UTF-8 and are shown as \ufffd")
    return Document(text.replace("\0", ""), kind, notes=notes)


def _encoding_of(sample: bytes) -> str | None:
    """The encoding charset-normalizer reads ``sample`` in (Python's codec name), or None: it is not text."""
    from charset_normalizer import from_bytes

    best = from_bytes(sample).best()
    return None if best is None else best.encoding


def _pdf(data: bytes) -> Document:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        try:
            opened = reader.decrypt("")
        except Exception as e:  # an unsupported encryption algorithm
            raise DocumentError(f"the PDF is encrypted and cannot be opened ({e})") from e
        if not opened:
            raise DocumentError("the PDF is password-protected; ask the user for an unprotected copy")
    pages = []
    empty = []
    for n, page in enumerate(reader.pages, start=1):
        text = (page.extract_text() or "").strip()
        if not text:
            empty.append(n)
        pages.append(f"--- page {n} ---\n{text}")
    notes = []
    if empty:
        shown = ", ".join(map(str, empty[:20])) + (", …" if len(empty) > 20 else "")
        notes.append(f"no text on page(s) {shown} (scanned images? kairos does no OCR)")
    return Document("\n\n".join(pages), "pdf", len(pages), notes)


def _docx(data: bytes) -> Document:
    import docx

    doc = docx.Document(io.BytesIO(data))
    out: list[str] = []
    for block in doc.iter_inner_content():
        if isinstance(block, docx.table.Table):
            for row in block.rows:
                out.append("| " + " | ".join(cell.text.strip().replace("\n", " ") for cell in row.cells) + " |")
            out.append("")
            continue
        text = block.text.strip()
        if not text:
            continue
        style = (block.style.name if block.style is not None else "") or ""
        if style == "Title":
            out.append(f"# {text}")
        elif style.startswith("Heading ") and style[8:].isdigit():
            out.append("#" * min(int(style[8:]) + 1, 6) + " " + text)
        elif style.startswith("List"):
            out.append(f"- {text}")
        else:
            out.append(text)
        out.append("")
    notes = []
    images = len(doc.inline_shapes)
    if images:
        notes.append(f"{images} embedded image(s) are not shown")
    return Document("\n".join(out).strip(), "docx", notes=notes)


def _pptx(data: bytes) -> Document:
    import pptx

    pres = pptx.Presentation(io.BytesIO(data))
    slides = []
    for n, slide in enumerate(pres.slides, start=1):
        lines = [f"## Slide {n}"]
        for shape in slide.shapes:
            if shape.has_text_frame:
                text = shape.text_frame.text.strip()
                if text:
                    lines.append(text)
            elif getattr(shape, "has_table", False) and shape.has_table:
                for row in shape.table.rows:
                    lines.append("| " + " | ".join(c.text.strip() for c in row.cells) + " |")
        if slide.has_notes_slide:
            notes_text = slide.notes_slide.notes_text_frame.text.strip() if slide.notes_slide.notes_text_frame else ""
            if notes_text:
                lines.append(f"Speaker notes: {notes_text}")
        slides.append("\n".join(lines))
    return Document("\n\n".join(slides), "pptx", len(slides))


def html_to_text(html: str) -> Document:
    """The readable text of a page (trafilatura: main content as Markdown); all visible text when that finds none."""
    import trafilatura

    text = trafilatura.extract(html, output_format="markdown", include_links=True, include_tables=True)
    title = ""
    meta = trafilatura.extract_metadata(html)
    if meta is not None and meta.title:
        title = meta.title.strip()
    if text and text.strip():
        body = text.strip()
        if title and not body.startswith(("# " + title, title)):
            body = f"# {title}\n\n{body}"
        return Document(body, "html", notes=["main content only (menus, ads and footers removed)"])
    import lxml.html  # type: ignore[import-untyped,unused-ignore]  # no stubs in the dev extras

    try:
        root = lxml.html.fromstring(html or "<html></html>")
    except Exception as e:  # an empty or unparseable page
        raise DocumentError(f"not readable HTML ({type(e).__name__})") from e
    for bad in root.xpath("//script|//style|//noscript"):
        bad.drop_tree()
    raw = root.text_content()
    lines = [" ".join(line.split()) for line in raw.splitlines()]
    return Document(
        "\n".join(line for line in lines if line), "html", notes=["no main content found: all visible text"]
    )


__all__ = ["MAX_DOCUMENT_BYTES", "Document", "DocumentError", "decode_text", "extract", "html_to_text", "kind_of"]
