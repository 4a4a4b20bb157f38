"""The loop guard itself: what counts as the same result, a failure, a repeat, progress."""

from __future__ import annotations

import pytest

from kairos.agent.guard import (
    IDLE_STEPS,
    REPEATED_FAILURE,
    REUSED,
    STOP_AT,
    WARN_AT,
    LoopGuard,
    canonical_arguments,
    failed,
    normalise_result,
)
from kairos.models.types import ToolCall
from kairos.testing import call
from kairos.tools.audit import NOT_RUN_KEY
from kairos.tools.base import ToolResult
from kairos.tools.function import tool


@tool(read_only=True)
def read_file(path: str) -> str:
    """Read a file."""
    return path


@tool(read_only=True, volatile=True)
def task_status(task_id: str) -> str:
    """A task's progress."""
    return task_id


@tool(side_effects=True)
def bash(command: str) -> str:
    """Run a command."""
    return command


@tool(side_effects=True)
def move_email(uid: int) -> str:
    """Move a mail."""
    return str(uid)


@tool
def lookup(key: str) -> str:
    """A tool that declares nothing."""
    return key


def exited(text: str, code: int) -> ToolResult:
    """What the bash tool returns for a command that exited with ``code``."""
    return ToolResult(text + (f"\n[exit code {code}]" if code else ""), metadata={"exit_code": code})


CD_REPO = call("bash", {"command": "cd repo && git status"})


# ---- the guard itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ('{"a": 1, "b": [1, 2]}', '{"b":[1,2],"a":1}'),  # key order and spacing do not matter
        ('{"path": "."}', ' {\n  "path": "."\n} '),
        ("not json", "  not json\n"),  # not JSON: compared as written, stripped
    ],
)
def test_arguments_are_compared_canonically(a: str, b: str) -> None:
    assert canonical_arguments(a) == canonical_arguments(b)


def test_different_arguments_stay_different() -> None:
    assert canonical_arguments('{"a": 1}') != canonical_arguments('{"a": "1"}')
    assert canonical_arguments('{"a": 1}') != canonical_arguments('{"a": 1, "b": null}')


def test_the_same_call_in_another_spelling_counts_as_the_same() -> None:
    guard = LoopGuard()
    assert guard.observe(call("ls", '{"path": ".", "all": true}'), ToolResult("a b")) == 1
    assert guard.observe(call("ls", '{"all":true,"path":"."}'), ToolResult("a b")) == 2


def test_it_warns_at_three_and_stops_at_four() -> None:
    assert (WARN_AT, STOP_AT) == (3, 4)
    guard = LoopGuard()
    counts = [guard.observe(call("ls", {"path": "."}), ToolResult("same")) for _ in range(4)]
    assert counts == [1, 2, 3, 4]
    assert [n >= guard.warn_at for n in counts] == [False, False, True, True]
    assert [n >= guard.stop_at for n in counts] == [False, False, False, True]
    c = call("ls", {"path": "."})
    assert "call #3 of 'ls'" in guard.warning(c, 3) and "same result" in guard.warning(c, 3)
    assert "'ls' was called 4 times" in guard.stop_message(c, 4) and "looping" in guard.stop_message(c, 4)


def test_different_results_are_not_a_loop() -> None:
    guard = LoopGuard()
    assert [guard.observe(call("tick"), ToolResult(str(i))) for i in range(5)] == [1] * 5


def test_other_tools_or_arguments_are_counted_apart() -> None:
    guard = LoopGuard()
    guard.observe(call("read", {"path": "a"}), ToolResult("x"))
    assert guard.observe(call("read", {"path": "b"}), ToolResult("x")) == 1
    assert guard.observe(call("grep", {"path": "a"}), ToolResult("x")) == 1
    assert guard.observe(call("read", {"path": "a"}), ToolResult("x")) == 2


def test_thresholds_are_configurable() -> None:
    guard = LoopGuard(warn_at=2, stop_at=2)
    guard.observe(call("x"), ToolResult("r"))
    assert guard.observe(call("x"), ToolResult("r")) >= guard.stop_at


def test_masks_escalate_from_one_reply_to_held_until_something_changes_the_world() -> None:
    guard = LoopGuard()
    read = call("read_email", {"uid": 2})
    guard.observe(read, ToolResult("mail"))
    assert guard.take_masked() == ()
    guard.observe(read, ToolResult("mail"))
    assert guard.take_masked() == ("read_email",)
    assert guard.take_masked() == ()  # the second repeat masks one reply only
    guard.observe(read, ToolResult("mail"))
    assert guard.take_masked() == guard.take_masked() == ("read_email",)  # the third holds it
    guard.observe(call("check_calendar"), ToolResult("free"))  # read-only: nothing changed
    assert guard.take_masked() == ("read_email",)
    guard.observe(call("move_email", {"uid": 2}), ToolResult("moved"), move_email)
    assert guard.take_masked() == ()


def test_the_same_call_three_times_in_a_row_is_masked_once_even_when_its_result_changes() -> None:
    guard = LoopGuard()
    sensor = call("read_sensor", {"id": "t1"})
    for value in range(2):
        guard.observe(sensor, ToolResult(f"temperature {20 + value} C"))
    assert guard.take_masked() == ()  # two in a row with new results: progress, maybe
    guard.observe(sensor, ToolResult("temperature 22 C"))
    assert guard.take_masked() == ("read_sensor",)
    guard.observe(call("check_calendar"), ToolResult("free"))
    guard.observe(sensor, ToolResult("temperature 23 C"))  # the run of repeats was broken
    assert guard.take_masked() == ()


def test_a_clock_that_only_ticks_is_the_same_result() -> None:
    guard = LoopGuard()
    clock = call("current_time", {"timezone": "UTC"})
    assert guard.observe(clock, ToolResult("2026-05-04T10:00:00+00:00 (Monday) in UTC, UTC offset +00:00")) == 1
    assert guard.observe(clock, ToolResult("2026-05-04T10:00:07+00:00 (Monday) in UTC, UTC offset +00:00")) == 2
    assert guard.take_masked() == ("current_time",)


# ---- what counts as the same result ------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [  # the loop: bash numbers its own errors by the lines its shell has read
        ("bash: line 1: cd: repo: No such file or directory\n[exit code 1]",
         "bash: line 6: cd: repo: No such file or directory\n[exit code 1]"),
        ("/bin/bash: -c: line 3: syntax error", "/bin/bash: -c: line 9: syntax error"),
        ("started 2026-05-04T10:00:00.123Z", "started 2026-05-04T10:00:09.999Z"),
        ("Thu Dec  3 09:10:55 UTC 2026", "Thu Dec  3 09:11:02 UTC 2026"),
        ("1 failed, 2 passed in 0.03s", "1 failed, 2 passed in 1.27s"),
        ("real\t0m0.004s", "real\t0m0.131s"),
        ("took 12 ms", "took 340 ms"),
        ("server pid 4242 ready", "server pid 4317 ready"),
        ("[1] 12345", "[1] 12399"),
        ("wrote /tmp/tmpa1b2c3/out.txt", "wrote /tmp/tmpzz9y8x/out.txt"),
        ("E  fixture at /tmp/pytest-of-root/pytest-3/test_a0", "E  fixture at /tmp/pytest-of-root/pytest-7/test_a0"),
        ("The full output is in .kairos/spill/bash-a1.log.", "The full output is in .kairos/spill/bash-b2.log."),
        ("<Thing object at 0x7f3a2b1c0d90>", "<Thing object at 0x7f99aa00bb11>"),
    ],
)  # fmt: skip
def test_noise_does_not_make_a_result_new(a: str, b: str) -> None:
    assert a != b
    assert normalise_result(a) == normalise_result(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [  # real progress stays progress
        ("1  x = 1\n2  y = 2", "1  x = 1\n2  y = 3"),  # a file's contents changed
        ("1 failed, 2 passed in 0.03s", "3 passed in 0.03s"),  # the tests now pass
        ("FAILED test_calc.py::test_add - assert 3 == 4", "FAILED test_calc.py::test_add - assert 4 == 5"),
        ('  File "calc.py", line 3, in add', '  File "calc.py", line 7, in add'),  # a traceback's line is real
        ("count: 3", "count: 4"),
        ("bash: line 1: cd: repo: No such file or directory", "bash: line 1: cd: src: No such file or directory"),
        ("on 2026-05-04", "on 2026-05-05"),  # a date alone is data
    ],
)
def test_a_real_change_is_still_a_new_result(a: str, b: str) -> None:
    assert normalise_result(a) != normalise_result(b)


def test_what_counts_as_a_failure() -> None:
    assert failed(ToolResult("Unknown tool", is_error=True))
    assert failed(exited("bash: line 1: cd: repo: No such file or directory", 1))
    assert failed(ToolResult("[the shell exited (code 2)]", metadata={"shell_exit_code": 2}))
    assert not failed(exited("ok", 0))
    assert not failed(ToolResult("[the shell exited (code 0)]", metadata={"shell_exit_code": 0}))
    assert not failed(ToolResult("Error: this text is output, not a failure"))


# ---- an identical call that failed twice -------------------------------------------------------


def test_an_identical_call_that_failed_twice_is_not_run_a_third_time() -> None:
    guard = LoopGuard()
    for line in (1, 6):
        assert guard.refusal(CD_REPO) is None
        guard.observe(CD_REPO, exited(f"bash: line {line}: cd: repo: No such file or directory", 1), bash)
    refusal = guard.refusal(CD_REPO)
    assert refusal is not None and refusal.is_error and refusal.metadata[NOT_RUN_KEY] == REPEATED_FAILURE
    assert "failed 2 times" in refusal.content and "cd: repo: No such file or directory" in refusal.content
    spelled_otherwise = call("bash", '{ "command" : "cd repo && git status" }')
    assert guard.refusal(spelled_otherwise) is not None
    assert guard.refusal(call("bash", {"command": "git status"})) is None


def test_the_status_says_why_once() -> None:
    guard = LoopGuard()
    for _ in range(2):
        guard.observe(CD_REPO, exited("bash: line 1: cd: repo: No such file or directory", 1), bash)
    assert guard.status_lines() == []  # nothing refused yet
    refusal = guard.refusal(CD_REPO)
    assert refusal is not None
    (note,) = guard.status_lines()
    assert note.startswith('Loop guard: `bash {"command":"cd repo && git status"}` failed 2 times')
    assert "No such file" not in note  # the status is built from names and counts, never from tool output
    assert guard.status_lines() == [note]  # until a reply to the request that carried it
    guard.delivered()
    assert guard.status_lines() == []
    guard.observe(CD_REPO, refusal, bash)
    assert guard.refusal(CD_REPO) is not None  # still refused...
    assert guard.status_lines() == []  # ...but not explained again


def test_failures_are_forgotten_when_something_changes_the_world() -> None:
    guard = LoopGuard()
    tests = call("bash", {"command": "pytest -q"})
    for _ in range(2):
        guard.observe(tests, exited("1 failed in 0.02s", 1), bash)
    guard.observe(call("read_file", {"path": "calc.py"}), ToolResult("1  def add(a, b): ..."), read_file)
    guard.observe(call("bash", {"command": "false"}), exited("", 1), bash)  # a failed command changed nothing
    assert guard.refusal(tests) is not None
    guard.observe(call("bash", {"command": "sed -i s/-/+/ calc.py"}), exited("", 0), bash)  # an edit that worked
    assert guard.refusal(tests) is None  # the fix is tested: it runs again


def test_a_call_that_worked_in_between_starts_its_count_again() -> None:
    guard = LoopGuard()
    flaky = call("lookup", {"key": "a"})
    guard.observe(flaky, ToolResult("timed out", is_error=True), lookup)
    guard.observe(flaky, ToolResult("found a"), lookup)
    guard.observe(flaky, ToolResult("timed out", is_error=True), lookup)
    assert guard.refusal(flaky) is None


def test_new_input_lifts_the_refusals_and_the_reuse() -> None:
    guard = LoopGuard()
    for _ in range(2):
        guard.observe(CD_REPO, exited("bash: line 1: cd: repo: No such file or directory", 1), bash)
    read = call("read_file", {"path": "a"})
    guard.observe(read, ToolResult("old"), read_file)
    assert step(guard, (read, ToolResult("old"))) is None and step(guard, (read, ToolResult("old"))) is None
    guard.world_changed()  # "I created repo/ and changed a, try again"
    assert guard.refusal(CD_REPO) is None
    assert guard.earlier_result(read) is None
    assert step(guard, (read, ToolResult("old"))) is None  # the idle steps before the news do not count


# ---- an identical read-only call within a turn -------------------------------------------------


def test_an_identical_read_only_call_is_answered_from_the_first_result() -> None:
    guard = LoopGuard()
    read = call("read_file", {"path": "a.txt"})
    assert guard.earlier_result(read) is None
    guard.observe(read, ToolResult("1  hello", metadata={"lines": 1}), read_file)
    again = guard.earlier_result(call("read_file", '{"path":"a.txt"}'))
    assert again is not None and again.content == "1  hello" and not again.is_error
    assert again.metadata == {"lines": 1, NOT_RUN_KEY: REUSED}
    assert guard.observe(read, again, read_file) == 2  # a repeat all the same: it counts towards the masks
    assert guard.earlier_result(call("read_file", {"path": "b.txt"})) is None


def test_a_call_with_side_effects_in_between_means_reading_again() -> None:
    guard = LoopGuard()
    read = call("read_file", {"path": "a.txt"})
    guard.observe(read, ToolResult("1  hello"), read_file)
    guard.observe(call("bash", {"command": "echo bye > a.txt"}), exited("", 0), bash)
    assert guard.earlier_result(read) is None


def test_only_declared_read_only_tools_with_stable_answers_are_reused() -> None:
    guard = LoopGuard()
    status, plain = call("task_status", {"task_id": "t-1"}), call("lookup", {"key": "k"})
    guard.observe(status, ToolResult("running, 40%"), task_status)  # its answer changes by itself
    guard.observe(plain, ToolResult("v"), lookup)  # declares nothing: maybe a counter, maybe a die
    assert guard.earlier_result(status) is None
    assert guard.earlier_result(plain) is None


def test_a_failed_read_only_call_is_not_reused_but_refused_after_two() -> None:
    guard = LoopGuard()
    read = call("read_file", {"path": "missing.txt"})
    guard.observe(read, ToolResult("No such file: missing.txt", is_error=True), read_file)
    assert guard.earlier_result(read) is None and guard.refusal(read) is None  # a second try is allowed
    guard.observe(read, ToolResult("No such file: missing.txt", is_error=True), read_file)
    refusal = guard.refusal(read)
    assert refusal is not None and refusal.metadata[NOT_RUN_KEY] == REPEATED_FAILURE


# ---- no progress ---------------------------------------------------------------------------------


def step(guard: LoopGuard, *pairs: tuple[ToolCall, ToolResult]) -> str | None:
    for c, result in pairs:
        guard.observe(c, result)
    return guard.end_step()


def test_steps_that_bring_nothing_new_stop_the_run() -> None:
    assert IDLE_STEPS == 3
    guard = LoopGuard()
    a, b = call("lookup", {"key": "a"}), call("lookup", {"key": "b"})
    assert step(guard, (a, ToolResult("A"))) is None
    assert step(guard, (b, ToolResult("B"))) is None
    assert step(guard, (a, ToolResult("A"))) is None  # idle 1
    assert step(guard, (b, ToolResult("B"))) is None  # idle 2
    message = step(guard, (a, ToolResult("A")))  # idle 3, though no pair reached STOP_AT (a: 3, b: 2)
    assert message is not None and message.startswith("Stopped: the last 3 steps brought nothing new")
    assert '`lookup {"key":"a"}`' in message and "whose result did not change" in message
    assert "continue the session" in message


def test_one_new_result_in_a_step_is_progress() -> None:
    guard = LoopGuard()
    a = call("lookup", {"key": "a"})
    step(guard, (a, ToolResult("A")))
    for i in range(2 * IDLE_STEPS):
        assert step(guard, (a, ToolResult("A")), (call("lookup", {"key": str(i)}), ToolResult(str(i)))) is None


def test_a_result_given_without_running_is_never_new() -> None:
    guard = LoopGuard()
    for line in (1, 6):
        assert step(guard, (CD_REPO, exited(f"bash: line {line}: cd: repo: No such file or directory", 1))) is None
    refusal = guard.refusal(CD_REPO)
    assert refusal is not None
    assert step(guard, (CD_REPO, refusal)) is None  # the first refusal: new text, but nothing ran
    message = step(guard, (CD_REPO, refusal))
    assert message is not None and "keeps failing ('bash: line 6: cd: repo: No such file or directory')" in message


def test_a_step_without_calls_is_not_counted() -> None:
    guard = LoopGuard(idle_steps=1)
    assert guard.end_step() is None
