"""Layer 2: delete noise without summarising it (summarising noise only wastes tokens).

Pure functions of the stored trajectory: the same messages always give the same pointers.
Three rules, each leaving a short pointer instead of the result:

- duplicate: a result byte-identical to an earlier result of the same tool. Replaced at first
  sight (before the model sees it), so it costs no prompt-cache break.
- superseded read: a ``read_file`` result when the same path and range was read again later;
  the later copy is the current one (the file may have changed in between).
- retried error: an error result followed by a success of the same tool; the pointer keeps
  the error's first line, because the lesson ("that argument was wrong") is still useful.

The last two edit results the model has already seen, which breaks the prompt cache after
them; the caller applies them in one batch near the window limit, not every round.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from kairos.models.types import ArgumentsError, Message, ToolCall

_READ_TOOL = "read_file"
_MIN_SAVING = 40
"""A pointer must save at least this many characters, or the result is left alone."""


def calls_by_id(messages: Sequence[Message]) -> dict[str, ToolCall]:
    """Every assistant tool call in ``messages``, by id."""
    return {c.id: c for m in messages if m.role == "assistant" for c in m.tool_calls}


def describe_call(call: ToolCall | None, limit: int = 160) -> str:
    """``name(args)`` in one short line, for pointers and summaries."""
    if call is None:
        return "a tool call"
    args = " ".join(call.arguments.split())
    if len(args) > limit:
        args = args[: limit - 1] + "…"
    return f"{call.name}({args})"


def _read_key(call: ToolCall) -> tuple[str, int, int] | None:
    try:
        args = call.parsed_arguments()
    except ArgumentsError:
        return None
    if not isinstance(args.get("path"), str):
        return None
    try:
        return args["path"].strip(), int(args.get("offset", 1)), int(args.get("limit", 200))
    except (TypeError, ValueError):
        return None


def _worth(original: str, pointer: str, min_chars: int) -> bool:
    return len(original) >= min_chars and len(original) - len(pointer) >= _MIN_SAVING


def duplicates(
    messages: Sequence[Message],
    *,
    min_chars: int = 200,
    start: int = 0,
    first: dict[tuple[str | None, str], int] | None = None,
) -> dict[int, str]:
    """Pointers for results identical to an earlier result of the same tool (seq → text).

    Incremental when given ``first`` (the index of results before ``start``, updated in place):
    only messages from ``start`` on are looked at.
    """
    first = {} if first is None else first
    out: dict[int, str] = {}
    for seq in range(start, len(messages)):
        m = messages[seq]
        if m.role != "tool":
            continue
        key = (m.name, m.content)
        if key not in first:
            first[key] = seq
            continue
        earlier = messages[first[key]]
        pointer = (
            f"[duplicate: identical to the result of {describe_call(_call_of(messages, first[key]))} "
            f"(call {earlier.tool_call_id}) above; {len(m.content):,} chars not repeated]"
        )
        if _worth(m.content, pointer, min_chars):
            out[seq] = pointer
    return out


def _call_of(messages: Sequence[Message], seq: int) -> ToolCall | None:
    """The call the result at ``seq`` answers (its reply is the assistant message just before the results)."""
    want = messages[seq].tool_call_id
    for i in range(seq - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant":
            return next((c for c in m.tool_calls if c.id == want), None)
    return None


def superseded_reads(messages: Sequence[Message], *, min_chars: int = 200) -> dict[int, str]:
    """Pointers for ``read_file`` results whose path and range were read again later."""
    calls = calls_by_id(messages)
    latest: dict[tuple[str, int, int], int] = {}
    reads: list[tuple[int, tuple[str, int, int]]] = []
    for seq, m in enumerate(messages):
        call = calls.get(m.tool_call_id or "") if m.role == "tool" else None
        if call is None or call.name != _READ_TOOL or (key := _read_key(call)) is None:
            continue
        reads.append((seq, key))
        latest[key] = seq
    out: dict[int, str] = {}
    for seq, key in reads:
        later = latest[key]
        if later == seq:
            continue
        later_id = messages[later].tool_call_id
        path, offset, limit = key
        pointer = (
            f"[superseded: {path} (lines {offset}–{offset + limit - 1}) was read again later (call {later_id}); "
            "this older copy was removed, see that result]"
        )
        if _worth(messages[seq].content, pointer, min_chars):
            out[seq] = pointer
    return out


def retried_errors(messages: Sequence[Message], errors: Collection[int], *, min_chars: int = 200) -> dict[int, str]:
    """Pointers for error results (seqs in ``errors``) followed by a success of the same tool."""
    last_ok: dict[str | None, int] = {}
    for seq, m in enumerate(messages):
        if m.role == "tool" and seq not in errors:
            last_ok[m.name] = seq
    out: dict[int, str] = {}
    for seq in sorted(errors):
        if seq >= len(messages) or messages[seq].role != "tool":
            continue
        m = messages[seq]
        ok = last_ok.get(m.name)
        if ok is None or ok < seq:
            continue
        first_line = (m.content.strip().splitlines() or [""])[0]
        if len(first_line) > 200:
            first_line = first_line[:199] + "…"
        pointer = (
            f"[failed attempt, later retried successfully (call {messages[ok].tool_call_id}); the error began: "
            f"{first_line}]"
        )
        if _worth(m.content, pointer, min_chars):
            out[seq] = pointer
    return out
