"""Print the README's result tables from bench-results/*.json, so the README quotes the JSON exactly.

Usage: python scripts/bench_tables.py [bench-results]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def summary_table(data: dict[str, Any]) -> str:
    lines = ["| key | value |", "| --- | --- |"]
    lines += [f"| `{k}` | {_fmt(v)} |" for k, v in data["summary"].items()]
    return "\n".join(lines)


def kv_cache_table(data: dict[str, Any]) -> str:
    rows = [r for r in data["rows"] if "turn" in r]
    lines = [
        "| variant | requests (turns 2-6) | prompt tokens | cached | perfect-reusable | cached share | median TTFT s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for variant in dict.fromkeys(r["variant"] for r in rows):
        later = [r for r in rows if r["variant"] == variant and r["turn"] >= 2]
        prompt = sum(r["prompt_tokens"] for r in later)
        cached = sum(r["cached_tokens"] for r in later)
        perfect = sum(r["perfect_reusable_tokens"] for r in later)
        ttft = statistics.median(r["ttft_s"] for r in later)
        lines.append(
            f"| {variant} | {len(later)} | {prompt} | {cached} | {perfect} | {cached / prompt:.1%} | {ttft:.2f} |"
        )
    return "\n".join(lines)


def overhead_table(data: dict[str, Any]) -> str:
    sizes = data["params"]["sizes"]
    lines = ["| harness | " + " | ".join(f"{n} msgs" for n in sizes) + " |", "| --- |" + " --- |" * len(sizes)]
    for harness in dict.fromkeys(r["harness"] for r in data["rows"]):
        cells = [
            next(r["median_ms"] for r in data["rows"] if r["harness"] == harness and r["history_messages"] == n)
            for n in sizes
        ]
        lines.append(f"| {harness} | " + " | ".join(f"{c:.2f} ms" for c in cells) + " |")
    return "\n".join(lines)


SPECIAL = {"kv-cache": kv_cache_table, "overhead": overhead_table}


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "bench-results")
    for path in sorted(root.glob("*.json")):
        data = json.loads(path.read_text())
        print(f"### `{data['bench']}` ({path})\n")
        if data["bench"] in SPECIAL:
            print(SPECIAL[data["bench"]](data) + "\n")
        print(summary_table(data) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
