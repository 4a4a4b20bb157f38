"""``compression`` (book Exp 2-10): six context-compression strategies under a small window.

Each trial generates, from its seed, a fictional company with five co-founders, and a corpus of
long, noisy "search result" pages (~6,500 characters: navigation, cookie notices, ads,
comments, unrelated paragraphs, related-article teasers about *other* people leaving *other*
companies). One profile per co-founder tells their role changes and whether and when they
left; a founding-story page and pages about other people are distractors. The agent has one
tool, ``search(query)``, which returns the best-matching page whole.

The task is a research conversation: one user turn per co-founder ("does X still work at C?
search first"), then a last turn asking for the exact aggregate (who still works there, who
left in which year), checked exactly. Turns make the rounds of the book's run explicit: a
single question made the bundled 1.5B model issue every search in one reply, so windowed and
task-aware compression saw the same single batch and could not differ; an earlier version that
made the agent find the names first never moved on from that search.

Every strategy runs on the same trials with the bundled model in a deliberately small window
(``n_ctx`` 10,240: five raw pages pass the 80 % trigger before the last answers), layer 5 only
(no spill, noise removal, archival or provider editing). The summariser is a second instance
of the same model (its own KV cache, shared weights), so summarising does not evict the agent's
cached prefix. Rows: strategy, trial, iterations (agent requests), total agent prompt tokens,
summariser calls and prompt tokens, compression ratio (compressed / original chars), success,
and the model-independent score ``facts_kept``: the share of the trial's gold facts (per
co-founder, still there or the year they left) that the tool results of the last request
still state (the rule is at :func:`facts_in`; ``facts_found`` applies it to the raw results,
so a search that never brought a page in is told apart from a fact compression dropped).
Summary: ``facts_kept_<strategy>`` (target for task-aware ≥ 0.95), ``success_<strategy>``,
token totals and the task-aware / windowed token ratio.
"""

from __future__ import annotations

import asyncio
import bisect
import random
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.agent import Agent
from kairos.agent.events import FinalAnswer, RequestStats, RunError, ToolCallFinished
from kairos.context.builder import NoStatus
from kairos.context.compression import COMPRESSED, STRATEGIES, CompressionConfig, Strategy, state_of
from kairos.context.compression.config import NoiseConfig, SpillConfig
from kairos.context.session import SessionStore
from kairos.models.base import Model
from kairos.models.types import Message, SystemPrompt
from kairos.plugins.compression import CompressionPlugin
from kairos.tools.base import Tool
from kairos.tools.function import tool
from kairos_bench._local import bench_model
from kairos_bench._observe import RequestLog

N_CTX = 10_240
FOUNDERS = 5
NOISE_PARAGRAPHS = 14
MAX_TOKENS = 256
SUMMARY_MAX_TOKENS = 256
FIRST = ("Mara", "Tobin", "Ilse", "Corvin", "Nadia", "Emeric", "Sunniva", "Bastian", "Leona", "Oskar", "Runa", "Dario")
LAST = ("Quist", "Halloran", "Vesterby", "Okonkwo", "Lindqvist", "Marchetti", "Brandvold", "Ashworth", "Kowalczyk")
STEMS = ("Veltrix", "Norrow", "Quellbright", "Harbinger", "Cobaltine", "Ostrava", "Lumenfold", "Tessaract")
SUFFIXES = ("Labs", "Systems", "Robotics", "Analytics")
ROLES = (
    "chief technology officer",
    "head of product",
    "chief scientist",
    "head of engineering",
    "chief operating officer",
)
NEWCOS = ("Brightmoor", "Kestrel Works", "Pinecrest AI", "Saltmarsh Data", "Fjordline")
MONTHS = ("January", "March", "May", "June", "September", "November")
SITES = ("techledger.example", "startupwire.example", "boardroomdaily.example", "venturebeat-like.example")
NAV = "Home | News | Companies | People | Funding | Events | Podcasts | Newsletter | Log in | Subscribe"
COOKIES = (
    "We use cookies to improve your experience, measure traffic and show relevant offers. By continuing to "
    "browse you accept our cookie policy. Manage preferences | Accept all | Reject non-essential"
)
ADS = (
    "Sponsored: CloudNest hosting gives growing teams 50% off their first year. Scale without surprises.",
    "Advertisement: Join 40,000 founders at the Summit on Scaling. Early-bird tickets end Friday.",
    "Sponsored: PayLoom invoicing, now with automatic reminders and multi-currency support. Try it free.",
    "Advertisement: Learn Rust in 30 days with our hands-on bootcamp. Enrol today and get a free mentor call.",
)
FILLER = (
    "Analysts expect the market for {x} to grow by {n}% next year, driven by demand from mid-sized firms.",
    "The funding climate for {x} start-ups cooled in the second half of the year, investors told us.",
    "A survey of {n} engineering leaders found that most plan to expand their {x} teams despite budgets.",
    "Regulators in several countries are reviewing rules that could affect how {x} products are sold.",
    "Industry veterans say the next wave of {x} tools will focus on reliability rather than raw speed.",
    "Conference organisers reported record attendance at this year's {x} track, with {n} sessions.",
)
TOPICS = ("warehouse robotics", "edge analytics", "battery recycling", "supply-chain software", "climate data")
COMMENTS = (
    "Great read, thanks for sharing!",
    "I worked with this team years ago and the culture was always impressive.",
    "Would love a follow-up piece on how they handled the pandemic years.",
    "Not sure the numbers add up, but interesting perspective anyway.",
    "Bookmarking this for my founders' reading group next week.",
)
HANDLES = ("devops_dana", "pm_rik", "quietbuilder", "anon_vc", "lena_codes")
FOOTER = "© 2024 {site}. All rights reserved. About | Careers | Advertise | Privacy | Terms | Contact"

ANSWER_FORM = "STILL THERE: <full names, comma-separated>; LEFT: <full name> (<year>), <full name> (<year>)"
SYSTEM = """You answer questions about companies and their founders by searching.

<workflow>
1. For a question about a person, search their full name: search(query="<full name>").
2. Answer in one sentence from the result: do they still work at the company, or in which year did they leave?
3. When asked to sum up, use the earlier results and answers, and answer in the form the user gives.
</workflow>

<rules>
- Use only facts from the search results. A year someone changed role is not the year they left.
- Results marked [COMPRESSED] are faithful extracts of long pages.
</rules>"""


@dataclass(frozen=True, slots=True)
class Founder:
    name: str
    left: int | None
    """Year they left the company; None: still there."""
    role: str
    role_year: int


@dataclass
class Corpus:
    company: str
    founded: int
    founders: list[Founder]
    docs: list[tuple[str, str]] = field(default_factory=list)
    """(title, full page text) pairs."""
    strangers: list[str] = field(default_factory=list)
    """People of the distractor pages (they left *other* companies)."""

    @property
    def people(self) -> list[str]:
        """Everyone the pages name: the co-founders, then the strangers."""
        return [f.name for f in self.founders] + self.strangers

    @property
    def turns(self) -> list[str]:
        """One question per co-founder, then the aggregate the check reads."""
        asks = [
            f"Does {f.name}, a co-founder of {self.company}, still work there? If not, in which year did they "
            "leave? Search first; do not guess."
            for f in self.founders
        ]
        summary = (
            f"Sum up for all {len(self.founders)} co-founders of {self.company}: who still works there, "
            f"and who left in which year? Answer in exactly this form:\n{ANSWER_FORM}"
        )
        return [*asks, summary]


def _noise(rng: random.Random, paragraphs: int) -> list[str]:
    out = []
    for _ in range(paragraphs):
        sentences = [
            rng.choice(FILLER).format(x=rng.choice(TOPICS), n=rng.randint(3, 60)) for _ in range(rng.randint(2, 4))
        ]
        out.append(" ".join(sentences))
    return out


def _teasers(rng: random.Random, people: list[str], companies: list[str]) -> str:
    lines = ["Related articles:"]
    for person in rng.sample(people, k=min(3, len(people))):
        other = rng.choice(companies)
        lines.append(f"- {person} steps down at {other} after {rng.randint(3, 9)} years ({rng.randint(2015, 2024)})")
    return "\n".join(lines)


def _comments(rng: random.Random) -> str:
    picks = rng.sample(COMMENTS, 3)
    return "Comments (3)\n" + "\n".join(f"{rng.choice(HANDLES)}: {c}" for c in picks)


def _page(rng: random.Random, title: str, body: list[str], people: list[str], companies: list[str]) -> str:
    site = rng.choice(SITES)
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    noise = _noise(rng, NOISE_PARAGRAPHS)
    parts = [
        f"URL: https://{site}/{slug}",
        NAV,
        COOKIES,
        f"# {title}",
        noise[0],
        *body[:1],
        rng.choice(ADS),
        *body[1:],
        noise[1],
        noise[2],
        _teasers(rng, people, companies),
        rng.choice(ADS),
        noise[3],
        noise[4],
        _comments(rng),
        noise[5],
        noise[6],
        rng.choice(ADS),
        noise[7],
        noise[8],
        _teasers(rng, people, companies),
        noise[9],
        rng.choice(ADS),
        *noise[10:],
        FOOTER.format(site=site),
    ]
    return "\n\n".join(parts)


def make_corpus(seed: int) -> Corpus:
    """A deterministic trial: company, five co-founders (two or three left), noisy pages."""
    rng = random.Random(seed)
    stems = rng.sample(STEMS, 3)
    company, *others = (f"{s} {rng.choice(SUFFIXES)}" for s in stems)
    founded = rng.randint(2010, 2015)
    n = FOUNDERS + 3
    names = [f"{f} {ln}" for f, ln in zip(rng.sample(FIRST, n), rng.sample(LAST, n), strict=True)]
    leavers = rng.sample(range(FOUNDERS), rng.choice((2, 3)))
    founders = []
    for i, name in enumerate(names[:FOUNDERS]):
        role_year = rng.randint(founded + 2, 2019)
        left = rng.randint(role_year + 1, 2024) if i in leavers else None
        founders.append(Founder(name, left, rng.choice(ROLES), role_year))
    strangers = names[FOUNDERS:]
    corpus = Corpus(company, founded, founders, strangers=strangers)
    listed = ", ".join(f.name for f in founders[:-1]) + f" and {founders[-1].name}"
    founding = [
        f"{company} was founded in {founded} by {FOUNDERS} co-founders: {listed}. They met while working on "
        f"logistics software and started the company in a shared office.",
        f"Today {company} employs about {rng.randint(80, 400)} people. This article tells how it began; "
        "where each co-founder is now is covered in separate profiles.",
    ]
    title = f"The {FOUNDERS} co-founders of {company}: how it all began"
    corpus.docs.append((title, _page(rng, title, founding, strangers, others)))
    for f in founders:
        body = [f"{f.name} co-founded {company} in {founded}. In {f.role_year}, {f.name} became {f.role} of {company}."]
        if f.left is None:
            body.append(f"{f.name} still works at {company}, where the role of {f.role} continues today.")
            title = f"{f.name}: a decade at {company}"
        else:
            newco = rng.choice(NEWCOS)
            body.append(
                f"{f.name} left {company} in {rng.choice(MONTHS)} {f.left} to start {newco}, "
                f"and no longer works at {company}."
            )
            title = f"{f.name} on leaving {company} and starting {newco}"
        corpus.docs.append((title, _page(rng, title, body, strangers, others)))
    for person in strangers:
        other = rng.choice(others)
        year = rng.randint(2015, 2024)
        body = [f"{person}, a co-founder of {other}, left {other} in {year} after a board dispute."]
        title = f"{person} departs {other}"
        corpus.docs.append((title, _page(rng, title, body, strangers, others)))
    return corpus


_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset({"the", "of", "and", "a", "an", "in", "at", "who", "which", "what", "is", "are", "to", "for"})


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def make_search(corpus: Corpus) -> Tool:
    """``search(query)``: the best page by title (x3) and body word overlap, where a page whose
    title names a person the query names (full name) comes first, as a phrase match would in a
    real engine: otherwise "<name> co-founders <company>" matched the founding page's title
    ("co-founders", company) as well as the profile's and won on its body, which lists every
    name, so whether the agent ever saw a profile hung on "co-founder" versus "co-founders"."""
    indexed = [
        ({p for p in corpus.people if p in title}, _words(title), _words(page), page) for title, page in corpus.docs
    ]

    @tool(name="search", external=True, max_output_chars=20_000)
    def search(query: str) -> str:
        """Search the web and return the best-matching page in full.

        Args:
            query: a few keywords, e.g. a company name with "co-founders", or a person's full name.
        """
        q = _words(query)
        named = {p for p in corpus.people if p.lower() in " ".join(query.lower().split())}
        scores = [(len(named & n), 3 * len(q & t) + len(q & b), -i) for i, (n, t, b, _) in enumerate(indexed)]
        _, best, neg_i = max(scores)
        return indexed[-neg_i][3] if best else f"No results for {query!r}."

    return search


def check(answer: str, corpus: Corpus) -> bool:
    """Exactly right: every stayer under STILL THERE, every leaver under LEFT with the right year."""
    m = re.search(r"\bleft\s*:", answer, re.IGNORECASE)
    still, left = (answer[: m.start()], answer[m.end() :]) if m else (answer, "")
    for f in corpus.founders:
        last = f.name.split()[-1]
        in_still, in_left = last in still, last in left
        if f.left is None and not (in_still and not in_left):
            return False
        if f.left is not None:
            if in_still or not in_left:
                return False
            year = re.search(r"\d{4}", left[left.index(last) :][:60])
            if year is None or int(year.group()) != f.left:
                return False
    return True


# -- the model-independent score: gold facts still in the context the model saw last ------------
#
# A trial's gold facts are one per co-founder: the name and either "still works there" or the
# year they left. The score reads the tool results of the last request the agent sent, as the
# model saw them (after the compression view). Each such message is cut into passages, one per
# person it names: a person is named by the full, first or last name (case-sensitive, whole
# words; first and last names are unique in a corpus), and a passage runs from the start of the
# sentence (or line) that names the person to the start of the sentence that names another
# person of the corpus, co-founder or stranger (to that name itself when one sentence names
# both). Text before the first name in a message belongs to nobody. A fact is kept when the
# passages of one message about that co-founder state it:
# - a leaver: the year they left, as a whole number, and a word of leaving (left, leave(s),
#   leaving, departed, quit, stepped down, no longer) that is not negated;
# - a stayer: a word of staying (still, currently, remain(s), continue(s), to this day);
# and the passages do not also say the opposite: no word of staying for a leaver, no word of
# leaving that is not negated for a stayer ("has not left" is fine). So a fact split across
# messages, a wrong year, a role-change year alone, a stranger's year in a related-article
# teaser, or a summary that says both "still works there" and "left in 2020" does not count.
# The same rule over the raw results (the stored messages, before any compression) gives
# ``facts_found``: what the searches brought in.

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")
_STAY = re.compile(r"\b(still|currently|remains?|continues?|to this day)\b", re.IGNORECASE)
_LEAVE = re.compile(r"\b(left|leaves?|leaving|departed|quit|stepped down|steps down|no longer)\b", re.IGNORECASE)
_NEGATED = re.compile(r"(\bnot|\bnever|n't)\s+(\w+\s+)?$", re.IGNORECASE)


def passages(text: str, people: Sequence[str]) -> dict[str, str]:
    """The text of one message about each person it names (see the rule above), passages joined."""
    who: dict[str, str] = {}
    for person in people:
        first, *_, last = person.split()
        for form in (person, first, last):
            who.setdefault(form, person)
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in sorted(who, key=len, reverse=True)) + r")\b")
    starts = [0] + [m.end() for m in _SENTENCE_END.finditer(text)]
    out: dict[str, list[str]] = {}
    current: str | None = None
    since = prev_end = 0
    for m in pattern.finditer(text):
        person = who[m.group()]
        if person != current:
            sentence = starts[bisect.bisect_right(starts, m.start()) - 1]
            cut = sentence if sentence >= prev_end else m.start()
            if current is not None:
                out.setdefault(current, []).append(text[since:cut])
            current, since = person, cut
        prev_end = m.end()
    if current is not None:
        out.setdefault(current, []).append(text[since:])
    return {person: "\n".join(parts) for person, parts in out.items()}


def _leaves(text: str) -> bool:
    """A word of leaving that is not negated."""
    return any(not _NEGATED.search(text[: m.start()]) for m in _LEAVE.finditer(text))


def states(founder: Founder, text: str) -> bool:
    """Does this passage state the founder's gold fact (and not its opposite)?"""
    stays, leaves = _STAY.search(text) is not None, _leaves(text)
    if founder.left is None:
        return stays and not leaves
    return leaves and not stays and re.search(rf"\b{founder.left}\b", text) is not None


def gold(founder: Founder) -> str:
    """The gold fact, for reports."""
    return f"{founder.name} ({'still there' if founder.left is None else f'left {founder.left}'})"


def facts_in(messages: Sequence[Message], corpus: Corpus) -> dict[str, bool]:
    """For each co-founder, whether one tool result among ``messages`` states their gold fact."""
    kept = {f.name: False for f in corpus.founders}
    for m in messages:
        if m.role != "tool":
            continue
        about = passages(m.content, corpus.people)
        for f in corpus.founders:
            if not kept[f.name] and f.name in about and states(f, about[f.name]):
                kept[f.name] = True
    return kept


def share(kept: dict[str, bool]) -> float:
    """The share of facts kept."""
    return round(sum(kept.values()) / len(kept), 3) if kept else 0.0


def bench_config(strategy: Strategy) -> CompressionConfig:
    """Layer 5 only, so the six strategies are compared as in the book (no spill, noise removal,
    archival or provider editing)."""
    return CompressionConfig(
        strategy=strategy,
        min_chars=500,
        summary_max_tokens=SUMMARY_MAX_TOKENS,
        context_chars=600,
        keep_originals=False,
        archive=False,
        provider_editing=False,
        spill=SpillConfig(enabled=False),
        noise=NoiseConfig(enabled=False),
    )


async def run_trial(
    strategy: Strategy, trial: int, corpus: Corpus, agent_model: Model, summarizer: Model, root: Path
) -> dict[str, Any]:
    ws = root / f"{strategy}-{trial}"
    ws.mkdir(parents=True)
    store = SessionStore(ws)
    session = store.new(f"{strategy}-{trial}")
    ext = CompressionPlugin(bench_config(strategy), summarizer=summarizer)
    log = RequestLog()
    agent = Agent(
        agent_model,
        tools=[make_search(corpus)],
        system=SystemPrompt(SYSTEM),
        status=NoStatus(),
        max_iterations=6,
        max_tokens=MAX_TOKENS,
        plugins=[ext, log],
    )
    prompt_tokens = requests = 0
    answer, stop, searches = "", "", []
    t0 = time.perf_counter()
    try:
        for turn in corpus.turns:
            async for event in agent.run(session, turn):
                if isinstance(event, RequestStats):
                    requests += 1
                    prompt_tokens += event.usage.prompt_tokens
                elif isinstance(event, ToolCallFinished):
                    searches.append(event.call.arguments)
                elif isinstance(event, FinalAnswer):
                    answer, stop = event.text, event.stop_reason
                elif isinstance(event, RunError):
                    answer, stop = "", "overflow" if "prompt tokens" in event.message else f"error: {event.message}"
            if stop not in ("answer", "length"):
                break  # overflow or a harness stop: later turns would only fail the same way
        found = facts_in(session.message_list(), corpus)
    finally:
        await session.aclose()
        store.close()
    st = state_of(session)
    ratio = st.ratio
    last = log.requests[-1].messages if log.requests else ()
    kept = facts_in(last, corpus)
    return {
        "strategy": strategy,
        "trial": trial,
        "iterations": requests,
        "total_prompt_tokens": prompt_tokens,
        "summarizer_calls": st.llm_calls,
        "summarizer_prompt_tokens": st.summarizer_prompt_tokens,
        "compression_ratio": None if ratio is None else round(ratio, 4),
        "success": stop == "answer" and check(answer, corpus),
        "facts_kept": share(kept),
        "facts_found": share(found),
        "facts_dropped": [gold(f) for f in corpus.founders if not kept[f.name]],
        "last_compressed": [m.content[:1000] for m in last if m.role == "tool" and m.content.startswith(COMPRESSED)],
        "stop": stop,
        "searches": searches,
        "answer": answer[:300],
        "breaker_tripped": st.tripped,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def total(strategy: str, key: str) -> int:
        return sum(int(r[key]) for r in rows if r["strategy"] == strategy)

    def mean(strategy: str, key: str) -> float | None:
        mine = [float(r[key]) for r in rows if r["strategy"] == strategy]
        return round(sum(mine) / len(mine), 3) if mine else None

    def rate(strategy: str) -> float | None:
        mine = [r for r in rows if r["strategy"] == strategy]
        return round(sum(r["success"] for r in mine) / len(mine), 3) if mine else None

    summary: dict[str, Any] = {}
    if total("windowed", "total_prompt_tokens"):
        ta, win = total("task_aware", "total_prompt_tokens"), total("windowed", "total_prompt_tokens")
        summary["tokens_ratio_taskaware_vs_windowed"] = round(ta / win, 3)
        both_ta = ta + total("task_aware", "summarizer_prompt_tokens")
        both_win = win + total("windowed", "summarizer_prompt_tokens")
        summary["tokens_ratio_taskaware_vs_windowed_incl_summarizer"] = round(both_ta / both_win, 3)
    summary["success_taskaware"] = rate("task_aware")
    for s in STRATEGIES:
        if any(r["strategy"] == s for r in rows):
            summary[f"success_{s}"] = rate(s)
            summary[f"prompt_tokens_{s}"] = total(s, "total_prompt_tokens")
            summary[f"facts_kept_{s}"] = mean(s, "facts_kept")
            summary[f"facts_found_{s}"] = mean(s, "facts_found")
    return summary


def run(
    console: Console | None = None,
    quick: bool = False,
    model: str = "local",
    trials: int | None = None,
    strategies: Sequence[Strategy] = STRATEGIES,
) -> dict[str, Any]:
    console = console or Console()
    n = trials if trials is not None else (1 if quick else 2)
    rows: list[dict[str, Any]] = []
    with (
        bench_model(model, N_CTX, console) as agent_model,
        bench_model(model, N_CTX, console) as summarizer,  # own KV cache: summaries keep the agent's prefix
        tempfile.TemporaryDirectory() as d,
    ):
        for trial in range(n):
            corpus = make_corpus(seed=1000 + trial)
            for strategy in strategies:
                row = asyncio.run(run_trial(strategy, trial, corpus, agent_model, summarizer, Path(d)))
                rows.append(row)
                console.print(
                    f"compression  {strategy:21s} trial {trial}: {row['iterations']} requests, "
                    f"{row['total_prompt_tokens']} prompt tok, ratio {row['compression_ratio']}, "
                    f"facts kept {row['facts_kept']} (found {row['facts_found']}), "
                    f"{'OK' if row['success'] else 'FAIL'} ({row['stop']}) {row['wall_s']} s"
                )
    return {
        "bench": "compression",
        "params": {
            "model": model,
            "n_ctx": N_CTX,
            "max_tokens": MAX_TOKENS,
            "summary_max_tokens": SUMMARY_MAX_TOKENS,
            "trials": n,
            "strategies": list(strategies),
            "task": f"{FOUNDERS} turns, one per co-founder, then the aggregate: who still works there, who left "
            "in which year (exact check of the last answer)",
            "layers": "layer 5 only (spill, noise, archive and provider editing off) to compare the strategies",
            "summarizer": "a second instance of the same model (own KV cache)",
            "facts_kept": "share of the gold facts (per co-founder: name + still there / year left) that one tool "
            "result of the last request states, in the passage about that co-founder (after the compression view); "
            "facts_found: the same over the raw results; see the module's rule",
        },
        "rows": rows,
        "summary": summarise(rows),
    }
