"""``skills`` (book Exp 2-6 in small): a task only a skill's script can do, and its loading trace.

Each skill trial gets a fresh workspace holding ``data/sales.csv`` (generated from the trial's
seed: 60 rows of region, product, units and revenue) and asks, in one of four phrasings, for a
report on it plus one region's exact total revenue. The skill is never named. Success needs
both: a report written by the ``report-writing`` skill's script (it carries the data file's
sha256 and the script's footer, which only that script writes; checked exactly against totals
the bench computes itself with ``Decimal``) and the exact total in the answer.

The agent is the product's default (system prompt, built-in tools) plus the ``Skills`` extension
with only the built-in skills, so the model must route between ``report-writing``,
``changelog`` and no skill. Control trials ask things no skill is for, to count false
activations. Per trial the trace is read back from the stored trajectory: ``catalog`` (the
harness appended the catalog) → ``load_skill`` → ``read_skill_file`` (optional) →
``bash:script`` (the skill's script ran) → ``answer``.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import json
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.agent import Agent
from kairos.agent.events import FinalAnswer, RequestStats, RunError
from kairos.app import default_system_prompt, default_tools
from kairos.config import KairosConfig
from kairos.context.builder import BasicStatus
from kairos.context.session import Session, SessionStore
from kairos.models.base import Model
from kairos.models.types import Message, ModelRequest
from kairos.plugins.skills import CATALOG_TAG, Skills, fingerprint, render_catalog
from kairos.skills.config import SkillsConfig
from kairos_bench._local import bench_model

SKILL = "report-writing"
SCRIPT = "make_report.py"
REGIONS = ("North", "South", "East", "West")
PRODUCTS = {"basic": Decimal("19.90"), "plus": Decimal("49.50"), "pro": Decimal("129.00")}
ROWS = 60
TASKS = (
    "Write a report about the sales in data/sales.csv and tell me the total revenue of the {region} region.",
    "I need a Markdown report of data/sales.csv. What was the total revenue of the {region} region?",
    "Summarise data/sales.csv in a report, and give me the exact total revenue for {region}.",
    "Make a sales report from data/sales.csv. How much revenue did the {region} region bring in?",
)
CONTROLS = (
    ("How many lines does notes.txt have?", "7"),
    ("List the files in the data folder.", "sales.csv"),
)
NOTES = "".join(f"note {i}\n" for i in range(1, 8))
FIXED_NOW = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Trial:
    index: int
    kind: str
    """``skill`` (needs the report skill) or ``control`` (needs no skill)."""
    prompt: str
    seed: int = 0
    region: str = ""
    expect: str = ""
    """For controls: a string the answer must contain."""


def plan(n_skill: int, n_control: int) -> list[Trial]:
    trials = [
        Trial(i, "skill", TASKS[i % len(TASKS)].format(region=REGIONS[i % 4]), seed=1000 + i, region=REGIONS[i % 4])
        for i in range(n_skill)
    ]
    for j in range(n_control):
        prompt, expect = CONTROLS[j % len(CONTROLS)]
        trials.append(Trial(n_skill + j, "control", prompt, expect=expect))
    return trials


def write_sales(path: Path, seed: int) -> dict[str, Decimal]:
    """Generate the trial's data; returns each region's exact revenue total."""
    rng = random.Random(seed)
    totals = dict.fromkeys(REGIONS, Decimal(0))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["date", "region", "product", "units", "revenue"])
        for _ in range(ROWS):
            region, product = rng.choice(REGIONS), rng.choice(list(PRODUCTS))
            units = rng.randint(1, 25)
            discount = Decimal(rng.choice((0, 0, 5, 10, 15))) / 100
            revenue = (PRODUCTS[product] * units * (1 - discount)).quantize(Decimal("0.01"))
            w.writerow([f"2026-{rng.randint(1, 3):02d}-{rng.randint(1, 28):02d}", region, product, units, revenue])
            totals[region] += revenue
    return totals


def make_workspace(root: Path, trial: Trial) -> tuple[Path, dict[str, Decimal]]:
    ws = root / f"trial{trial.index:02d}" / "ws"  # same name every trial: the system prompt is shared
    totals = write_sales(ws / "data" / "sales.csv", trial.seed or 7)
    (ws / "notes.txt").write_text(NOTES, encoding="utf-8")
    return ws, totals


def make_agent(model: Model, ws: Path, state: Path, max_iterations: int) -> Agent:
    config = KairosConfig()
    skills = Skills.from_config(ws, SkillsConfig(dirs=[], entry_points=False))
    return Agent(
        model,
        tools=default_tools(),
        system=default_system_prompt(ws, config),
        status=BasicStatus(lambda: FIXED_NOW),
        max_iterations=max_iterations,
        max_tokens=config.max_tokens,
        plugins=[skills],
    )


def trace_of(messages: Sequence[Message]) -> list[str]:
    """The progressive-loading steps, read back from the trajectory."""
    steps: list[str] = []
    for m in messages:
        if m.origin is not None and m.content.startswith(f"<{CATALOG_TAG}"):
            steps.append("catalog")
        elif m.role == "assistant" and m.tool_calls:
            for c in m.tool_calls:
                args = _args(c.arguments)
                if c.name == "load_skill":
                    steps.append(f"load_skill:{args.get('name', '?')}")
                elif c.name == "read_skill_file":
                    steps.append(f"read_skill_file:{args.get('path', '?')}")
                elif c.name == "bash":
                    steps.append("bash:script" if SCRIPT in str(args.get("command", "")) else "bash")
                else:
                    steps.append(c.name)
        elif m.role == "assistant":
            steps.append("answer")
    return steps


def _args(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def progressive(trace: Sequence[str]) -> bool:
    """catalog → load_skill(report-writing) → [read_skill_file] → bash running the script → answer."""

    def first(step: str) -> int:
        return trace.index(step) if step in trace else -1

    i_cat, i_load, i_script = first("catalog"), first(f"load_skill:{SKILL}"), first("bash:script")
    i_answer = len(trace) - 1 if trace and trace[-1] == "answer" else -1
    reads = [i for i, s in enumerate(trace) if s.startswith("read_skill_file")]
    ordered = 0 <= i_cat < i_load < i_script < i_answer
    return ordered and all(i_load < i < i_script for i in reads)


def _number_forms(d: Decimal) -> tuple[str, str]:
    return f"{d:,.2f}", f"{d:.2f}"


def check_report(ws: Path, region: str, totals: dict[str, Decimal]) -> bool:
    """A Markdown file written by the skill's script, for this data, with the right region total."""
    digest = hashlib.sha256((ws / "data" / "sales.csv").read_bytes()).hexdigest()[:12]
    grouped, _ = _number_forms(totals[region])
    grand, _ = _number_forms(sum(totals.values(), Decimal(0)))
    for md in ws.rglob("*.md"):
        text = md.read_text(encoding="utf-8", errors="replace")
        if (
            f"sha256 `{digest}`" in text
            and "Computed by make_report.py" in text
            and f"- Total revenue: {grand} ({ROWS} values)" in text
            and any(line.startswith(f"| {region} |") and f"| {grouped} |" in line for line in text.splitlines())
        ):
            return True
    return False


async def run_trial(model: Model, trial: Trial, root: Path, max_iterations: int) -> dict[str, Any]:
    ws, totals = make_workspace(root, trial)
    store = SessionStore(ws, state_dir=ws.parent / "state")
    session: Session = store.new(f"skills-{trial.index}")
    agent = make_agent(model, ws, ws.parent / "state", max_iterations)
    answer, stop, error = "", "", ""
    stats: list[RequestStats] = []
    t0 = time.perf_counter()
    try:
        async for event in agent.run(session, trial.prompt):
            if isinstance(event, RequestStats):
                stats.append(event)
            elif isinstance(event, FinalAnswer):
                answer, stop = event.text, event.stop_reason
            elif isinstance(event, RunError):
                error = event.message
        trace = trace_of(session.messages)
    finally:
        await session.aclose()
        store.close()
    row: dict[str, Any] = {
        "trial": trial.index,
        "kind": trial.kind,
        "prompt": trial.prompt,
        "trace": trace,
        "loaded_skill": any(s.startswith("load_skill") for s in trace),
        "iterations": len(stats),
        "prompt_tokens": sum(s.usage.prompt_tokens for s in stats),
        "new_prompt_tokens": sum(s.usage.new_prompt_tokens for s in stats),
        "completion_tokens": sum(s.usage.completion_tokens for s in stats),
        "prefix_ok": all(s.audit.ok for s in stats),
        "wall_s": round(time.perf_counter() - t0, 2),
        "stop_reason": stop,
        "error": error,
        "answer": answer[:400],
    }
    if trial.kind == "skill":
        expected = totals[trial.region]
        report_ok = check_report(ws, trial.region, totals)
        answer_ok = any(form in answer for form in _number_forms(expected))
        row |= {
            "seed": trial.seed,
            "region": trial.region,
            "expected_total": str(expected),
            "report_ok": report_ok,
            "answer_ok": answer_ok,
            "progressive_order": progressive(trace),
            "success": report_ok and answer_ok,
        }
    else:
        row |= {"expect": trial.expect, "success": trial.expect in answer and not row["loaded_skill"]}
    return row


def _frac(rows: Sequence[dict[str, Any]], pred: Callable[[dict[str, Any]], bool]) -> float | None:
    return round(sum(1 for r in rows if pred(r)) / len(rows), 3) if rows else None


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    skill = [r for r in rows if r["kind"] == "skill"]
    control = [r for r in rows if r["kind"] == "control"]

    def step(prefix: str) -> float | None:
        return _frac(skill, lambda r: any(s.startswith(prefix) for s in r["trace"]))

    return {
        "trials": len(skill),
        "success_rate": _frac(skill, lambda r: r["success"]),
        "report_ok_rate": _frac(skill, lambda r: r["report_ok"]),
        "answer_ok_rate": _frac(skill, lambda r: r["answer_ok"]),
        "progressive_order_rate": _frac(skill, lambda r: r["progressive_order"]),
        "catalog_rate": step("catalog"),
        "load_skill_rate": step(f"load_skill:{SKILL}"),
        "read_skill_file_rate": step("read_skill_file"),
        "script_run_rate": step("bash:script"),
        "controls": len(control),
        "false_activation_rate": _frac(control, lambda r: r["loaded_skill"]),
        "control_success_rate": _frac(control, lambda r: r["success"]),
        "prefix_ok_rate": _frac(rows, lambda r: r["prefix_ok"]),
        "mean_iterations": round(sum(r["iterations"] for r in skill) / len(skill), 2) if skill else None,
        "mean_wall_s": round(sum(r["wall_s"] for r in rows) / len(rows), 1) if rows else None,
    }


def disclosure_tokens(model: Model, root: Path) -> dict[str, int]:
    """What progressive disclosure saves: the catalog's tokens vs every body in a system prompt."""
    skills = Skills.from_config(root, SkillsConfig(dirs=[], entry_points=False))

    def tokens(text: str) -> int:
        def req(t: str) -> ModelRequest:
            return ModelRequest("", "", (), (Message.user(t),))

        return model.count_tokens(req(text)) - model.count_tokens(req(""))

    entries = skills.current_entries()
    bodies = [s.body for s in skills.catalog.available()]
    report = next(s for s in skills.catalog.available() if s.name == SKILL)
    return {
        "catalog_tokens": tokens(render_catalog(entries, fingerprint(entries))),
        "all_bodies_tokens": sum(tokens(b) for b in bodies),
        "report_body_tokens": tokens(report.body),
    }


async def run_all(
    model: Model, trials: Sequence[Trial], root: Path, console: Console, max_iterations: int = 8
) -> list[dict[str, Any]]:
    rows = []
    for trial in trials:
        row = await run_trial(model, trial, root, max_iterations)
        rows.append(row)
        verdict = "ok" if row["success"] else "FAIL"
        console.print(
            f"skills  trial {trial.index:2d} {trial.kind:7s} {verdict:4s} {row['wall_s']:6.1f} s  "
            f"{' → '.join(row['trace'])}"
        )
    return rows


def run(
    console: Console | None = None,
    quick: bool = False,
    model: str = "local",
    trials: int | None = None,
    controls: int | None = None,
    max_iterations: int = 8,
) -> dict[str, Any]:
    console = console or Console()
    n_skill = trials if trials is not None else (2 if quick else 8)
    n_control = controls if controls is not None else (1 if quick else 2)
    with bench_model(model, 8192, console) as llm, tempfile.TemporaryDirectory() as d:
        root = Path(d)
        rows = asyncio.run(run_all(llm, plan(n_skill, n_control), root, console, max_iterations))
        tokens = disclosure_tokens(llm, root)
    return {
        "bench": "skills",
        "params": {
            "model": model,
            "skill_trials": n_skill,
            "control_trials": n_control,
            "rows_per_csv": ROWS,
            "n_ctx": 8192,
            "max_iterations": max_iterations,
            "skills_offered": ["changelog", SKILL],
            "tasks": list(TASKS),
            "controls": [c[0] for c in CONTROLS[:n_control]],
        },
        "rows": rows,
        "summary": {**summarise(rows), **tokens},
    }
