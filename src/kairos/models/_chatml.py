"""The local model's prompt: our own deterministic ChatML rendering (Qwen2.5 style) with the reply format.

Pure functions: the same request always gives the same text, so the prompt of turn N+1 starts with
exactly the tokens of turn N (see :mod:`kairos.models.local`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from kairos.errors import ConfigError
from kairos.models._reply import FINAL_ANSWER
from kairos.models.types import Message, ModelRequest, ToolSpec

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of the prompt: a special marker, plain text, or an assistant reply's raw text.

    Tokenized one by one, so special tokens only come from our markers (message text can never
    inject ``<|im_end|>``) and a raw reply can be replaced by the exact ids that generated it.
    """

    kind: Literal["special", "text", "raw"]
    text: str


def _tool_line(tool: ToolSpec) -> str:
    return json.dumps(
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters}, ensure_ascii=False
    )


def system_turn_text(request: ModelRequest, *, reply_format: bool = True) -> str:
    """System text + tool list + reply-format rules. Depends on the request only (cacheable).

    ``reply_format=False``: the system text alone, for a plain-text reply (choice scoring).
    """
    parts = [request.system_text()] if request.system_text() else []
    if not reply_format:
        return "\n\n".join(parts)
    if request.tools:
        lines = "\n".join(_tool_line(t) for t in request.tools)
        parts.append(
            f"# Tools\n\nYou may call one or more tools to assist with the user query.\n\n<tools>\n{lines}\n</tools>"
        )
    rules = ["# Reply format\n", "Every reply is exactly one JSON object and nothing else."]
    if request.tools:
        rules += [
            '- To call tools: {"tool_calls": [{"name": "<tool name>", "arguments": {<arguments for its parameters>}}, '
            "...]} with one entry per call; when the request needs several independent tools, list all of them.",
            "- Tool results come back inside <tool_response></tool_response> tags.",
        ]
    when = "only when none of the tools is relevant or once you have the tool results" if request.tools else ""
    rules.append(
        f"- To answer the user directly{', ' + when if when else ''}: "
        f'{{"name": "{FINAL_ANSWER}", "arguments": {{"text": "<your answer>"}}}}. '
        "The answer must cover every part of the user's request, using all the tool results."
    )
    parts.append("\n".join(rules))
    return "\n\n".join(parts)


def synthesize_raw(message: Message) -> str:
    """The reply-format JSON for an assistant message that has no ``raw`` (other backends, edits).

    Text that accompanies tool calls has no place in the format and is dropped.
    """
    if not message.tool_calls:
        return json.dumps({"name": FINAL_ANSWER, "arguments": {"text": message.content}}, ensure_ascii=False)
    calls = []
    for c in message.tool_calls:
        try:
            args: Any = json.loads(c.arguments)
        except ValueError:
            args = c.arguments  # malformed arguments stay visible, as a string
        calls.append({"name": c.name, "arguments": args})
    return json.dumps({"tool_calls": calls}, ensure_ascii=False)


def _turn(text: str, raw: str | None = None) -> list[Segment]:
    body = [Segment("text", text)] + ([Segment("raw", raw)] if raw is not None else [])
    return [Segment("special", IM_START), *body, Segment("special", IM_END), Segment("text", "\n")]


def prompt_segments(request: ModelRequest, *, reply_format: bool = True) -> list[Segment]:
    """The whole prompt, ending with the open assistant turn (``reply_format``: see :func:`system_turn_text`)."""
    if any(t.name == FINAL_ANSWER for t in request.tools):
        raise ConfigError(f"a tool may not be named {FINAL_ANSWER!r}: the local model reserves it for answers")
    segs = _turn("system\n" + system_turn_text(request, reply_format=reply_format))
    msgs = request.messages
    i = 0
    while i < len(msgs):
        m = msgs[i]
        if m.role == "tool":
            blocks = []
            while i < len(msgs) and msgs[i].role == "tool":
                blocks.append(f"\n<tool_response>\n{msgs[i].text_content()}\n</tool_response>")
                i += 1
            segs += _turn("user" + "".join(blocks))
            continue
        if m.role == "assistant":
            segs += _turn("assistant\n", m.raw if m.raw is not None else synthesize_raw(m))
        else:
            segs += _turn(f"{m.role}\n{m.text_content()}")  # a text model: images become a note
        i += 1
    return [*segs, Segment("special", IM_START), Segment("text", "assistant\n")]


def render_prompt(request: ModelRequest) -> str:
    """The prompt as one string (what ``prompt_segments`` tokenizes, minus the id splicing)."""
    return "".join(s.text for s in prompt_segments(request))
