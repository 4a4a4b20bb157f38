"""Which check tells a memory the user said from one they did not: exact span, token overlap, or the model.

Reads the labelled candidates (``benchmarks/kairos_bench/data/memory_support_labelled.jsonl``: notes and
extractor outputs of the bundled model on memory-eval conversations and the issue-24 peanut sessions,
each labelled by hand: ``U`` the user said it, ``C`` the assistant said it and the user's next message
explicitly confirmed it, ``T`` true but only the other party said it, ``N`` not said, wrong, advice or a
pleasantry). "Should store" is U or C. For each check: how many it accepts of each label, precision and
recall of "should store".

    python scripts/memory_support_study.py [--model local] [--json PATH]

``--model`` adds the model's own judgement (yes/no scored as the first token of the reply, one prompt
evaluation per candidate, the conversation's prefix reused): run it under ``flock /work/logs/model.lock``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from kairos.memory.support import support
from kairos.models.types import Message
from kairos_bench._memory_eval_truth import said_by_user, said_exactly

ROOT = Path(__file__).resolve().parents[1]
LABELLED = ROOT / "benchmarks" / "kairos_bench" / "data" / "memory_support_labelled.jsonl"
DATA = ROOT / ".." / "shared" / "datasets" / "memory-eval"


def conversations() -> dict[str, list[list[dict[str, str]]]]:
    """Every memory-eval case's conversations, by test id."""
    out = {}
    for f in sorted(DATA.glob("layer*/*.yaml")):
        case = yaml.safe_load(f.read_text())
        out[case["test_id"]] = [h["messages"] for h in case["conversation_histories"]]
    return out


def session(item: dict[str, Any], convs: dict[str, list[list[dict[str, str]]]]) -> list[Message]:
    """The messages a labelled candidate was taken from."""
    pairs = item.get("messages") or [[m["role"], m["content"]] for m in convs[item["test_id"]][item["conversation"]]]
    return [Message.assistant(t) if r == "assistant" else Message.user(t) for r, t in pairs]


def overlap(candidate: str, messages: list[Message]) -> bool:
    """The product's check (:func:`kairos.memory.support.support`)."""
    return support(candidate, messages) is not None


def score(name: str, verdicts: list[bool], labels: list[str]) -> dict[str, Any]:
    """Accepted per label, precision and recall of "should store" (U or C)."""
    accepted = Counter(lab for v, lab in zip(verdicts, labels, strict=True) if v)
    total = Counter(labels)
    good = accepted["U"] + accepted["C"]
    should = total["U"] + total["C"]
    return {
        "check": name,
        "accepted": {k: f"{accepted[k]}/{total[k]}" for k in "UCTN"},
        "precision": round(good / sum(accepted.values()), 3) if accepted else None,
        "recall": round(good / should, 3) if should else None,
        "false_accepted": accepted["T"] + accepted["N"],
    }


async def main() -> int:
    """Run every check on the labelled set and print one JSON line per check."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="also ask this model (e.g. local)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    convs = conversations()
    items = [json.loads(line) for line in LABELLED.read_text().splitlines() if line.strip()]
    sessions = [session(i, convs) for i in items]
    labels = [i["label"] for i in items]
    results = [
        score("exact span", [said_exactly(i["candidate"], s) for i, s in zip(items, sessions, strict=True)], labels),
        score(
            "token overlap (product)",
            [overlap(i["candidate"], s) for i, s in zip(items, sessions, strict=True)],
            labels,
        ),  # fmt: skip
    ]
    seconds = None
    if args.model:
        from kairos.models import load_model

        model = load_model(args.model)
        t0 = time.perf_counter()
        verdicts = [await said_by_user(model, i["candidate"], s) is True for i, s in zip(items, sessions, strict=True)]
        seconds = round(time.perf_counter() - t0, 1)
        results.append(score(f"model entailment ({args.model})", verdicts, labels))
    for r in results:
        print(json.dumps(r))
    if seconds is not None:
        print(f"model judge: {seconds} s for {len(items)} candidates", file=sys.stderr)
    if args.json:
        out = {"labelled": str(LABELLED.relative_to(ROOT)), "items": len(items), "labels": Counter(labels),
               "results": results, "model_seconds": seconds}  # fmt: skip
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
