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


def injection_table(data: dict[str, Any]) -> str:
    cells = [r for r in data["rows"] if r.get("kind") == "asr"]
    defences = list(dict.fromkeys(c["defence"] for c in cells))
    lines = ["| attack \\ defence | " + " | ".join(defences) + " |", "| --- |" + " --- |" * len(defences)]
    for attack in dict.fromkeys(c["attack"] for c in cells):
        row = {c["defence"]: c for c in cells if c["attack"] == attack}
        lines.append(
            f"| {attack} | " + " | ".join(f"{row[d]['asr']:.2f} ({row[d]['trials']})" for d in defences) + " |"
        )
    return "Attack success rate (trials per cell):\n\n" + "\n".join(lines)


def per_group_table(data: dict[str, Any], key: str, columns: dict[str, str]) -> str:
    """Means per ``key`` value (booleans as rates) of the ``columns`` of every row."""
    rows = [r for r in data["rows"] if key in r]
    lines = [f"| {key} | runs | " + " | ".join(columns.values()) + " |", "| --- | --- |" + " --- |" * len(columns)]
    for group in dict.fromkeys(r[key] for r in rows):
        rs = [r for r in rows if r[key] == group]
        values = [[float(r[c]) for r in rs if r.get(c) is not None] for c in columns]
        cells = [_fmt(statistics.mean(v)) if v else "–" for v in values]
        lines.append(f"| {group} | {len(rs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


SPECIAL = {
    "kv-cache": kv_cache_table,
    "overhead": overhead_table,
    "injection": injection_table,
    "status-bar": lambda d: per_group_table(d, "group", {"violation": "violation rate", "prompt_tokens": "prompt tok"}),
    "status-techniques": lambda d: per_group_table(
        d, "config", {"success": "success", "iterations": "iterations", "tool_errors": "tool errors"}
    ),
    "skills": lambda d: per_group_table(
        d,
        "kind",
        {"success": "success", "loaded_skill": "loaded a skill", "iterations": "iterations", "wall_s": "wall s"},
    ),
    "compression": lambda d: per_group_table(
        d,
        "strategy",
        {
            "facts_kept": "facts kept",
            "facts_found": "facts found",
            "success": "success",
            "iterations": "iterations",
            "total_prompt_tokens": "prompt tokens",
            "compression_ratio": "compression ratio",
        },
    ),
}


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "bench-results")
    for path in sorted(root.glob("*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or "bench" not in data:  # per-case details beside a result (bfcl.details)
            continue
        print(f"### `{data['bench']}` ({path})\n")
        if data["bench"] in SPECIAL:
            print(SPECIAL[data["bench"]](data) + "\n")
        print(summary_table(data) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
