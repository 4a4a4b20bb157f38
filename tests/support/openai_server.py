"""A scriptable loopback OpenAI-compatible server with the checks a strict server makes.

It extends :class:`tests.models.fake_servers.FakeServer` (scripted replies, recorded requests)
with ``strict`` mode, which answers HTTP 400 when a request breaks the tool-call protocol, as
vLLM, OpenAI and other strict OpenAI-compatible servers do. A session left with a tool call that
has no result (or two) is then refused on every request, which is what issue 8 §5 finding 4 reported.
"""

from __future__ import annotations

from typing import Any

from tests.models.fake_servers import FakeServer, Recorded, Reply, chat_stream, openai_error, tool_fragment


class OpenAIServer(FakeServer):
    """A :class:`FakeServer` that can be strict.

    Args:
        strict: refuse (HTTP 400, without taking a scripted reply) any request in which an
            assistant tool call lacks exactly one ``tool`` message right after it.
    """

    def __init__(self, *, strict: bool = False) -> None:
        super().__init__()
        self.strict = strict
        self.refused: list[str] = []
        """Why each refused request was refused (strict mode)."""

    def _next(self, path: str, headers: dict[str, str], body: Any) -> Reply:
        problem = protocol_problem(body) if self.strict else None
        if problem is not None:
            with self._lock:
                self.requests.append(Recorded(path, headers, body))
                self.refused.append(problem)
            return openai_error(400, problem)
        return super()._next(path, headers, body)

    def __enter__(self) -> OpenAIServer:
        super().__enter__()
        return self


def protocol_problem(body: Any) -> str | None:
    """Why a strict server would refuse this chat-completions body, or None.

    Every assistant ``tool_calls`` entry must be answered by exactly one ``tool`` message among
    the messages that follow it directly, and every ``tool`` message must answer such a call.
    """
    messages = body.get("messages", []) if isinstance(body, dict) else []
    i = 0
    while i < len(messages):
        m = messages[i]
        i += 1
        if m.get("role") == "tool":
            return f"messages[{i - 1}]: tool message {m.get('tool_call_id')!r} does not answer a preceding tool call"
        if m.get("role") != "assistant" or not m.get("tool_calls"):
            continue
        wanted = [c.get("id") for c in m["tool_calls"]]
        answered: list[Any] = []
        while i < len(messages) and messages[i].get("role") == "tool":
            answered.append(messages[i].get("tool_call_id"))
            i += 1
        for call_id in wanted:
            if answered.count(call_id) != 1:
                return (
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have exactly one response: {call_id}"
                )
        if len(answered) != len(wanted):
            return f"tool messages {answered} do not match the tool calls {wanted}"
    return None


def tool_calls_reply(*calls: tuple[str, str, str]) -> Reply:
    """A complete streamed reply that asks for ``(id, name, arguments JSON)`` calls."""
    deltas = [tool_fragment(i, id=cid, name=name, arguments=args) for i, (cid, name, args) in enumerate(calls)]
    return chat_stream(*deltas, finish_reason="tool_calls")


def text_reply(text: str) -> Reply:
    """A complete streamed text answer."""
    return chat_stream({"content": text})
