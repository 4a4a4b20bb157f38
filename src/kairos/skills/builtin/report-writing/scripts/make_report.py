"""Fill the report-writing skill's Markdown template with exact statistics of a CSV file.

Standard library only, so it runs with any Python 3.11+ and no network. Decimal arithmetic keeps
totals exact; the rounding rules are in the skill's reference.md.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from string import Template

TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "report.md"


class UsageError(Exception):
    """Bad input: reported on stderr with exit status 2."""


@dataclass
class Column:
    name: str
    values: list[Decimal]
    places: int
    """Decimals in the column's most precise value: totals keep them, means keep at least 2."""


def parse_number(text: str) -> Decimal | None:
    try:
        d = Decimal(text.strip())
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def places_of(d: Decimal) -> int:
    exp = d.as_tuple().exponent
    return -exp if isinstance(exp, int) and exp < 0 else 0


def fmt(d: Decimal, places: int) -> str:
    q = d.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return f"{q:,.{places}f}"


def median(values: Sequence[Decimal]) -> Decimal:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def read_table(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            rows = [{k: (v or "") for k, v in row.items() if k is not None} for row in reader]
            header = list(reader.fieldnames or [])
    except FileNotFoundError as e:
        raise UsageError(f"{path} does not exist") from e
    except (UnicodeDecodeError, csv.Error) as e:
        raise UsageError(f"{path} is not a UTF-8 CSV file: {e}") from e
    if not header:
        raise UsageError(f"{path} has no header row")
    return header, rows


def numeric_columns(header: list[str], rows: list[dict[str, str]]) -> dict[str, Column]:
    out = {}
    for name in header:
        cells = [r.get(name, "").strip() for r in rows]
        cells = [c for c in cells if c]
        nums = [parse_number(c) for c in cells]
        if cells and all(n is not None for n in nums):
            values = [n for n in nums if n is not None]
            out[name] = Column(name, values, max(places_of(v) for v in values))
    return out


def pick(requested: list[str] | None, available: list[str], what: str) -> list[str]:
    if not requested:
        return available
    missing = [c for c in requested if c not in available]
    if missing:
        raise UsageError(f"{', '.join(missing)} is not a {what} column; {what} columns: {', '.join(available) or '-'}")
    return requested


def overview_table(columns: list[Column]) -> str:
    lines = ["| column | count | total | mean | median | min | max |", "|---|---:|---:|---:|---:|---:|---:|"]
    for c in columns:
        p, avg_p = c.places, max(c.places, 2)
        total = sum(c.values, Decimal(0))
        mean = total / len(c.values)
        lines.append(
            f"| {c.name} | {len(c.values)} | {fmt(total, p)} | {fmt(mean, avg_p)} | "
            f"{fmt(median(c.values), avg_p)} | {fmt(min(c.values), p)} | {fmt(max(c.values), p)} |"
        )
    return "\n".join(lines)


def group_totals(rows: list[dict[str, str]], group: str, value: str) -> dict[str, tuple[int, Decimal]]:
    out: dict[str, tuple[int, Decimal]] = {}
    for r in rows:
        key = r.get(group, "").strip() or "(empty)"
        n, total = out.get(key, (0, Decimal(0)))
        cell = r.get(value, "").strip()
        out[key] = (n + 1, total + (parse_number(cell) or Decimal(0)) if cell else total)
    return out


def breakdown(rows: list[dict[str, str]], groups: list[str], columns: list[Column]) -> tuple[str, list[str]]:
    """The breakdown tables and one highlight line per grouping column."""
    if not groups:
        return "No text column with few distinct values to group by.", []
    first = columns[0]
    blocks, highlights = [], []
    for g in groups:
        per = {c.name: group_totals(rows, g, c.name) for c in columns}
        grand = {c.name: sum(c.values, Decimal(0)) for c in columns}
        order = sorted(per[first.name].items(), key=lambda kv: (-kv[1][1], kv[0]))
        head = "| " + g + " | rows | " + " | ".join(f"{c.name} total | {c.name} share" for c in columns) + " |"
        lines = [head, "|---|---:|" + "---:|---:|" * len(columns)]
        for key, (n, _) in order:
            cells = []
            for c in columns:
                total = per[c.name][key][1]
                share = total / grand[c.name] * 100 if grand[c.name] else Decimal(0)
                cells.append(f"{fmt(total, c.places)} | {fmt(share, 1)}%")
            lines.append(f"| {key} | {n} | " + " | ".join(cells) + " |")
        blocks.append(f"### By {g}\n\n" + "\n".join(lines))
        top, (_, top_total) = order[0]
        share = top_total / grand[first.name] * 100 if grand[first.name] else Decimal(0)
        highlights.append(
            f"- Largest {g} by {first.name}: {top} ({fmt(top_total, first.places)}, {fmt(share, 1)}% of the total)"
        )
        for c in columns:  # every group's total on one line: the figure a reader asks for most
            parts = [f"{key} {fmt(per[c.name][key][1], c.places)}" for key, _ in order]
            highlights.append(f"- Total {c.name} by {g}: " + "; ".join(parts))
    return "\n\n".join(blocks), highlights


def build_report(
    path: Path,
    *,
    title: str | None = None,
    values: list[str] | None = None,
    groups: list[str] | None = None,
    template: Path = TEMPLATE,
    max_groups: int = 12,
) -> str:
    """The filled report text.

    Raises:
        UsageError: unreadable file, no numeric column, or an unknown column was requested.
    """
    header, rows = read_table(path)
    numeric = numeric_columns(header, rows)
    if not numeric:
        raise UsageError(f"{path} has no numeric column (every non-empty value a number); nothing to total")
    value_names = pick(values, list(numeric), "numeric")
    text_cols = [h for h in header if h not in numeric]
    distinct = {h: len({r.get(h, "").strip() for r in rows}) for h in text_cols}
    # a column whose values never repeat (ids, dates of a daily log) makes one-row groups: no breakdown
    auto = [h for h in text_cols if 2 <= distinct[h] <= max_groups and distinct[h] < len(rows)]
    group_names = pick(groups, auto if not groups else text_cols, "text")
    columns = [numeric[v] for v in value_names]
    tables, highlights = breakdown(rows, group_names, columns)
    key = [f"- Total {c.name}: {fmt(sum(c.values, Decimal(0)), c.places)} ({len(c.values)} values)" for c in columns]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    try:
        tpl = Template(template.read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"cannot read the template {template}: {e.strerror or e}") from e
    return tpl.substitute(
        title=title or f"Report: {path.name}",
        source=path.as_posix(),
        rows=len(rows),
        digest=digest,
        key_figures="\n".join(key + highlights),
        overview=overview_table(columns),
        breakdown=tables,
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write a Markdown report with exact statistics of a CSV file.")
    ap.add_argument("csv", type=Path)
    ap.add_argument("--out", type=Path, default=Path("report.md"))
    ap.add_argument("--title")
    ap.add_argument("--value", action="append", help="numeric column to report on (repeatable)")
    ap.add_argument("--group-by", action="append", help="text column to break values down by (repeatable)")
    ap.add_argument("--template", type=Path, default=TEMPLATE)
    ap.add_argument("--max-groups", type=int, default=12)
    ap.add_argument("--force", action="store_true", help="replace an existing report")
    args = ap.parse_args(argv)
    try:
        text = build_report(
            args.csv,
            title=args.title,
            values=args.value,
            groups=args.group_by,
            template=args.template,
            max_groups=args.max_groups,
        )
        if args.out.exists() and not args.force:
            if args.out.read_text(encoding="utf-8", errors="replace") == text:  # a rerun: nothing to do
                print(text.rstrip("\n"))
                print(f"\n{args.out} is already up to date (same data, same options); nothing rewritten")
                return 0
            raise UsageError(
                f"{args.out} already exists with different content; choose another --out, or add --force to replace it"
            )
    except UsageError as e:
        print(f"make_report.py: error: {e}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text.rstrip("\n"))
    print(f"\nWrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
