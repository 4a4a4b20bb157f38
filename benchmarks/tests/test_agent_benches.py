"""The agent benches' plumbing and scoring, driven by scripted models (real mail servers, real commands).

A scripted model that does the right thing scores 1 on every scenario; one that gets a scenario
wrong scores 0 on it: the scores come from the servers' and stores' state, not from the replies.
"""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from kairos.models.types import Message, ModelRequest, ModelResponse
from kairos.testing import ScriptedModel, call, reply
from kairos.testing.mailserver import find_dovecot
from kairos_bench import ASYNC_AGENT, EMAIL_AGENT, async_agent, email_agent

QUIET = Console(file=io.StringIO())
needs_dovecot = pytest.mark.skipif(find_dovecot() is None, reason="dovecot is not installed (make test-deps)")


def _visible(request: ModelRequest) -> list[Message]:
    return [m for m in request.messages if not m.content.startswith("<agent_status>")]


def _done(request: ModelRequest) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, json.loads(c.arguments)) for m in request.messages for c in m.tool_calls]


# -- email-agent ----------------------------------------------------------------------------------


def email_policy(wrong: bool = False) -> Any:
    """One step of the Exp 6-1 workflow for the newest email; ``wrong`` mishandles complaint and advert."""

    def respond(request: ModelRequest) -> ModelResponse:
        if [t.name for t in request.tools] == ["classify"]:  # the handler's triage
            text = request.messages[0].content.lower()
            kind = "meeting" in text and "a meeting invitation" or "complaint" in text and "a customer complaint"
            return reply("", call("classify", {"case": kind or "advertising or a newsletter"}))
        seen = _visible(request)
        events = [m.content for m in seen if "event: email.received" in m.content]
        last_event = events[-1]
        uid = int(re.search(r"uid: (\d+)", last_event).group(1))  # type: ignore[union-attr]
        subject = re.search(r"subject: (.*)", last_event).group(1).lower()  # type: ignore[union-attr]
        start = len(seen) - 1 - next(i for i, m in enumerate(reversed(seen)) if "event: email.received" in m.content)
        mine = [c.name for m in seen[start:] for c in m.tool_calls]
        if "meeting" in subject:
            if "check_calendar" not in mine:
                return reply("", call("check_calendar", {"start": "2026-12-03T14:00", "end": "2026-12-03T15:00"}))
            if "draft_reply" not in mine:
                return reply("", call("draft_reply", {"uid": uid, "body": "I have a conflict; another time?"}))
        elif "complaint" in subject:
            if wrong and "move_email" not in mine:
                return reply("", call("move_email", {"uid": uid, "folder": "Archive"}))
            if not wrong and "flag_email" not in mine:
                return reply(
                    "",
                    call("notify_user", {"message": "Complaint from Jane: order 4471 arrived broken"}),
                    call("flag_email", {"uid": uid, "flag": "high priority"}),
                )
        elif wrong and "flag_email" not in mine:
            return reply("", call("flag_email", {"uid": uid, "flag": "flagged"}))
        elif "move_email" not in mine:
            return reply("", call("move_email", {"uid": uid, "folder": "Archive"}))
        return reply("Done.")

    return respond


@needs_dovecot
def test_email_bench_scores_a_right_agent_1_on_every_scenario_in_both_setups() -> None:
    model = ScriptedModel([email_policy()] * 80)
    out = EMAIL_AGENT.run(console=QUIET, trials=1, model=model)
    assert out["bench"] == "email-agent" and out["params"]["model"] == "scripted"
    assert [(r["setup"], r["scenario"]) for r in out["rows"]] == [
        (setup, s) for setup in ("handlers", "instructions") for s in ("invite", "complaint", "advert")
    ]
    assert all(r["success"] for r in out["rows"]), out["rows"]
    summary = out["summary"]
    assert summary["setup"] == "handlers" and summary["email_success"] == 1.0 and summary["trials"] == 1
    assert summary["email_success_instructions"] == summary["complaint_success_instructions"] == 1.0
    handled = [
        r for r in model.requests if any("This email is a customer complaint: flag it" in m.content for m in r.messages)
    ]
    assert handled and not {"bash", "write_file"} & {t.name for t in handled[0].tools}  # the setup's builtins
    invite, complaint, advert = out["rows"][:3]
    assert invite["checks"] == {"draft": True, "calendar_checked": True, "draft_declines": True}
    assert complaint["checks"]["key_facts"] and complaint["actions"] == ["flag_email"]
    assert advert["actions"] == ["move_email"] and advert["checks"]["folders"] == ["Archive"]
    assert all(r["model_calls"] >= 2 and r["tool_calls"] >= 1 and r["prompt_tokens"] > 0 for r in out["rows"])
    assert out["summary"]["median_seconds"] is not None


@needs_dovecot
def test_email_bench_scores_mishandled_mails_0() -> None:
    model = ScriptedModel([email_policy(wrong=True)] * 40)
    out = email_agent.run(console=QUIET, trials=1, model=model, modes="instructions")
    by = {r["scenario"]: r for r in out["rows"]}
    assert by["invite"]["success"]
    assert not by["complaint"]["success"] and by["complaint"]["checks"]["flagged"] is False  # archived instead
    assert not by["advert"]["success"] and by["advert"]["checks"] == {
        "archived": True,
        "untouched": False,  # flagged as well as archived
        "folders": ["Archive"],
    }
    assert out["summary"]["email_success"] == pytest.approx(1 / 3, abs=0.001)
    assert out["summary"]["complaint_success"] == 0.0 and out["summary"]["invite_success"] == 1.0


# -- async-agent ----------------------------------------------------------------------------------

STARTED = re.compile(r"Started task (t-[0-9a-f]+)")
PROGRESS = re.compile(r"progress (\d+)%")
TASK = re.compile(r"(t-[0-9a-f]+) \(")


def _ids(seen: list[Message]) -> list[str]:
    return [tid for m in seen if m.role == "tool" for tid in STARTED.findall(m.content)]


def async_policy(blocking: bool = False) -> Any:
    """Exp 6-2 done right; ``blocking`` runs the analysis in the foreground (then the time answer is late)."""
    state: dict[str, Any] = {}

    def respond(request: ModelRequest) -> ModelResponse:
        seen = _visible(request)
        first, last = seen[0].content, seen[-1]
        ids = _ids(seen)
        if "analyse_logs" in first:
            if blocking and not any(c.name == "bash" for m in seen for c in m.tool_calls):
                return reply("", call("bash", {"command": "./analyse_logs.sh"}))
            if not blocking and not ids:
                return reply("", call("start_command", {"command": "./analyse_logs.sh", "title": "logs"}))
            if "What time is it?" in last.content:
                return reply(f"It is {datetime.now(UTC):%H:%M} UTC.")
            found = re.search(r"analysis: .*", last.content)
            if found:
                return reply(f"Finished: {found.group(0)}")
            return reply("It is running.")
        if "sales_report" in first:
            if not ids:
                return reply("", call("start_command", {"command": "./sales_report.sh", "title": "sales"}))
            text = "\n".join(m.content for m in seen)
            units = re.search(r"Q3 sales: (\d+) units", text)
            if units and "Japanese" in text and "web page" in text:
                return reply(f"<html><body><h1>売上報告</h1><p>第3四半期: {units.group(1)}</p></body></html>")
            return reply("Noted.")
        if "rebuild_index" in first:
            if not ids:
                return reply("", call("start_command", {"command": "./rebuild_index.sh", "title": "index"}))
            if "Never mind" in last.content:
                return reply("", call("cancel_task", {"task_id": ids[0]}))
            return reply("Stopped." if "Cancelled" in last.content else "Indexing.")
        if not ids:
            jobs = ("north", "south", "east")
            return reply("", *(call("start_command", {"command": f"./{j}.sh", "title": j}) for j in jobs))
        if "<task_result" in last.content and not state.get("queried"):
            state["queried"] = True
            done = re.search(r'<task_result id="(t-[0-9a-f]+)"', last.content).group(1)  # type: ignore[union-attr]
            return reply("", *(call("task_status", {"task_id": t}) for t in ids if t != done))
        if last.role == "tool" and PROGRESS.search(last.content) and not state.get("cancelled"):
            state["cancelled"] = True
            shown = [(TASK.search(m.content), PROGRESS.search(m.content)) for m in seen[-2:]]
            slow = [tid.group(1) for tid, pct in shown if tid and pct and int(pct.group(1)) < 50]
            return reply("", *(call("cancel_task", {"task_id": t}) for t in slow))
        return reply("Report: done.")

    return respond


def test_async_bench_scores_a_right_agent_1_on_every_scenario() -> None:
    model = ScriptedModel([async_policy()] * 60)
    out = ASYNC_AGENT.run(console=QUIET, trials=1, model=model, speed=8)
    by = {r["scenario"]: r for r in out["rows"]}
    assert list(by) == list(async_agent.SCENARIOS)
    assert all(r["success"] for r in out["rows"]), out["rows"]
    assert out["summary"]["async_success"] == 1.0
    assert by["interrupt"]["checks"] == {"interrupt_recorded": True, "cancel_call": True, "task": "cancelled"}
    assert by["parallel"]["checks"]["fast"] == "done" and by["parallel"]["checks"]["status_queries"] == 2
    assert by["batch"]["checks"]["japanese"] and by["batch"]["checks"]["has_figure"]


def test_async_bench_scores_a_blocking_command_0() -> None:
    model = ScriptedModel([async_policy(blocking=True)] * 20)
    out = async_agent.run(console=QUIET, trials=1, model=model, speed=8, scenarios=("time",))
    [row] = out["rows"]
    assert not row["success"] and row["checks"]["time_answered_first"] is False
    assert out["summary"]["async_success"] == 0.0 and out["summary"]["time_success"] == 0.0


def test_the_parallel_score_needs_the_slow_job_cancelled_below_half_and_the_middle_one_kept() -> None:
    rates = {"north": 3, "south": 2, "east": 1}
    right = {"north": ("done", 100.0), "south": ("done", 100.0), "east": ("cancelled", 36.0)}
    assert async_agent.score_parallel(right, rates, 2)["success"]
    late = {**right, "east": ("cancelled", 55.0)}
    both = {**right, "south": ("cancelled", 70.0)}
    none = {**right, "east": ("done", 100.0)}
    assert not any(async_agent.score_parallel(t, rates, 2)["success"] for t in (late, both, none))


def test_the_clock_check_takes_12_and_24_hour_times_near_now_only() -> None:
    lo, hi = datetime(2026, 12, 1, 15, 4, tzinfo=UTC), datetime(2026, 12, 1, 15, 6, tzinfo=UTC)
    assert async_agent._clock_ok("It is 15:05 UTC.", lo, hi) and async_agent._clock_ok("It's 3:05 pm", lo, hi)
    assert async_agent._clock_ok("The current time is 2026-12-01T15:05:40 UTC", lo, hi)
    assert not async_agent._clock_ok("It is 10:00.", lo, hi) and not async_agent._clock_ok("no idea", lo, hi)
