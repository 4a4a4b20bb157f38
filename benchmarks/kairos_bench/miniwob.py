"""``miniwob``: kairos's browser agent on MiniWoB++ tasks, numbered elements vs raw HTML (issue 28).

The bundled model drives the product's agent (:func:`kairos_bench._agent_bench.make_agent`, no
built-in tools, only the ``browser`` toolset of :mod:`kairos.browser.tools`) on MiniWoB++ task pages
served from loopback (:mod:`kairos_bench._miniwob`). Two observation modes, same model, same tasks,
same seeds:

- ``indexed``: the page as :mod:`kairos.browser.page` renders it, interactive elements numbered
  (structured Set-of-Mark); the tools act by ``index``;
- ``raw_html``: the page's HTML; the tools act by CSS ``selector``.

Per episode: the task starts with its seed, the agent gets one user message (the task's instruction
and the page as the mode shows it) and acts; the episode ends when the task judges it (any further
action is moot), after ``MAX_TOOL_CALLS`` tool calls, when the model answers, or after
``EPISODE_TIMEOUT_S``. Success is MiniWoB's raw reward > 0. One Chromium per mode; a fresh kairos
session (trajectory) per episode.

``--limit N``: the first N task types of :data:`~kairos_bench._miniwob.TASKS` (default all 30,
``--quick`` 3); ``--trials N``: seeds per task (default 5, ``--quick`` 1); ``--modes``: the
observation modes. With ``--json`` the rows are checkpointed beside it and a rerun resumes.

Summary: ``success_indexed``, ``success_raw_html``, ``steps_mean`` (tool calls per episode, per
mode too), ``tokens_per_step`` (prompt + completion tokens per tool call, per mode too),
``reverify_catches`` (actions whose expected effect did not happen, as the browser session counts
them), the episodes per mode and the success per task type and mode.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from kairos.agent.events import FinalAnswer, RequestStats, RunError, ToolCallFinished, ToolCallStarted
from kairos.context.session import SessionStore
from kairos.models.base import Model
from kairos_bench import _miniwob
from kairos_bench._agent_bench import make_agent, mean, median
from kairos_bench._checkpoint import Checkpoint
from kairos_bench._local import bench_model, model_name
from kairos_bench._miniwob import TASKS, MiniWoBServer, html_root, outcome, start_episode

MODES = ("indexed", "raw_html")
N_CTX = 8192
MAX_TOOL_CALLS = 8
"""Tool calls per episode; the harness stops the run after this many (MiniWoB tasks need 1-6 actions)."""
EPISODE_TIMEOUT_S = 900.0
"""Wall-clock cap of one episode (the model on two cores; a stuck run must not stall the bench)."""
MAX_TOKENS = 256
LEFT_OUT = frozenset({"confirm_click"})
"""Tools of the browser toolset the bench does not offer: ``confirm_click`` waits for a user's approval, and in
a run with no user it can never run (the quick run's model chose it for a plain "Submit" and was refused)."""
INSTRUCTIONS = (
    "You operate a web page in a browser to do the task the user gives. Act only with the browser tools, one "
    "action per call, on the elements of the page shown to you; each tool result shows the page after the action. "
    "Do every step the task names, in order, each with its own tool call (typing does not press a button). "
    "When the task is done, reply with one short sentence."
)

PUBLISHED: list[dict[str, Any]] = [
    {
        "agent": "CC-Net",
        "model": "ResNet + multimodal transformer + LSTM policy (pixels + DOM, mouse and keyboard), BC + RL on "
        "2.4M human demonstrations",
        "tasks": "all 104 MiniWoB++ tasks",
        "success": "human-level mean (about 0.96 vs human 0.94: number unverified)",
        "source": "Humphreys et al., 'A data-driven approach for learning to control computers', ICML 2022 "
        "(arXiv:2202.08137)",
        "verified": "human-level mean, 104 tasks, 2.4M demonstrations: abstract; the 0.96: not checked",
    },
    {
        "agent": "WebN-T5-3B",
        "model": "T5-XL 3B fine-tuned on 12K MiniWoB demonstrations, HTML input",
        "tasks": "56 tasks",
        "success": 0.484,
        "source": "Gur et al., 'Understanding HTML with Large Language Models', EMNLP Findings 2023 (arXiv:2210.03945)",
        "verified": "not checked (abstract: 50% more tasks with 192x less data than the prior supervised model)",
    },
    {
        "agent": "HTML-T5-XL (WebAgent)",
        "model": "HTML-T5-XL 3B, fine-tuned on 12K demonstrations",
        "tasks": "56 tasks",
        "success": 0.856,
        "source": "Gur et al., 'A Real-World WebAgent with Planning, Long Context Understanding, and Program "
        "Synthesis', ICLR 2024 (arXiv:2307.12856)",
        "verified": "abstract: +18.7% over the prior method; 0.856 from a leaderboard listing, not the paper",
    },
    {
        "agent": "HTML-T5++",
        "model": "HTML-T5-XL 3B, fine-tuned on a rebalanced 347K-demonstration mix",
        "tasks": "MiniWoB base tasks",
        "success": 0.952,
        "source": "Furuta et al., 'Exposing Limitations of Language Model Agents in Sequential-Task Compositions on "
        "the Web' (CompWoB), TMLR 2024 (arXiv:2311.18751)",
        "verified": "abstract: 95.2%, above human level; prompted gpt-3.5-turbo/gpt-4 agents 94.0% on the base tasks",
    },
    {
        "agent": "WebGUM",
        "model": "Flan-T5-XL 3B + ViT, fine-tuned on 347K demonstrations, HTML + screenshot",
        "tasks": "56 tasks",
        "success": 0.942,
        "source": "Furuta et al., 'Multimodal Web Navigation with Instruction-Finetuned Foundation Models', "
        "ICLR 2024 (arXiv:2305.11854)",
        "verified": "abstract: +45.8% over the previous best offline method, above humans; 0.942 not checked",
    },
    {
        "agent": "RCI",
        "model": "InstructGPT-3 + RLHF (gpt-3.5 family; GPT-4 also tried), few-shot prompting with self-critique",
        "tasks": "55 tasks",
        "success": 0.940,
        "source": "Kim, Baldi, McAleer, 'Language Models can Solve Computer Tasks', NeurIPS 2023 (arXiv:2303.17491)",
        "verified": "abstract: state of the art on MiniWoB++ with a handful of demonstrations; 0.940 not checked",
    },
    {
        "agent": "Synapse",
        "model": "gpt-3.5-turbo, trajectory-as-exemplar prompting with exemplar memory",
        "tasks": "64 tasks (exemplars from 48)",
        "success": 0.992,
        "source": "Zheng et al., 'Synapse: Trajectory-as-Exemplar Prompting with Memory for Computer Control', "
        "ICLR 2024 (arXiv:2306.07863)",
        "verified": "abstract: 99.2% over 64 tasks",
    },
]
"""Other agents' MiniWoB++ numbers as their papers report them (task sets differ: not like for like)."""


def _key(mode: str, task: str, seed: int) -> str:
    return f"{mode}/{task}/{seed}"


async def run_episode(
    agent: Any, browser: Any, server: MiniWoBServer, store: SessionStore, task: str, seed: int, mode: str
) -> dict[str, Any]:
    """One seeded episode of ``task`` in ``mode``: the row."""
    started = time.perf_counter()
    page = browser.page
    utterance = await start_episode(page, server.url(task), seed)
    observed = await browser.observe_text()
    caught_before = _catches(browser)
    session = store.new()
    steps = prompt = cached = completion = requests = 0
    calls: list[str] = []
    position: dict[str, int] = {}
    stop, error, answer = "", None, ""
    try:
        async with asyncio.timeout(EPISODE_TIMEOUT_S):
            async for event in agent.run(session, f"{utterance}\n\nThe page:\n{observed}"):
                match event:
                    case RequestStats(usage=usage):
                        requests += 1
                        prompt += usage.prompt_tokens
                        cached += usage.cached_prompt_tokens
                        completion += usage.completion_tokens
                    case ToolCallStarted(call=call):
                        steps += 1
                        position[call.id] = len(calls)
                        calls.append(f"{call.name}({call.arguments[:120]})")
                    case ToolCallFinished(call=call, result=result):
                        if (at := position.get(call.id)) is not None:  # two calls in one reply finish in turn
                            calls[at] += " -> " + _short(getattr(result, "content", result))
                        if (await outcome(page)).done:
                            stop = "task_done"
                            break
                        if steps >= MAX_TOOL_CALLS:
                            stop = "max_tool_calls"
                            break
                    case FinalAnswer(text=text, stop_reason=reason):
                        stop, answer = reason, text[:200]
                    case RunError(message=message):
                        stop, error = "error", message[:300]
    except TimeoutError:
        stop = "timeout"
    finally:
        await session.aclose()
    got = await outcome(page)
    return {
        "key": _key(mode, task, seed),
        "mode": mode,
        "task": task,
        "seed": seed,
        "utterance": utterance,
        "success": got.success,
        "done": got.done,
        "reward": got.raw_reward,
        "reason": got.reason,
        "steps": steps,
        "model_calls": requests,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_prompt_tokens": cached,
        "reverify_catches": _catches(browser) - caught_before,
        "observation_chars": len(observed),
        "stop": stop,
        "error": error,
        "answer": answer,
        "calls": calls,
        "seconds": round(time.perf_counter() - started, 2),
    }


def _catches(browser: Any) -> int:
    stats = getattr(browser, "stats", None)
    if isinstance(stats, dict):
        return int(stats.get("reverify_catches", 0))
    return int(getattr(stats, "reverify_catches", 0) or 0)


_WRAPPER = re.compile(r"^\[[^\]]*\]\s*<external_content[^>]*>\s*|\s*</external_content>\s*$")


def _short(value: Any, limit: int = 200) -> str:
    """A tool result on one line, without the external-content wrapper, cut at ``limit``."""
    text = _WRAPPER.sub("", " ".join(str(value).split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def run_mode(
    llm: Model,
    mode: str,
    tasks: Sequence[str],
    seeds: Sequence[int],
    root: Path,
    server: MiniWoBServer,
    checkpoint: Checkpoint,
    console: Console,
    bar: Progress,
    progress: Any,
) -> None:
    """Every task × seed of one mode in one browser, rows added to ``checkpoint``."""
    from kairos.browser.config import BrowserConfig
    from kairos.browser.session import BrowserSession
    from kairos.browser.tools import browser_tools

    todo = [(t, s) for t in tasks for s in seeds if _key(mode, t, s) not in checkpoint.done]
    if not todo:
        return
    ws, state = root / mode / "ws", root / mode / "state"
    ws.mkdir(parents=True, exist_ok=True)
    # no user to approve a "Send" (email-inbox-forward-nl); raw_html's click never checks labels anyway
    config = BrowserConfig(mode=mode, allow_hosts=("127.0.0.1",), screenshots=False, confirm_irreversible=False)
    browser = BrowserSession(config, workspace=ws, state_dir=state, session_id=f"miniwob-{mode}")
    await browser.start()
    store = SessionStore(ws, state_dir=state)
    try:
        tools = [t for t in browser_tools(browser) if t.name not in LEFT_OUT]
        agent = make_agent(llm, ws, tools, INSTRUCTIONS, builtins=())
        agent.max_iterations = MAX_TOOL_CALLS + 1
        agent.max_tokens = MAX_TOKENS
        for task, seed in todo:
            bar.update(progress, description=f"miniwob {mode} {task} seed {seed}")
            row = await run_episode(agent, browser, server, store, task, seed, mode)
            checkpoint.add(row)
            verdict = "ok" if row["success"] else "FAIL"
            console.print(
                f"  {mode:8s} {task:24s} {seed:2d} {verdict:4s} {row['seconds']:6.1f} s "
                f"{row['steps']} steps {row['prompt_tokens']} tok  {'; '.join(row['calls'])[:200]}"
            )
            bar.advance(progress)
    finally:
        store.close()
        await browser.close()


async def run_all(
    llm: Model,
    modes: Sequence[str],
    tasks: Sequence[str],
    seeds: Sequence[int],
    root: Path,
    checkpoint: Checkpoint,
    console: Console,
) -> None:
    total = len(modes) * len(tasks) * len(seeds)
    done = sum(1 for m in modes for t in tasks for s in seeds if _key(m, t, s) in checkpoint.done)
    with MiniWoBServer() as server, Progress(console=console, transient=False) as bar:
        progress = bar.add_task("miniwob", total=total, completed=done)
        for mode in modes:
            await run_mode(llm, mode, tasks, seeds, root, server, checkpoint, console, bar, progress)


def summarise(rows: Sequence[dict[str, Any]], modes: Sequence[str], tasks: Sequence[str]) -> dict[str, Any]:
    """The five headline keys, per-mode variants and per-task success."""

    def success(sel: Sequence[dict[str, Any]]) -> float | None:
        return mean([1.0 if r["success"] else 0.0 for r in sel])

    def per_step(sel: Sequence[dict[str, Any]]) -> float | None:
        steps = sum(r["steps"] for r in sel)
        tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in sel)
        return round(tokens / steps, 1) if steps else None

    summary: dict[str, Any] = {}
    for mode in MODES:
        summary[f"success_{mode}"] = success([r for r in rows if r["mode"] == mode]) if mode in modes else None
    summary["steps_mean"] = mean([r["steps"] for r in rows])
    summary["tokens_per_step"] = per_step(rows)
    summary["reverify_catches"] = sum(r["reverify_catches"] for r in rows)
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        summary[f"n_{mode}"] = len(mine)
        summary[f"steps_mean_{mode}"] = mean([r["steps"] for r in mine])
        summary[f"tokens_per_step_{mode}"] = per_step(mine)
        summary[f"reverify_catches_{mode}"] = sum(r["reverify_catches"] for r in mine)
        summary[f"median_seconds_{mode}"] = median([r["seconds"] for r in mine])
    summary["per_task"] = {
        task: {mode: success([r for r in rows if r["mode"] == mode and r["task"] == task]) for mode in modes}
        for task in tasks
    }
    return summary


def _code_digest() -> str:
    """A short hash of what the rows depend on besides the model: kairos.browser and this bench's two modules.

    Not all of kairos: a change elsewhere (another bench, the CLI) must not stop a long run from resuming.
    """
    import kairos.browser

    browser = Path(kairos.browser.__file__ or "").parent
    files = sorted([*browser.glob("*.py"), *browser.glob("*.js")]) + [Path(__file__), Path(_miniwob.__file__ or "")]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def run(
    console: Console | None = None,
    quick: bool = False,
    trials: int | None = None,
    limit: int | None = None,
    model: str | Model | None = None,
    modes: Sequence[str] | str | None = None,
    checkpoint: Path | None = None,
    tasks: Sequence[str] | str | None = None,
    **_: Any,
) -> dict[str, Any]:
    """MiniWoB++ on ``model`` (default the bundled ``local``): ``limit`` task types × ``trials`` seeds × modes.

    ``tasks``: these task types instead of the first ``limit`` of :data:`TASKS` (from Python; not a CLI flag).
    """
    console = console or Console()
    n_seeds = trials if trials is not None else (1 if quick else 5)
    if tasks is not None:
        chosen_tasks = [t.strip() for t in tasks.split(",")] if isinstance(tasks, str) else list(tasks)
    else:
        chosen_tasks = list(TASKS[: limit if limit is not None else (3 if quick else len(TASKS))])
    if unknown := [t for t in chosen_tasks if not (html_root() / "miniwob" / f"{t}.html").is_file()]:
        raise ValueError(f"MiniWoB++ has no task(s) {', '.join(unknown)}")
    seeds = list(range(n_seeds))
    chosen_modes = [m.strip() for m in modes.split(",")] if isinstance(modes, str) else list(modes or MODES)
    if unknown := [m for m in chosen_modes if m not in MODES]:
        raise ValueError(f"unknown miniwob mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}")
    chosen: str | Model = model if model is not None else "local"
    fingerprint = {
        "model": model_name(chosen),
        "max_tool_calls": MAX_TOOL_CALLS,
        "instructions": INSTRUCTIONS,
        "code": _code_digest(),
    }
    store = Checkpoint(checkpoint, fingerprint, what="the same model and code")
    with bench_model(chosen, N_CTX, console) as llm, tempfile.TemporaryDirectory() as d:
        asyncio.run(run_all(llm, chosen_modes, chosen_tasks, seeds, Path(d), store, console))
    rows = [
        store.done[_key(m, t, s)]
        for m in chosen_modes
        for t in chosen_tasks
        for s in seeds
        if _key(m, t, s) in store.done
    ]
    return {
        "bench": "miniwob",
        "params": {
            "model": model_name(chosen),
            "n_ctx": N_CTX,
            "modes": chosen_modes,
            "tasks": chosen_tasks,
            "seeds": seeds,
            "max_tool_calls": MAX_TOOL_CALLS,
            "max_tokens": MAX_TOKENS,
            "episode_timeout_s": EPISODE_TIMEOUT_S,
            "instructions": INSTRUCTIONS,
            "agent": "build_agent with no built-in tools + kairos.browser.tools.browser_tools without "
            + ", ".join(sorted(LEFT_OUT))
            + "; skills off",
            "browser": "one Chromium per mode, [browser] allow_hosts 127.0.0.1, screenshots off, "
            "confirm_irreversible off (no user to approve; the same in both modes)",
            "message": "<utterance>\\n\\nThe page:\\n<the mode's observation>",
            "environment": "miniwob==1.1.0 HTML on 127.0.0.1, Debian Chromium via Playwright, EPISODE_MAX_TIME 1 h, "
            "the reward display hidden, success = raw reward > 0",
            "published": PUBLISHED,
        },
        "rows": rows,
        "summary": summarise(rows, chosen_modes, chosen_tasks),
    }


if __name__ == "__main__":
    import json
    import sys

    out = run(quick="--quick" in sys.argv)
    print(json.dumps(out["summary"], indent=2))
