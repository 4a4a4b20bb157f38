"""Pluggable approvers: each says yes or no, and a broken one fails closed."""

from __future__ import annotations

import asyncio

from kairos.security.approval import (
    AllowApprover,
    ApprovalRequest,
    CallbackApprover,
    Decision,
    DenyApprover,
    InteractiveApprover,
    make_approver,
)

REQ = ApprovalRequest("write_file", {"path": "a.txt", "content": "x"}, "call_1", "s1")


async def test_deny_and_allow() -> None:
    assert not (await DenyApprover().decide(REQ)).approved
    assert (await AllowApprover().decide(REQ)).approved


async def test_callback_approver_sync_async_decision_and_failure() -> None:
    assert (await CallbackApprover(lambda r: r.tool == "write_file").decide(REQ)).approved

    async def later(r: ApprovalRequest) -> bool:
        await asyncio.sleep(0)
        return False

    assert not (await CallbackApprover(later).decide(REQ)).approved
    custom = await CallbackApprover(lambda r: Decision(False, "policy 7 forbids it", by="api")).decide(REQ)
    assert custom == Decision(False, "policy 7 forbids it", by="api")

    def broken(r: ApprovalRequest) -> bool:
        raise ConnectionError("endpoint down")

    failed = await CallbackApprover(broken, name="api").decide(REQ)
    assert not failed.approved and "endpoint down" in failed.reason and failed.by == "api"


async def test_interactive_yes_no_always_and_no_terminal() -> None:
    answers = iter(["y\n", "n\n", "a\n"])
    prompts: list[str] = []

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    approver = InteractiveApprover(ask)
    assert (await approver.decide(REQ)).approved
    assert 'write_file({"path": "a.txt", "content": "x"})' in prompts[0]
    assert not (await approver.decide(REQ)).approved
    assert (await approver.decide(REQ)).approved  # "always" for this tool...
    assert (await approver.decide(REQ)).approved  # ...so no fourth question
    assert len(prompts) == 3

    def closed(prompt: str) -> str:
        raise EOFError

    assert not (await InteractiveApprover(closed).decide(REQ)).approved


async def test_interactive_questions_never_interleave() -> None:
    active = 0
    overlap = False

    def ask(prompt: str) -> str:
        nonlocal active, overlap
        active += 1
        overlap = overlap or active > 1
        active -= 1
        return "y"

    approver = InteractiveApprover(ask)
    results = await asyncio.gather(*(approver.decide(REQ) for _ in range(5)))
    assert all(d.approved for d in results) and not overlap


def test_make_approver_denies_without_a_terminal() -> None:
    assert isinstance(make_approver("auto", interactive=False), DenyApprover)
    assert isinstance(make_approver("auto", interactive=True), InteractiveApprover)
    assert isinstance(make_approver("deny"), DenyApprover)
    assert isinstance(make_approver("allow"), AllowApprover)


def test_long_arguments_are_shortened_in_the_question() -> None:
    big = ApprovalRequest("write_file", {"content": "x" * 2000}, "c", "s")
    assert len(big.describe()) < 450 and big.describe().endswith("…)")
