"""``pii``: recall and precision of the PII scrubber's regex layer, and of regex + the local model.

``data/pii_labelled.jsonl``: 135 short texts (user messages and external content: emails, logs,
tool output), every PII span labelled with its type; 53 have none, among them tricky negatives
(version numbers, order ids, ISBNs, dates that are not birthdays, tracking numbers, code).

A predicted span matches a labelled one when they overlap by at least half of the shorter span.
Rows per layer: span-level recall and precision with the type required to agree (``typed``) and
with any type (``untyped``), per type, and what the default memory policy did: the share of spans
it must hide that are gone from the output (``masked_required``), the share it must keep that are
still there verbatim (``kept_required``), and the share of PII-free texts left unchanged.
Detection is measured per type regardless of the policy; the policy figures are separate.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from rich.console import Console

from kairos.memory.pii import MEMORY_POLICY, PII_TYPES, Detection, PiiScrubber, PiiType
from kairos.models.base import Model
from kairos_bench._local import bench_model, model_name

DATA = Path(__file__).with_name("data") / "pii_labelled.jsonl"


@dataclass(frozen=True, slots=True)
class Labelled:
    """One text of the set and its labelled spans (start, end, type)."""

    id: str
    text: str
    external: bool
    spans: tuple[tuple[int, int, str], ...]


def load(path: Path = DATA) -> list[Labelled]:
    """The labelled set; a span whose offsets do not match its text is an error (the file is wrong)."""
    out: list[Labelled] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        text = rec["text"]
        spans = []
        for s in rec["spans"]:
            if text[s["start"] : s["end"]] != s["text"] or s["type"] not in PII_TYPES:
                raise ValueError(f"{path}:{n}: span {s} does not match its text or type")
            spans.append((s["start"], s["end"], s["type"]))
        out.append(Labelled(rec["id"], text, rec.get("source") == "external", tuple(spans)))
    return out


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """At least half of the shorter span is shared."""
    shared = min(a[1], b[1]) - max(a[0], b[0])
    return shared > 0 and shared * 2 >= min(a[1] - a[0], b[1] - b[0])


def score(items: list[Labelled], found: list[tuple[Detection, ...]], scrubbed: list[str]) -> dict[str, Any]:
    """Span recall and precision (typed, untyped, per type) and the default policy's effect."""
    tp_gold: Counter[str] = Counter()
    n_gold: Counter[str] = Counter()
    tp_pred: Counter[str] = Counter()
    n_pred: Counter[str] = Counter()
    untyped_gold = untyped_pred = 0
    must_mask = masked = must_keep = kept = clean = clean_unchanged = 0
    for item, dets, out in zip(items, found, scrubbed, strict=True):
        for start, end, typ in item.spans:
            n_gold[typ] += 1
            tp_gold[typ] += any(d.type == typ and overlaps((start, end), (d.start, d.end)) for d in dets)
            untyped_gold += any(overlaps((start, end), (d.start, d.end)) for d in dets)
            span = item.text[start:end]
            if MEMORY_POLICY.action(cast(PiiType, typ), external=item.external) == "keep":
                must_keep += 1
                kept += span in out
            else:
                must_mask += 1
                masked += span not in out
        for d in dets:
            n_pred[d.type] += 1
            tp_pred[d.type] += any(t == d.type and overlaps((s, e), (d.start, d.end)) for s, e, t in item.spans)
            untyped_pred += any(overlaps((s, e), (d.start, d.end)) for s, e, _ in item.spans)
        if not item.spans:
            clean += 1
            clean_unchanged += out == item.text

    def ratio(a: int, b: int) -> float | None:
        return round(a / b, 4) if b else None

    gold, pred = sum(n_gold.values()), sum(n_pred.values())
    return {
        "spans": gold,
        "predicted": pred,
        "recall": ratio(sum(tp_gold.values()), gold),
        "precision": ratio(sum(tp_pred.values()), pred),
        "recall_untyped": ratio(untyped_gold, gold),
        "precision_untyped": ratio(untyped_pred, pred),
        "per_type": {
            t: {
                "spans": n_gold[t],
                "predicted": n_pred[t],
                "recall": ratio(tp_gold[t], n_gold[t]),
                "precision": ratio(tp_pred[t], n_pred[t]),
            }
            for t in PII_TYPES
            if n_gold[t] or n_pred[t]
        },
        "policy": "memory default",
        "masked_required": ratio(masked, must_mask),
        "must_mask": must_mask,
        "kept_required": ratio(kept, must_keep),
        "must_keep": must_keep,
        "clean_texts_unchanged": ratio(clean_unchanged, clean),
    }


async def _with_model(scrubber: PiiScrubber, items: list[Labelled], console: Console) -> tuple[dict[str, Any], int]:
    found: list[tuple[Detection, ...]] = []
    outs: list[str] = []
    lat: list[float] = []
    errors = 0
    for n, item in enumerate(items, 1):
        t0 = time.perf_counter()
        result = await scrubber.detect(item.text, external=item.external)
        lat.append(time.perf_counter() - t0)
        errors += result.model_error is not None
        found.append(result.detections)
        outs.append(result.text)
        if n % 20 == 0:
            console.print(f"pii: {n}/{len(items)} texts through the model")
    row = score(items, found, outs)
    row["latency_mean_s"] = round(statistics.fmean(lat), 3) if lat else 0.0
    row["latency_p95_s"] = round(sorted(lat)[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))], 3) if lat else 0.0
    return row, errors


def pick(items: list[Labelled], limit: int | None) -> list[Labelled]:
    """``limit`` texts spread evenly over the set (it is ordered by kind), or all."""
    if not limit or limit >= len(items):
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def run(
    console: Console | None = None,
    *,
    quick: bool = False,
    limit: int | None = None,
    no_model: bool = False,
    model: str = "local",
    llm: Model | None = None,
    timeout_s: float = 60.0,
    data: Path | None = None,
) -> dict[str, Any]:
    """Score the regex layer, then (unless ``no_model``) regex + ``llm`` or the named local model.

    ``data``: a labelled JSONL file, or a folder holding ``pii_labelled.jsonl``.
    """
    console = console or Console(stderr=True)
    path = data / DATA.name if data is not None and data.is_dir() else (data or DATA)
    items = pick(load(path), 30 if quick and not limit else limit)
    regex = PiiScrubber(None)
    scrubbed = [regex.prefilter(i.text, external=i.external) for i in items]
    rows: list[dict[str, Any]] = [
        {"layer": "regex", **score(items, [s.detections for s in scrubbed], [s.text for s in scrubbed])}
    ]
    model_errors = 0
    if no_model:
        rows.append({"layer": "regex+model", "status": "not run (--no-model)"})
    else:
        with bench_model(llm or model, 4096, console) as loaded:
            row, model_errors = asyncio.run(_with_model(PiiScrubber(loaded, timeout_s=timeout_s), items, console))
        rows.append({"layer": "regex+model", "model_failures": model_errors, **row})
    summary: dict[str, Any] = {}
    for row in rows:
        key = row["layer"].replace("+", "_")
        if "recall" in row:
            summary |= {
                f"recall_{key}": row["recall"],
                f"precision_{key}": row["precision"],
                f"masked_required_{key}": row["masked_required"],
                f"kept_required_{key}": row["kept_required"],
            }
    summary["target_recall"] = 0.95
    params = {
        "data": str(path),
        "texts": len(items),
        "texts_without_pii": sum(1 for i in items if not i.spans),
        "model": None if no_model else model_name(llm or model),
        "timeout_s": timeout_s,
        "match": "overlap of at least half of the shorter span",
        "policy": "kairos.memory.pii.MEMORY_POLICY",
    }
    return {"bench": "pii", "params": params, "rows": rows, "summary": summary}
