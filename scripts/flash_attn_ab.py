"""An alternating A/B of llama.cpp's flash attention on the dispatch build (4 pairs), beside `kairos bench llama-build`.

The bench's settings phase runs each setting once per repeat, minutes apart; on a shared 2-core machine that
spread is larger than the effect. Here each pair runs back to back.

Usage: python scripts/flash_attn_ab.py bench-results/flash-attn-ab.json   (one model process at a time)
"""

from __future__ import annotations

import json
import statistics
import sys

from kairos_bench._flavours import available, run_child

PAIRS = 4
SETTINGS = {"default": [], "fa": ["--flash-attn"]}


def main(out: str) -> None:
    """Run the pairs and write the JSON to ``out``."""
    flavour = next(f for f in available() if f.name == "dispatch")
    rows = []
    for r in range(PAIRS):
        for label, args in SETTINGS.items():
            rows.append({"setting": label, "repeat": r + 1, **run_child(flavour, ["speed", *args])})
            print(rows[-1], file=sys.stderr, flush=True)
    summary = {
        f"{key}_{label}": statistics.median(row[key] for row in rows if row["setting"] == label)
        for label in SETTINGS
        for key in ("prompt_tok_s_512", "prompt_tok_s_2048", "gen_tok_s")
    }
    params = {"flavour": "dispatch", "pairs": PAIRS, "order": "alternating"}
    with open(out, "w") as f:
        json.dump({"bench": "flash-attn-ab", "params": params, "rows": rows, "summary": summary}, f, indent=1)
    print(summary)


if __name__ == "__main__":
    main(sys.argv[1])
