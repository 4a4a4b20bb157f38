"""``status-techniques`` (book Exp 2-9): a small file-task suite with status techniques on and off.

Four tasks in a fresh temporary workspace per run, checked by code:

- ``find-value``: find a port number in one of several config files;
- ``missing-path``: read a file at a path that does not exist (the real one has another name);
- ``missing-dir``: read a report in a folder that does not exist (it lives in another folder);
- ``multi-edit``: three edits in three files (two changes and one new file).

The tools are deliberately naive (``read_file``, ``list_files``, ``write_file``,
``replace_in_file`` raise plain exceptions, like the book's framework), so what the model sees
after a mistake is whatever the error formatter makes of the exception.

Configurations: ``all_off`` (no status, plain errors, no TODO tools), ``all_on`` (the five
techniques, simulated clock), ``todo_off`` and ``errors_off`` (``all_on`` minus one technique).
Per run: model requests (iterations), success, tool errors, and whether the run recovered
(succeeded despite at least one tool error).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.agent import Agent
from kairos.agent.events import FinalAnswer, RequestStats, ToolCallFinished
from kairos.context.session import SessionStore
from kairos.models.base import Model
from kairos.models.types import SystemPrompt
from kairos.plugins.status_bar import StatusBar, StatusBarConfig
from kairos.tools.base import Tool, ToolContext
from kairos.tools.function import tool
from kairos_bench._local import bench_model, model_name

MAX_ITERATIONS = 10
SYSTEM = """You are a file assistant working inside a project folder. You inspect and change files with \
your tools; paths are relative to the project folder.

<procedure>
1. For a task with several steps, plan the steps first and keep track of which are done.
2. Look before you act: list folders and read files before you answer or edit.
3. When a tool fails, read the error, fix the cause (for example a wrong path) and try again.
4. When everything is done, answer briefly with the result.
</procedure>"""

OFF = {"current_request": False, "timestamps": False, "counters": False}
OFF |= {"todo": False, "detailed_errors": False, "system_state": False}
CONFIGS: dict[str, dict[str, Any]] = {
    "all_off": OFF,
    "all_on": {"todo": True},
    "todo_off": {"todo": False},
    "errors_off": {"todo": True, "detailed_errors": False},
}


# -- naive tools -----------------------------------------------------------------------------


def _visible(p: Path) -> bool:
    return not p.name.startswith(".")


@tool
def read_file(path: str, *, ctx: ToolContext) -> str:
    """Read a whole text file.

    Args:
        path: file path relative to the project folder, e.g. "config/app.ini"
    """
    return ctx.resolve_path(path).read_text(encoding="utf-8")


@tool
def list_files(path: str = ".", *, ctx: ToolContext) -> str:
    """List a folder: one entry per line, folders end with "/".

    Args:
        path: folder relative to the project folder; "." is the project folder itself
    """
    folder = ctx.resolve_path(path)
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir() if _visible(p))
    return "\n".join(entries) or "(empty folder)"


@tool(side_effects=True)
def write_file(path: str, content: str, *, ctx: ToolContext) -> str:
    """Create or overwrite a text file (parent folders are created).

    Args:
        path: file path relative to the project folder
        content: the complete new file content
    """
    p = ctx.resolve_path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(content, encoding="utf-8")
    return f"wrote {len(content)} characters to {path}"


@tool(side_effects=True)
def replace_in_file(path: str, old: str, new: str, *, ctx: ToolContext) -> str:
    """Replace the first occurrence of `old` with `new` in a text file.

    Args:
        path: file path relative to the project folder
        old: exact text to find
        new: replacement text
    """
    p = ctx.resolve_path(path)
    text = p.read_text(encoding="utf-8")
    if old not in text:
        raise ValueError(f"{old!r} does not occur in {path}")
    p.write_text(text.replace(old, new, 1), encoding="utf-8")
    return f"replaced 1 occurrence in {path}"


TOOLS: list[Tool] = [list_files, read_file, replace_in_file, write_file]


# -- tasks -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    name: str
    prompt: str
    files: dict[str, str]
    check: Callable[[Path, str], bool]


def _has_all(*needles: str) -> Callable[[Path, str], bool]:
    return lambda ws, answer: all(n.casefold() in answer.casefold() for n in needles)


def _multi_edit_ok(ws: Path, answer: str) -> bool:
    settings = (ws / "app" / "settings.json").read_text()
    version = (ws / "app" / "VERSION").read_text().strip()
    changelog = ws / "CHANGELOG.md"
    return (
        '"debug": false' in settings
        and '"debug": true' not in settings
        and version == "1.4.3"
        and changelog.is_file()
        and "1.4.3" in changelog.read_text()
    )


TASKS = (
    Task(
        "find-value",
        "Which port does the payment service listen on? The service settings are in the config folder.",
        {
            "README.md": "# shop\nService settings live under config/services/.\n",
            "config/base.ini": "[base]\nlog_level = info\n",
            "config/services/search.ini": "[search]\nhost = 10.0.0.7\nport = 9200\n",
            "config/services/payment.ini": "[payment]\nhost = 10.0.0.5\nport = 8443\n",
        },
        _has_all("8443"),
    ),
    Task(
        "missing-path",
        "Read notes/meeting.txt and tell me the date of the next team meeting.",
        {
            "notes/meetings.txt": "Team meetings\n- last: 2025-09-30\n- next: 2025-10-14, room B2\n",
            "notes/ideas.txt": "- dark mode\n",
        },
        _has_all("2025-10-14"),
    ),
    Task(
        "missing-dir",
        "Open reports/q3.csv and tell me the total revenue in its last row.",
        {
            "data/reports/q3.csv": "month,revenue\njul,1200\naug,1350\nsep,1475\ntotal,4025\n",
            "data/reports/q2.csv": "month,revenue\napr,900\nmay,950\njun,1010\ntotal,2860\n",
            "README.md": "# finance\n",
        },
        _has_all("4025"),
    ),
    Task(
        "multi-edit",
        'Do three things: (1) in app/settings.json change "debug": true to "debug": false; '
        "(2) in app/VERSION change 1.4.2 to 1.4.3; (3) create CHANGELOG.md with the line '1.4.3: debug disabled'.",
        {
            "app/settings.json": '{\n  "name": "shop",\n  "debug": true,\n  "workers": 4\n}\n',
            "app/VERSION": "1.4.2\n",
            "app/main.py": "print('shop')\n",
        },
        _multi_edit_ok,
    ),
)


# -- running ---------------------------------------------------------------------------------


def make_agent(model: Model, config_name: str) -> Agent:
    config = StatusBarConfig(clock_start=datetime(2025, 9, 14, 10, 30), clock_step_s=7, **CONFIGS[config_name])
    bar = StatusBar(config, environment={"OS": "Linux", "shell": "bash", "Python": "3.11"})
    return Agent(model, tools=TOOLS, system=SystemPrompt(SYSTEM), max_iterations=MAX_ITERATIONS, plugins=[bar])


async def run_task(model: Model, config_name: str, task: Task, root: Path) -> dict[str, Any]:
    ws = root / f"{config_name}-{task.name}"
    for rel, text in task.files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    store = SessionStore(ws)
    session = store.new(f"{config_name} {task.name}")
    agent = make_agent(model, config_name)
    requests, errors, prompt_tokens, model_s = 0, 0, 0, 0.0
    calls: list[str] = []
    answer, stop = "", ""
    try:
        async for event in agent.run(session, task.prompt):
            if isinstance(event, RequestStats):
                requests += 1
                prompt_tokens += event.usage.prompt_tokens
                model_s += event.usage.total_s
            elif isinstance(event, ToolCallFinished):
                calls.append(event.call.name)
                errors += event.result.is_error
            elif isinstance(event, FinalAnswer):
                answer, stop = event.text, event.stop_reason
    finally:
        await session.aclose()
        store.close()
    success = stop == "answer" and task.check(ws, answer)
    return {
        "config": config_name,
        "task": task.name,
        "success": success,
        "iterations": requests,
        "tool_errors": errors,
        "recovered": bool(errors) and success,
        "todo_calls": sum(1 for c in calls if "todo" in c),
        "tool_calls": calls,
        "stop_reason": stop,
        "answer": answer[:200],
        "prompt_tokens": prompt_tokens,
        "model_s": round(model_s, 1),
    }


def _mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 2) if values else 0.0


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def of(config: str) -> list[dict[str, Any]]:
        return [r for r in rows if r["config"] == config]

    def recovery(config: str) -> float | None:
        hit = [r for r in of(config) if r["tool_errors"]]
        return round(sum(r["recovered"] for r in hit) / len(hit), 3) if hit else None

    summary: dict[str, Any] = {}
    for config in CONFIGS:
        rs = of(config)
        if rs:
            summary[f"success_{config}"] = round(sum(r["success"] for r in rs) / len(rs), 3)
            summary[f"iterations_{config}"] = _mean([r["iterations"] for r in rs])
    if of("all_on") and of("todo_off"):
        summary |= {
            "iterations_todo_on": summary["iterations_all_on"],
            "iterations_todo_off": summary["iterations_todo_off"],
            "success_todo_on": summary["success_all_on"],
            "success_todo_off": summary["success_todo_off"],
        }
    if of("all_on") and of("errors_off"):
        summary["error_recovery_with_4layer"] = recovery("all_on")
        summary["error_recovery_without_4layer"] = recovery("errors_off")
        summary["runs_with_errors_4layer"] = sum(1 for r in of("all_on") if r["tool_errors"])
        summary["runs_with_errors_plain"] = sum(1 for r in of("errors_off") if r["tool_errors"])
    if of("all_off"):
        summary["error_recovery_all_off"] = recovery("all_off")
    return summary


def run(
    console: Console | None = None,
    quick: bool = False,
    model: str | Model = "local",
    configs: tuple[str, ...] | None = None,
    tasks: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    console = console or Console()
    chosen_configs = configs or (("all_off", "all_on") if quick else tuple(CONFIGS))
    chosen_tasks = [t for t in TASKS if t.name in (tasks or (("missing-path",) if quick else [t.name for t in TASKS]))]
    rows: list[dict[str, Any]] = []
    with bench_model(model, 8192, console) as llm, tempfile.TemporaryDirectory() as d:
        for config in chosen_configs:  # one config at a time: its system prefix stays in the KV cache
            for task in chosen_tasks:
                row = asyncio.run(run_task(llm, config, task, Path(d)))
                rows.append(row)
                mark = "ok  " if row["success"] else "FAIL"
                console.print(
                    f"status-techniques  {config:10s} {task.name:12s} {mark} {row['iterations']:2d} it, "
                    f"{row['tool_errors']} err  {row['tool_calls']}"
                )
    return {
        "bench": "status-techniques",
        "params": {
            "model": model_name(model),
            "configs": {c: CONFIGS[c] or "all techniques on" for c in chosen_configs},
            "tasks": [t.name for t in chosen_tasks],
            "max_iterations": MAX_ITERATIONS,
            "tools": [t.name for t in TOOLS],
            "recovery": "share of runs with >= 1 tool error that still succeeded",
        },
        "rows": rows,
        "summary": summarise(rows),
    }
