"""Per-message memoisation: only new or replaced messages are recomputed."""

from __future__ import annotations

from kairos.models._memo import MessageMemo, identical_prefix
from kairos.models.types import Message


def test_identical_prefix_finds_the_first_replaced_message() -> None:
    msgs = [Message.user(f"m{i}") for i in range(50)]
    assert identical_prefix(msgs, (*msgs, Message.user("new"))) == 50
    replaced = list(msgs)
    replaced[20] = Message.user("other")
    assert identical_prefix(msgs, replaced) == 20
    assert identical_prefix(msgs, msgs[:10]) == 10 and identical_prefix([], msgs) == 0


def test_memo_recomputes_only_new_and_replaced_messages() -> None:
    seen: list[str] = []
    memo = MessageMemo(lambda m: seen.append(m.content) or len(m.content))
    msgs = [Message.user("a"), Message.user("bb")]
    memo.update(msgs)
    assert memo.update([*msgs, Message.user("ccc")]) == 2
    assert memo.update([msgs[0], Message.user("dddd")]) == 1
    assert seen == ["a", "bb", "ccc", "dddd"] and memo.values == [1, 4]
