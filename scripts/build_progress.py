"""Turn `pip install -v` output into a short progress display (compile steps, errors kept).

Used by the Makefile so that building llama.cpp (minutes) shows progress, not silence.
"""

from __future__ import annotations

import re
import sys

STEP = re.compile(r"^\s*\[(\d+)/(\d+)\]")
KEEP = re.compile(r"(error|Error|ERROR|Successfully installed|Requirement already satisfied: llama|Using cached)")


def main() -> int:
    last = -1
    tail: list[str] = []
    for line in sys.stdin:
        tail = (tail + [line])[-40:]
        m = STEP.match(line)
        if m:
            done, total = int(m.group(1)), int(m.group(2))
            pct = 100 * done // total
            if pct != last:
                last = pct
                print(f"\r    compiling llama.cpp: {done}/{total} ({pct}%)", end="", flush=True)
        elif KEEP.search(line) and "-Werror" not in line and "warning" not in line:
            if last >= 0:
                print()
                last = -1
            print("    " + line.strip()[:200], flush=True)
    print()
    if tail and any("ERROR" in line for line in tail):
        sys.stdout.writelines(tail)
    return 0


if __name__ == "__main__":
    sys.exit(main())
