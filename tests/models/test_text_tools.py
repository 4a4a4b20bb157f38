"""Tool calls written as text: the pure parser and the streaming scanner, on many shapes."""

from __future__ import annotations

import json
import random

import pytest

from kairos.models._text_tools import (
    Piece,
    TextToolCall,
    TextToolScanner,
    extract_tool_calls,
    parse_tool_calls,
)

NAMES = frozenset({"get_weather", "read_file", "current_time"})
PARIS = TextToolCall("get_weather", '{"city": "Paris"}')
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
READ_A = TextToolCall("read_file", '{"path": "a.py"}')
TAG = "<tool_call>" + CALL + "</tool_call>"


def run(chunks: list[str], names: frozenset[str] = NAMES) -> tuple[str, list[TextToolCall]]:
    scanner = TextToolScanner(names)
    pieces: list[Piece] = []
    for chunk in chunks:
        pieces += scanner.feed(chunk)
    pieces += scanner.finish()
    return "".join(p for p in pieces if isinstance(p, str)), [p for p in pieces if isinstance(p, TextToolCall)]


# ---- parse_tool_calls: one block's body ---------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (CALL, [PARIS]),
        ('{"name": "get_weather", "parameters": {"city": "Paris"}}', [PARIS]),
        ('{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}', [PARIS]),  # OpenAI wire form
        ('{"type": "function", "function": ' + CALL + "}", [PARIS]),
        ("[" + CALL + ', {"name": "current_time", "arguments": {}}]', [PARIS, TextToolCall("current_time", "{}")]),
        (CALL + "\n" + '{"name": "read_file", "arguments": {"path": "a.py"}}', [PARIS, READ_A]),
        ('{"name": "get_weather", "arguments": {"city": "Zü"}}', [TextToolCall("get_weather", '{"city": "Zü"}')]),
        ('{"name": "get_weather", "arguments": ""}', [TextToolCall("get_weather", "{}")]),
    ],
)
def test_parse_accepts(body: str, expected: list[TextToolCall]) -> None:
    assert parse_tool_calls(body, NAMES) == expected
    assert all(isinstance(json.loads(c.arguments), dict) for c in expected)


@pytest.mark.parametrize(
    "body",
    [
        "",
        "[]",
        '{"name": "get_weather", "arguments": {"city": "Paris"}',  # truncated
        '{"name": "get_weather", "arguments": {"city": "Paris"}} trailing words',
        '{"name": "launch_missiles", "arguments": {}}',  # unknown tool
        "[" + CALL + ', {"name": "launch_missiles", "arguments": {}}]',  # one unknown spoils the block
        '{"name": "get_weather"}',  # no arguments key: likely data
        '{"name": "get_weather", "arguments": ["Paris"]}',
        '{"name": "get_weather", "arguments": "not json"}',
        '{"name": 3, "arguments": {}}',
        '"get_weather"',
        "[[" + CALL + "]]",
        "[" * 100_000,  # deep nesting must not crash the parser
    ],
)
def test_parse_rejects(body: str) -> None:
    assert parse_tool_calls(body, NAMES) is None


# ---- extract_tool_calls: whole replies ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ("```json\n" + CALL + "\n```", "", [PARIS]),
        ("```\n" + CALL + "\n```", "", [PARIS]),
        ("```JSON\n" + CALL + "\n```", "", [PARIS]),
        ("```json" + CALL + "```", "", [PARIS]),  # all on one line
        ("<tool_call>\n" + CALL + "\n</tool_call>", "", [PARIS]),
        ("<tool_call>" + CALL, "", [PARIS]),  # closing tag left out at the end of the reply
        ("Weather:\n" + TAG + "\n\n" + TAG + "\nso", "Weather:\nso", [PARIS, PARIS]),
        (TAG + "\n\nDone.", "Done.", [PARIS]),
        ("a" + TAG + " b", "a b", [PARIS]),
        ("```json\n" + CALL + "\n", "", [PARIS]),  # unclosed fence at the end, complete JSON
        ("I will check.\n\n```json\n" + CALL + "\n```\n", "I will check.", [PARIS]),
        ("Checking: <tool_call>" + CALL + "</tool_call> then I answer.", "Checking: then I answer.", [PARIS]),
        (
            "<tool_call>" + CALL + "</tool_call>\n<tool_call>"
            '{"name": "current_time", "arguments": {"zone": "Asia/Tokyo"}}</tool_call>',
            "",
            [PARIS, TextToolCall("current_time", '{"zone": "Asia/Tokyo"}')],
        ),
    ],
)
def test_extract_finds_calls(text: str, content: str, calls: list[TextToolCall]) -> None:
    assert extract_tool_calls(text, NAMES) == (content, calls)


@pytest.mark.parametrize(
    "text",
    [
        "Plain answer, no tools.\n",
        "Use the ``` fence and <tool_call> tags; a `code` span. Trailing space ",
        "```python\nprint('```json')\n```\nDone.",
        '```json\n{"name": "launch_missiles", "arguments": {}}\n```',  # unknown tool: stays text
        '```json\n{"name": "get_weather", "arguments": {"city": \n```',  # malformed JSON
        '```json\n{"config": true}\n```\n',  # JSON that is no call
        "<tool_call>not json</tool_call>",
        "<tool_call>" + CALL[:-3],  # truncated at the end of the reply
        "```",
        "```json\n",
        "<tool_call>",
        "x`y``z <tool",
    ],
)
def test_extract_leaves_other_text_alone(text: str) -> None:
    assert extract_tool_calls(text, NAMES) == (text, [])


def test_no_tools_means_no_calls() -> None:
    assert extract_tool_calls("```json\n" + CALL + "\n```", frozenset()) == ("```json\n" + CALL + "\n```", [])


def test_code_fence_closing_is_not_an_opener() -> None:
    text = "```bash\nls\n```\nthen\n```json\n" + CALL + "\n```"
    assert extract_tool_calls(text, NAMES) == ("```bash\nls\n```\nthen", [PARIS])


def test_long_fence_info_string_is_not_held() -> None:
    text = "```" + "x" * 100 + " no newline yet"
    scanner = TextToolScanner(NAMES)
    shown = "".join(p for p in scanner.feed(text) if isinstance(p, str))
    assert shown == text.rstrip()  # decided without waiting for the end of the line


# ---- streaming: holding back, chunking ------------------------------------------------------


def test_text_that_may_open_a_block_is_held_back() -> None:
    scanner = TextToolScanner(NAMES)
    assert scanner.feed("Let me look. ``") == ["Let me look."]
    assert scanner.feed("`json\n{") == []
    assert scanner.feed('"name": "get_weather", "arguments": {"city": "Paris"}}\n`') == []
    assert scanner.feed("``") == [PARIS]
    assert scanner.feed("\n\n") == []
    assert scanner.finish() == []


def test_code_is_released_as_soon_as_it_is_not_a_call() -> None:
    scanner = TextToolScanner(NAMES)
    assert scanner.feed("Here:\n```py") == ["Here:"]
    assert scanner.feed("thon\nprint(1)\n") == ["\n```python\nprint(1)"]  # the language decided it
    scanner = TextToolScanner(NAMES)
    assert scanner.feed("<tool_call> is a tag") == ["<tool_call> is a tag"]  # not JSON after the tag


SAMPLES = [
    "Sure.\n\n```json\n" + CALL + "\n```\nDone.",
    "<tool_call>\n" + CALL + "\n</tool_call>\n<tool_call>\n" + CALL + "\n</tool_call>",
    "Here:\n```python\nprint('```')\n```\nand ``` inline <tool_call> text",
    '```json\n{"name": "nope", "arguments": {}}\n```  <tool_call>' + CALL,
    "```json{bad json```\n```\n[" + CALL + "]\n```",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_chunking_never_changes_the_result(text: str) -> None:
    whole = extract_tool_calls(text, NAMES)
    assert run(list(text)) == whole
    for cut in range(1, len(text)):
        assert run([text[:cut], text[cut:]]) == whole
    rng = random.Random(7)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(text)), 5))
        assert run([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]) == whole


def test_long_reply_streams_in_linear_time() -> None:
    # 20 000 one-character chunks with fences and tags sprinkled in: quadratic work would take minutes.
    text = ("word ` <t ``" * 200 + "```python\n" + "x = 1\n" * 500 + "```\n") * 2 + "<tool_call>" + CALL
    content, calls = run(list(text))
    assert calls == [PARIS] and content == text[: text.index("<tool_call>")].rstrip()
