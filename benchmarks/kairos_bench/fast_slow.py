"""``fast-slow``: fast/slow thinking (book ch6 §1.4, issue 27 §3) against Plan 1 and a single model.

Twelve questions whose quick answer is wrong or incomplete without a tool: four sums
(``calculate``), five facts of a made-up company kept in a small fixture file (``lookup``), two
about today's date (``today``), and one easy question the quick answer gets right (it shows the cost
of processing a simple question twice). Each question runs in a fresh session in three modes:

- ``single``: the slow agent alone (model B with the tools) answers;
- ``plan1``: Plan 1, a fast filler (model A, no tools) and the slow agent's independent answer, said
  verbatim (:func:`kairos.plugins.fast_slow.fill_then_answer`);
- ``plan2``: Plan 2, the fast foreground with :class:`~kairos.plugins.fast_slow.SlowThinking` (the slow
  agent advises through the status; the foreground words the follow-up).

Per question and mode: ``first_response_ms`` (question to the first character shown), the final
answer (the last thing said), ``correct`` (it holds the expected value), and ``contradiction``: the
user was told one thing and later another without an acknowledgement. Precisely: the first reply
asserted a wrong value (it holds no expected value and does not hedge: "let me check", "not sure")
and a later one says the right value with no acknowledgement marker ("correction", "I said",
"earlier", "actually", "checked", ...), or the first reply was right and the final one is not, again
unacknowledged. A hedged first reply followed by the answer is no contradiction: that is Plan 2's
"let me check" and come back.

No status clock: every agent's status shows only the plugins' lines, so today's date has to come
from the ``today`` tool, as the question set intends.

Models: ``--model`` is the slow model (default ``local``, the bundled 1.5B); the fast one is
``local-small`` (the 0.5B) when it is installed, else the same model object (the background then
waits for the foreground to finish its reply: the user's answer goes first on two cores).
``--no-model`` (or ``--model scripted``) runs scripted doubles instead: a smoke test of the bench's
plumbing and scoring, whose latencies are the doubles' sleeps, not measurements.
"""

from __future__ import annotations

import ast
import asyncio
import json
import operator
import re
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.agent import Agent
from kairos.agent.plugin import RunContext
from kairos.context.session import SessionStore
from kairos.models.base import Model
from kairos.models.types import STATUS, Message, ModelRequest, ModelResponse
from kairos.plugins.fast_slow import NO_UPDATE, Said, SlowThinking, converse, fill_then_answer, single
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.base import Tool
from kairos.tools.function import tool

MODES = ("single", "plan1", "plan2")
FACTS_FILE = Path(__file__).parent / "data" / "fast_slow_facts.json"
N_CTX = 4096
FAST_SYSTEM = "You are a quick voice assistant. Answer in one or two short sentences."
SLOW_SYSTEM = (
    "You answer the user's question correctly. Use the tools: calculate for any arithmetic, lookup for anything "
    "about the company (plans, rooms, people, orders, offices), today for the date. Never guess these. "
    "Answer in one short sentence."
)
HEDGES = ("let me check", "i'll check", "i will check", "checking", "not sure", "i need to check", "let me verify")
ACKNOWLEDGE = (
    "correction",
    "i said",
    "earlier",
    "actually",
    "checked",
    "i was wrong",
    "mistake",
    "update",
    "to correct",
    "sorry",
    "instead",
    "verified",
)
MONTHS = (
    "january february march april may june july august september october november december".split()  # noqa: SIM905
)


@dataclass(frozen=True, slots=True)
class Case:
    """One question: its category, what a right answer holds, the tool call that finds it, a quick wrong guess."""

    id: str
    category: str
    question: str
    expected: tuple[str, ...]
    """Any of these (lower case, commas dropped) in the answer makes it right."""
    tool: str
    arguments: dict[str, str]
    guess: str
    """The scripted fast double's quick answer (wrong, except for the easy question)."""


def cases(today: date) -> list[Case]:
    """The twelve questions; the date ones expect ``today``."""
    iso = today.isoformat()
    month = MONTHS[today.month - 1]
    weekday = today.strftime("%A").lower()
    return [
        Case(
            "sum-mul",
            "arithmetic",
            "What is 4817 times 293?",
            ("1411381",),
            "calculate",
            {"expression": "4817*293"},
            "about 1,400,000",
        ),
        Case(
            "sum-sub",
            "arithmetic",
            "What is 98765 minus 43219?",
            ("55546",),
            "calculate",
            {"expression": "98765-43219"},
            "55,446",
        ),
        Case(
            "sum-pow",
            "arithmetic",
            "What is 7 to the power of 9?",
            ("40353607",),
            "calculate",
            {"expression": "7**9"},
            "about 40 million",
        ),
        Case(
            "sum-div",
            "arithmetic",
            "What is 123456 divided by 64?",
            ("1929",),
            "calculate",
            {"expression": "123456/64"},
            "1,939",
        ),
        Case(
            "fact-plan",
            "lookup",
            "What does the Falcon plan cost per month?",
            ("37",),
            "lookup",
            {"topic": "Falcon plan"},
            "$29 per month",
        ),
        Case(
            "fact-room",
            "lookup",
            "Which room is the Tuesday standup in?",
            ("kestrel",),
            "lookup",
            {"topic": "Tuesday standup"},
            "the main conference room",
        ),
        Case(
            "fact-oncall",
            "lookup",
            "Who is the on-call engineer this week?",
            ("priya",),
            "lookup",
            {"topic": "on-call"},
            "I don't know, probably the team lead",
        ),
        Case(
            "fact-order",
            "lookup",
            "What is the status of order 7731?",
            ("shipped",),
            "lookup",
            {"topic": "order 7731"},
            "it is being processed",
        ),
        Case(
            "fact-wifi",
            "lookup",
            "What is the Wi-Fi network called in the Lisbon office?",
            ("kairos-lis-5g",),
            "lookup",
            {"topic": "Lisbon Wi-Fi"},
            "Lisbon-Guest",
        ),
        Case(
            "date-today",
            "date",
            "What is today's date?",
            (iso, f"{month} {today.day}", f"{today.day} {month}"),
            "today",
            {},
            "June 14, 2024",
        ),
        Case(
            "date-weekday",
            "date",
            "What day of the week is it today?",
            (weekday,),
            "today",
            {},
            "Monday" if weekday != "monday" else "Friday",
        ),
        Case("easy-capital", "easy", "What is the capital of France?", ("paris",), "", {}, "Paris"),
    ]


# -- the background's tools ------------------------------------------------------------------


_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        value: float = _OPS[type(node.op)](left, right)
        return value
    raise ValueError("only numbers and + - * / ** // % are allowed")


def calculate_expression(expression: str) -> str:
    """The value of an arithmetic expression, as text (an integer when it is one)."""
    text = re.sub(r"(?<=\d)\s*[x×]\s*(?=\d)", "*", expression.replace("^", "**").replace(",", ""))
    value = _eval(ast.parse(text, mode="eval"))
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


_STOP = frozenset("a an and the of for in on at is are what which who this week".split())  # noqa: SIM905


def _words(text: str) -> set[str]:
    """Content words, plurals folded ("plans and prices" finds "Falcon plan price")."""
    out = set()
    for w in re.findall(r"[a-z0-9]+", text.lower()):
        if w not in _STOP:
            out.add(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return out


def lookup_fact(topic: str, facts: dict[str, str]) -> str:
    """The fixture facts whose key shares the most words with ``topic`` (a category word lists the category)."""
    words = _words(topic)
    scored = sorted(((len(words & _words(k)), k) for k in facts), reverse=True)
    best = [k for n, k in scored if n and n == scored[0][0]]
    if not best:
        return f"nothing found for {topic!r}; known topics: {', '.join(facts)}"
    return "\n".join(f"{k}: {facts[k]}" for k in best)


def bench_tools(today: date, log: list[str] | None = None) -> list[Tool]:
    """``calculate``, ``lookup`` (the fixture file) and ``today``; each call is noted in ``log``."""
    facts: dict[str, str] = json.loads(FACTS_FILE.read_text(encoding="utf-8"))
    calls = log if log is not None else []

    @tool
    def calculate(expression: str) -> str:
        """Evaluate an arithmetic expression exactly, e.g. 12*(3+4) or 2**10."""
        calls.append(f"calculate({expression!r})")
        try:
            return calculate_expression(expression)
        except (ValueError, SyntaxError, ZeroDivisionError) as e:
            return f"error: {e}"

    @tool
    def lookup(topic: str) -> str:
        """Look up a fact about the company: plans and prices, rooms, who is on call, orders, offices."""
        calls.append(f"lookup({topic!r})")
        return lookup_fact(topic, facts)

    @tool(name="today")
    def today_tool() -> str:
        """Today's date and day of the week."""
        calls.append("today()")
        return f"{today.isoformat()} ({today:%A, %B} {today.day}, {today.year})"

    return [calculate, lookup, today_tool]


class LinesOnly:
    """A status of the plugins' lines only (no clock: the date must come from the ``today`` tool)."""

    def render(self, ctx: RunContext, lines: Sequence[str] = ()) -> str | None:
        """The lines, or no status at all."""
        return "\n".join(lines) or None


# -- scoring ---------------------------------------------------------------------------------


def _norm(text: str) -> str:
    text = re.sub(r"(?<=\d),(?=\d)", "", text.lower())
    return re.sub(r"(\d+)(st|nd|rd|th)\b", r"\1", text)


def holds(text: str, case: Case) -> bool:
    """Whether ``text`` gives the expected value (digits must stand alone: 19290 is not 1929)."""
    t = _norm(text)
    for want in case.expected:
        if want[0].isdigit():
            if re.search(rf"(?<![\d.]){re.escape(want)}(?![\d]|\.\d)", t):
                return True
        elif want in t:
            return True
    return False


def hedged(text: str) -> bool:
    """Whether a reply says it is still checking rather than asserting a value."""
    t = text.lower()
    return any(h in t for h in HEDGES)


def acknowledged(text: str) -> bool:
    """Whether a later reply says it changes or confirms what was said before."""
    t = text.lower()
    return any(a in t for a in ACKNOWLEDGE)


def contradiction(said: Sequence[str], case: Case) -> bool:
    """The user was told X, then not-X, without being told it is a correction (see the module docstring)."""
    if len(said) < 2:
        return False
    first, later = said[0], said[1:]
    if not holds(first, case) and not hedged(first):
        return any(holds(t, case) and not acknowledged(t) for t in later)
    if holds(first, case):
        return not holds(said[-1], case) and not acknowledged(said[-1])
    return False


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 1)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1], 1)


# -- scripted doubles (--no-model) -------------------------------------------------------------


def _question(request: ModelRequest) -> str:
    return next((m.content for m in reversed(request.messages) if m.from_user), "")


def _status(request: ModelRequest) -> str:
    last = request.messages[-1] if request.messages else None
    return last.content if last is not None and last.origin == STATUS else ""


def scripted_models(table: list[Case]) -> tuple[Model, Model]:
    """A fast double (quick guesses; uses advice from the status) and a slow one (a tool call, then its result)."""
    by_question = {c.question: c for c in table}

    def fast(request: ModelRequest) -> ModelResponse:
        case = by_question[_question(request)]
        status = _status(request)
        if "Advice" in status:
            advice = status.split("«", 1)[1].rsplit("»", 1)[0]
            if holds(case.guess, case):
                return reply(NO_UPDATE)
            return reply(f"I checked: {advice}")
        if "could not check" in status:
            return reply("Sorry, I could not check that.")
        if "Background check" in request.system_deployment and not holds(case.guess, case):
            return reply(f"Maybe {case.guess}, but let me check.")
        return reply(f"{case.guess[0].upper()}{case.guess[1:]}.")

    def slow(request: ModelRequest) -> ModelResponse:
        case = by_question[_question(request)]
        last: Message = request.messages[-1]
        if not case.tool:
            return reply(f"{case.guess}.")
        if last.role != "tool":
            return reply("", call(case.tool, case.arguments))
        return reply(f"The answer is {last.content.splitlines()[0]}.")

    n = 1000
    return (
        ScriptedModel([fast] * n, name="scripted-fast", delay_s=0.01),
        ScriptedModel([slow] * n, name="scripted-slow", delay_s=0.04),
    )


# -- the run ---------------------------------------------------------------------------------


async def _ask(mode: str, fast: Agent, slow: Agent, plan2: Agent, store: SessionStore, q: str) -> list[Said]:
    session = store.new(f"fast-slow {mode}")
    items: AsyncIterator[object]
    if mode == "single":
        items = single(slow, session, q)
    elif mode == "plan1":
        items = fill_then_answer(fast, slow, session, q)
    else:
        items = converse(plan2, session, q, wait_s=600)
    said = [item async for item in items if isinstance(item, Said)]
    await session.aclose()
    return said


def run(
    *,
    console: Console,
    quick: bool = False,
    model: str | Model = "local",
    modes: str | Sequence[str] | None = None,
    no_model: bool | None = None,
    limit: int | None = None,
    today: date | None = None,
    fast_model: str | Model | None = None,
) -> dict[str, Any]:
    """Run the questions in each mode; ``limit``: questions per category (``quick``: 1)."""
    day = today or date.today()
    chosen = tuple(m.strip() for m in modes.split(",")) if isinstance(modes, str) else tuple(modes or MODES)
    unknown = [m for m in chosen if m not in MODES]
    if unknown:
        raise ValueError(f"unknown modes {unknown}; use {', '.join(MODES)}")
    per_category = 1 if quick and limit is None else limit
    table = cases(day)
    if per_category is not None:
        table = [c for c in table if [d.category for d in table[: table.index(c)]].count(c.category) < per_category]
    scripted = bool(no_model) or model == "scripted"
    return asyncio.run(_run(console, table, chosen, scripted, model, fast_model, day))


def _fast_spec(slow: str) -> str:
    """``local-small`` when it is installed, else the slow model's own spec."""
    try:
        from kairos.models.bundled import list_bundled

        small = next((s for s in list_bundled() if s.name == "local-small"), None)
    except Exception:
        return slow
    return "local-small" if small is not None and (small.installed or small.path is not None) else slow


async def _run(
    console: Console,
    table: list[Case],
    modes: tuple[str, ...],
    scripted: bool,
    model: str | Model,
    fast_model: str | Model | None,
    day: date,
) -> dict[str, Any]:
    owned: list[Any] = []
    if scripted:
        fast_m, slow_m = scripted_models(table)
    elif isinstance(model, str):
        from kairos.models.local import LocalModel

        fast_spec = fast_model if fast_model is not None else _fast_spec(model)
        slow_local = LocalModel(model, n_ctx=N_CTX)
        owned.append(slow_local)
        slow_m = slow_local
        if isinstance(fast_spec, str) and fast_spec != model:
            fast_local = LocalModel(fast_spec, n_ctx=N_CTX)
            owned.append(fast_local)
            fast_m = fast_local
        elif isinstance(fast_spec, str):
            fast_m = slow_m
        else:
            fast_m = fast_spec
        with console.status("loading models ..."):
            for m in owned:
                m.load()
    else:
        slow_m = model
        fast_m = fast_model if fast_model is not None and not isinstance(fast_model, str) else model
    rows: list[dict[str, Any]] = []
    try:
        log: list[str] = []
        tools = bench_tools(day, log)
        slow = Agent(slow_m, tools=tools, system=SLOW_SYSTEM, status=LinesOnly(), max_iterations=6, max_tokens=160)
        fast = Agent(fast_m, system=FAST_SYSTEM, status=LinesOnly(), max_tokens=80)
        plan2 = Agent(
            fast_m,
            system=FAST_SYSTEM,
            status=LinesOnly(),
            max_tokens=80,
            plugins=[SlowThinking(slow, timeout_s=300)],
        )
        with tempfile.TemporaryDirectory(prefix="kairos-fast-slow-") as tmp:
            store = SessionStore(Path(tmp))
            try:
                for case in table:
                    for mode in modes:
                        t0, seen = time.monotonic(), len(log)
                        said = await _ask(mode, fast, slow, plan2, store, case.question)
                        total = time.monotonic() - t0
                        rows.append(_row(mode, case, said, total) | {"tool_calls": log[seen:]})
                        r = rows[-1]
                        console.print(
                            f"{case.id:13s} {mode:6s} first {r['first_response_ms']!s:>8} ms  "
                            f"correct={r['correct']!s:5s} contradiction={r['contradiction']!s:5s} "
                            f"final={r['final'][:70]!r}"
                        )
            finally:
                store.close()
    finally:
        for m in owned:
            m.close()
    return {
        "bench": "fast-slow",
        "params": {
            "slow_model": getattr(slow_m, "name", "custom"),
            "fast_model": getattr(fast_m, "name", "custom"),
            "shared_model": fast_m is slow_m,
            "scripted": scripted,
            "questions": len(table),
            "modes": list(modes),
            "today": day.isoformat(),
        },
        "rows": rows,
        "summary": summarize(rows, modes),
    }


def _row(mode: str, case: Case, said: list[Said], total_s: float) -> dict[str, Any]:
    spoken = [s for s in said if not s.silent]
    texts = [s.text for s in spoken]
    final = texts[-1] if texts else ""
    return {
        "mode": mode,
        "id": case.id,
        "category": case.category,
        "question": case.question,
        "first_response_ms": round(spoken[0].at_s * 1000, 1) if spoken else None,
        "final_response_ms": round(spoken[-1].at_s * 1000, 1) if spoken else None,
        "total_ms": round(total_s * 1000, 1),
        "said": texts,
        "silent_replies": len(said) - len(spoken),
        "final": final,
        "first_correct": bool(texts) and holds(texts[0], case),
        "first_hedged": bool(texts) and hedged(texts[0]),
        "correct": holds(final, case),
        "contradiction": contradiction(texts, case),
    }


def summarize(rows: list[dict[str, Any]], modes: Sequence[str]) -> dict[str, Any]:
    """Per mode: first/final response p50/p95 ms, final accuracy, contradiction rate, first-reply accuracy."""
    out: dict[str, dict[str, Any]] = {
        k: {}
        for k in (
            "first_response_p50_ms",
            "first_response_p95_ms",
            "final_response_p50_ms",
            "final_accuracy",
            "first_accuracy",
            "contradiction_rate",
            "replies_per_question",
        )
    }
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        if not mine:
            continue
        first = [r["first_response_ms"] for r in mine if r["first_response_ms"] is not None]
        final = [r["final_response_ms"] for r in mine if r["final_response_ms"] is not None]
        out["first_response_p50_ms"][mode] = _p(first, 50)
        out["first_response_p95_ms"][mode] = _p(first, 95)
        out["final_response_p50_ms"][mode] = _p(final, 50)
        out["final_accuracy"][mode] = round(sum(r["correct"] for r in mine) / len(mine), 3)
        out["first_accuracy"][mode] = round(sum(r["first_correct"] for r in mine) / len(mine), 3)
        out["contradiction_rate"][mode] = round(sum(r["contradiction"] for r in mine) / len(mine), 3)
        out["replies_per_question"][mode] = round(sum(len(r["said"]) for r in mine) / len(mine), 2)
    return out
