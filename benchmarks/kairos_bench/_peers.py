"""Equivalent zero-latency fake models and one-turn drivers for the peer harnesses.

Each peer runs the same turn as kairos: the model asks for one ``echo`` tool call, the tool
runs, the model answers. History is passed the way each framework expects it.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

TurnRunner = Callable[[], Awaitable[float]]
"""Runs one turn and returns seconds spent inside the fake model (to subtract)."""


def openai_agents_runner(history_pairs: int) -> TurnRunner:
    """``agents.Runner.run`` with a fake ``Model``; tracing off (it would try the network)."""
    from agents import Agent, ModelSettings, RunConfig, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    set_tracing_disabled(True)

    @function_tool
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    class FakeModel(Model):
        def __init__(self) -> None:
            self.model_s = 0.0
            self.calls = 0

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            t0 = time.perf_counter()
            self.calls += 1
            if self.calls % 2 == 1:
                out: Any = ResponseFunctionToolCall(
                    type="function_call", call_id=f"c{self.calls}", name="echo", arguments='{"text": "hi"}'
                )
            else:
                out = ResponseOutputMessage(
                    id=f"m{self.calls}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
                )
            resp = ModelResponse(output=[out], usage=Usage(), response_id=None)
            self.model_s += time.perf_counter() - t0
            return resp

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise NotImplementedError

    model = FakeModel()
    agent = Agent(name="bench", instructions="You are a test agent.", model=model, tools=[echo])
    history: list[Any] = []
    for i in range(history_pairs):
        history.append({"role": "user", "content": f"question {i}: " + "lorem ipsum " * 8})
        history.append({"role": "assistant", "content": f"answer {i}: " + "dolor sit amet " * 8})
    config = RunConfig(tracing_disabled=True, model_settings=ModelSettings())

    async def turn() -> float:
        before = model.model_s
        await Runner.run(agent, [*history, {"role": "user", "content": "next"}], run_config=config)
        return model.model_s - before

    return turn


def langgraph_runner(history_pairs: int) -> TurnRunner:
    """LangGraph's prebuilt ReAct agent with a fake chat model."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

    @tool
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    state = {"model_s": 0.0, "calls": 0}

    class FakeChat(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "fake"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
            t0 = time.perf_counter()
            state["calls"] += 1
            if state["calls"] % 2 == 1:
                msg = AIMessage(
                    content="", tool_calls=[{"name": "echo", "args": {"text": "hi"}, "id": f"c{state['calls']}"}]
                )
            else:
                msg = AIMessage(content="done")
            result = ChatResult(generations=[ChatGeneration(message=msg)])
            state["model_s"] += time.perf_counter() - t0
            return result

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(FakeChat(), [echo], prompt="You are a test agent.")
    history: list[BaseMessage] = []
    for i in range(history_pairs):
        history.append(HumanMessage(f"question {i}: " + "lorem ipsum " * 8))
        history.append(AIMessage(f"answer {i}: " + "dolor sit amet " * 8))

    async def turn() -> float:
        before = state["model_s"]
        await graph.ainvoke({"messages": [*history, HumanMessage("next")]})
        return state["model_s"] - before

    return turn
