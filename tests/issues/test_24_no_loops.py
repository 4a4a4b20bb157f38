"""Issue 24 §4 with the bundled model: the newcomer's repo and task, no identical failing call run three times.

The coding task ran ``bash("cd repo && git status")`` five times from inside ``repo`` ("No such file
or directory" each time, differing only in bash's ``line N``) until it was stopped at 891 s. The
assertions hold whatever path the model takes: an identical call that failed twice is never run
again, and the run ends by itself (an answer, or the loop guard) within a few model calls.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kairos.agent.events import AgentEvent, FinalAnswer, ToolCallFinished
from kairos.agent.guard import canonical_arguments, failed
from kairos.app import build_agent
from kairos.config import KairosConfig
from kairos.context.session import SessionStore
from kairos.models.local import LocalModel
from kairos.testing import trajectory_problems
from kairos.tools.audit import NOT_RUN_KEY

pytestmark = pytest.mark.model
MAX_ITERATIONS = 8
"""A couple of minutes of model time on a 2-core CPU; the guard must end a loop well before."""
CONFIG = KairosConfig.model_validate(
    {
        "max_iterations": MAX_ITERATIONS,
        "status_bar": {"clock_start": datetime(2026, 3, 14, 15, 9, tzinfo=UTC), "clock_step_s": 0},
    }
)


def newcomer_repo(root: Path) -> Path:
    """A small Python repo with one failing test, committed, as a new user clones it: the folder is ``repo``."""
    repo = root / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# calc\n\nA tiny calculator. Run the tests with `python -m pytest`.\n")
    (repo / "calc.py").write_text('def add(a, b):\n    """The sum of a and b."""\n    return a - b\n')
    (repo / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    git = ["git", "-c", "user.name=New User", "-c", "user.email=new@example.org"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "calc with a test"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)
    return repo


async def test_fix_the_failing_test_runs_no_identical_failing_call_three_times(
    bundled_model: LocalModel, tmp_path: Path
) -> None:
    repo = newcomer_repo(tmp_path)
    agent = build_agent(bundled_model, repo, CONFIG)  # the working directory is the repo, as for the newcomer
    store = SessionStore(repo)
    session = store.new()
    try:
        events: list[AgentEvent] = [e async for e in agent.run(session, "fix the failing test in this repo")]
        messages = list(session.messages)
    finally:
        await session.aclose()
        store.close()
    done = [e for e in events if isinstance(e, ToolCallFinished)]
    for e in done:
        print(f"{e.call.name} {e.call.arguments} -> {e.result.content[:100]!r}")
    ran = [e for e in done if NOT_RUN_KEY not in e.result.metadata]
    failures = Counter((e.call.name, canonical_arguments(e.call.arguments)) for e in ran if failed(e.result))
    assert all(n <= 2 for n in failures.values()), failures
    end = [e for e in events if isinstance(e, FinalAnswer)]
    assert len(end) == 1, events[-1]
    print(f"{end[0].stop_reason}: {end[0].text[:300]!r}")
    assert end[0].stop_reason in ("answer", "loop_guard", "max_iterations")
    if end[0].stop_reason == "loop_guard":
        assert end[0].text.startswith("Stopped:")  # it says what happened and what to do
    assert trajectory_problems(messages) == []
