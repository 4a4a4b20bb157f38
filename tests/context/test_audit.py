"""The prefix audit: is the previous request (minus its status) a byte-exact prefix of this one?"""

from __future__ import annotations

from kairos.context.audit import PrefixAudit, PrefixAuditor
from kairos.context.builder import status_message
from kairos.models.types import Message, ModelRequest, ToolSpec


def spec(name: str, description: str = "A tool.") -> ToolSpec:
    return ToolSpec(name, description, {"type": "object", "properties": {}})


TOOLS = (spec("list_dir"), spec("read_file"))
SYSTEM = "You are a test agent."


def request(
    messages: tuple[Message, ...],
    *,
    system: str = SYSTEM,
    tools: tuple[ToolSpec, ...] = TOOLS,
    status: str | None = "Time: now",
) -> ModelRequest:
    trailing = (status_message(status),) if status is not None else ()
    return ModelRequest(system, "", tools, messages + trailing, stable_prefix_len=len(messages))


Q = Message.user("list the files")
A = Message.assistant("here they are")
Q2 = Message.user("thanks")


def audited(*requests: ModelRequest, deliberate: str | None = None) -> PrefixAudit:
    """The audit of the last request, after the others were audited in order."""
    auditor = PrefixAuditor()
    for r in requests[:-1]:
        auditor.audit(r)
    return auditor.audit(requests[-1], deliberate)


def test_the_first_request_has_nothing_to_compare_with() -> None:
    found = PrefixAuditor().audit(request((Q,)))
    assert found.ok and found.first_request
    assert found.describe() == "first request"


def test_an_appended_turn_keeps_the_prefix() -> None:
    found = audited(request((Q,)), request((Q, A, Q2)))
    assert found.ok and not found.first_request and found.diverged_at is None
    assert found.stable_items == 1 + len(TOOLS) + 1  # system, each tool, each message of the previous request
    assert found.describe() == "prefix ok (4 items reused)"


def test_the_trailing_status_is_not_part_of_the_prefix() -> None:
    assert audited(request((Q,), status="Time: 10:00"), request((Q, A), status="Time: 10:01")).ok
    assert audited(request((Q,), status="Time: 10:00"), request((Q, A), status=None)).ok


def test_equal_copies_count_as_the_same_message() -> None:
    assert audited(request((Q,)), request((Message.user("list the files"), A))).ok


def test_a_changed_system_prompt_is_found_with_its_byte_offset() -> None:
    found = audited(request((Q,)), request((Q, A), system="You are a best agent."))
    assert not found.ok
    assert found.diverged_at == f"system byte {SYSTEM.index('test')}"
    assert found.describe() == f"PREFIX BROKEN at system byte {SYSTEM.index('test')}"


def test_a_changed_tool_is_found_by_index_and_byte_offset() -> None:
    changed = (TOOLS[0], spec("read_file", "A tool that reads."))
    found = audited(request((Q,)), request((Q, A), tools=changed))
    before, after = TOOLS[1].serialized(), changed[1].serialized()
    offset = before.index("A tool.") + len("A tool")  # where "." and " that reads." part
    assert before[:offset] == after[:offset] and before[offset] != after[offset]
    assert found.diverged_at == f"tools[1] byte {offset}"


def test_an_added_or_removed_tool_breaks_the_prefix_at_its_position() -> None:
    added = audited(request((Q,)), request((Q, A), tools=(*TOOLS, spec("write_file"))))
    assert not added.ok and added.diverged_at == "tools[2]"
    removed = audited(request((Q,)), request((Q, A), tools=TOOLS[:1]))
    assert not removed.ok and removed.diverged_at == "tools[1]"


def test_reordered_tools_break_the_prefix() -> None:
    found = audited(request((Q,)), request((Q, A), tools=TOOLS[::-1]))
    assert not found.ok and found.diverged_at is not None and found.diverged_at.startswith("tools[0] byte ")


def test_a_rewritten_message_is_found_with_its_byte_offset() -> None:
    edited = Message.user("list the folders")
    found = audited(request((Q, A)), request((edited, A, Q2)))
    before, after = Q.serialized(), edited.serialized()
    offset = before.index("list the f") + len("list the f")
    assert before[:offset] == after[:offset] and before[offset] != after[offset]
    assert not found.ok and found.diverged_at == f"messages[0] byte {offset}"
    assert found.stable_items == 1 + len(TOOLS) + 2


def test_a_rewritten_later_message_is_found_past_the_unchanged_ones() -> None:
    found = audited(request((Q, A)), request((Q, Message.assistant("here they were"), Q2)))
    assert not found.ok and found.diverged_at is not None and found.diverged_at.startswith("messages[1] byte ")


def test_a_shorter_history_is_reported_as_shrunk() -> None:
    found = audited(request((Q, A, Q2)), request((Q, A)))
    assert not found.ok and found.diverged_at == "messages[2] (history shrank)"


def test_only_the_previous_request_is_compared() -> None:
    """A break is reported once: the request after it is compared with the broken one."""
    broken = request((Q,), system="Other.")
    assert audited(request((Q,)), broken, request((Q, A), system="Other.")).ok


def test_a_deliberate_change_is_described_not_called_broken() -> None:
    found = audited(
        request((Q,)), request((Q, A), tools=(*TOOLS, spec("write_file"))), deliberate="tools: added write_file"
    )
    assert not found.ok and found.deliberate == "tools: added write_file"
    assert found.diverged_at == "tools[2]"
    assert found.describe() == "prefix changed at tools[2] on purpose (tools: added write_file)"


def test_a_deliberate_note_without_a_change_is_just_ok() -> None:
    found = audited(request((Q,)), request((Q, A)), deliberate="tools: nothing new")
    assert found.ok and found.deliberate is None


def test_the_same_tools_tuple_is_audited_like_an_equal_one() -> None:
    """The serialised head is reused for the same tools object; equal but new objects give the same verdict."""
    auditor = PrefixAuditor()
    auditor.audit(request((Q,), tools=TOOLS))
    assert auditor.audit(request((Q, A), tools=TOOLS)).ok
    assert auditor.audit(request((Q, A, Q2), tools=(spec("list_dir"), spec("read_file")))).ok
    assert not auditor.audit(request((Q, A, Q2), tools=(spec("list_dir"), spec("grep")))).ok
