"""Function tools: ``@tool`` turns a typed Python function (sync or async) into a :class:`~kairos.tools.base.Tool`.

The JSON schema comes from the type hints (pydantic), the description from the docstring, and
``Args:`` lines describe the parameters. A parameter annotated :class:`~kairos.tools.base.ToolContext`
is injected by the harness and hidden from the model.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from kairos.models.types import ToolSpec
from kairos.tools._run import run_in_process, run_in_thread
from kairos.tools.base import DEFAULT_MAX_OUTPUT_CHARS, DEFAULT_TIMEOUT_S, InvalidArguments, ToolContext, ToolResult

ToolFn = Callable[..., Any]
CONFIRM_TOKEN = "confirm_token"
_CONFIRM_DOC = "leave out at first; the preview gives a one-time token to repeat the call with"


@dataclass(slots=True)
class FunctionTool:
    """A Python function as a :class:`Tool`; arguments are checked and converted by a pydantic model.

    Sync functions run in a worker thread; a timed-out or cancelled one is asked to stop at its next
    Python instruction (a call blocked inside C code ends only when that call returns).
    ``isolate=True`` runs each call in a child process that is killed on timeout: for CPU-bound or
    blocking work that must really stop (module-level functions without a ToolContext only).
    """

    name: str
    description: str
    args_model: type[BaseModel]
    fn: ToolFn
    context_param: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    read_only: bool = False
    external: bool = False
    side_effects: bool = False
    isolate: bool = False
    long_running: bool = False
    """Under a runtime with async tasks the call returns a task id at once; the result comes as an event."""
    volatile: bool = False
    """Its answer changes by itself (a task's progress): an identical read-only call is run again, never
    answered from the turn's earlier result (:mod:`kairos.agent.guard`)."""
    network: bool = False
    """The call reaches the network from kairos itself (outside the sandbox): the permission layer asks."""
    irreversible: bool = False
    """Cannot be undone: it runs only when repeated with a confirm token (:mod:`kairos.security.confirm`)."""
    asks: str = ""
    """Why every call asks the user first (the permission layer's default for it is "ask"); empty: it does not."""
    explain: Callable[[dict[str, Any], ToolContext], str] | None = None
    """What a call would do in the user's terms, added to the approval question ("[12] button "Place order" on
    …" where the arguments only say ``index: 12``); empty or failing: the arguments alone."""
    _spec: ToolSpec | None = None

    def __post_init__(self) -> None:
        if self.isolate and (self.context_param or inspect.iscoroutinefunction(self.fn)):
            raise ValueError(f"tool {self.name!r}: isolate=True needs a plain sync function without a ToolContext")

    @property
    def spec(self) -> ToolSpec:
        """Name, docstring and the pydantic model's JSON schema (without auto titles)."""
        if self._spec is None:
            self._spec = ToolSpec(self.name, self.description, _clean_schema(self.args_model.model_json_schema()))
        return self._spec

    def validate(self, arguments: dict[str, Any]) -> None:
        """Raises ``InvalidArguments`` with pydantic's explanation and the expected schema."""
        self._parse(arguments)

    def _parse(self, arguments: dict[str, Any]) -> BaseModel:
        try:
            return self.args_model.model_validate(arguments)
        except ValidationError as e:
            raise InvalidArguments(format_validation_error(self.spec, e)) from e

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run the function on validated arguments."""
        args = self._parse(arguments)
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if self.irreversible:  # checked (and spent) by the defences before the call, never the function's
            kwargs.pop(CONFIRM_TOKEN, None)
        if self.context_param:
            kwargs[self.context_param] = ctx
        if self.isolate:
            out = await run_in_process(self.fn, kwargs)
        elif inspect.iscoroutinefunction(self.fn):
            out = await self.fn(**kwargs)
        else:
            out = await run_in_thread(self.fn, kwargs, name=f"tool:{self.name}")
        if inspect.isawaitable(out):
            out = await out
        return to_result(out)


def to_result(out: Any) -> ToolResult:
    """A tool function's return value as a result (strings as is, anything else as JSON)."""
    if isinstance(out, ToolResult):
        return out
    if isinstance(out, str):
        return ToolResult(out)
    return ToolResult(json.dumps(out, ensure_ascii=False, default=str))


@overload
def tool(fn: ToolFn, /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    read_only: bool = False,
    external: bool = False,
    side_effects: bool = False,
    isolate: bool = False,
    long_running: bool = False,
    irreversible: bool = False,
    volatile: bool = False,
) -> Callable[[ToolFn], FunctionTool]: ...


def tool(
    fn: ToolFn | None = None,
    /,
    *,
    name: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    read_only: bool = False,
    external: bool = False,
    side_effects: bool = False,
    isolate: bool = False,
    long_running: bool = False,
    irreversible: bool = False,
    volatile: bool = False,
) -> FunctionTool | Callable[[ToolFn], FunctionTool]:
    """Decorate a typed function as a tool. Usable bare (``@tool``) or with options."""

    def wrap(f: ToolFn) -> FunctionTool:
        return make_tool(
            f,
            name=name,
            timeout_s=timeout_s,
            max_output_chars=max_output_chars,
            read_only=read_only,
            external=external,
            side_effects=side_effects,
            isolate=isolate,
            long_running=long_running,
            irreversible=irreversible,
            volatile=volatile,
        )

    return wrap(fn) if fn is not None else wrap


def make_tool(
    f: ToolFn,
    *,
    name: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    read_only: bool = False,
    external: bool = False,
    side_effects: bool = False,
    isolate: bool = False,
    long_running: bool = False,
    network: bool = False,
    irreversible: bool = False,
    volatile: bool = False,
    asks: str = "",
    explain: Callable[[dict[str, Any], ToolContext], str] | None = None,
) -> FunctionTool:
    """``@tool`` as a function call (for functions made at run time, e.g. closures over a plugin).

    Raises:
        ValueError: ``f`` has no docstring (the model reads it to decide when to call the tool).
    """
    description, arg_docs = parse_docstring(inspect.getdoc(f) or "")
    if not description:
        raise ValueError(f"tool {f.__name__!r} needs a docstring: the model reads it to decide when to call it")
    hints = get_type_hints(f)
    fields: dict[str, Any] = {}
    context_param = None
    for pname, param in inspect.signature(f).parameters.items():
        annotation = hints.get(pname, Any)
        if annotation is ToolContext:
            context_param = pname
            continue
        default = param.default if param.default is not inspect.Parameter.empty else ...
        fields[pname] = (annotation, Field(default, description=arg_docs.get(pname)))
    if irreversible:
        fields[CONFIRM_TOKEN] = (str | None, Field(None, description=_CONFIRM_DOC))
    model_name = "".join(part.title() for part in (name or f.__name__).split("_")) + "Args"
    args_model = create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)
    return FunctionTool(
        name=name or f.__name__,
        description=description,
        args_model=args_model,
        fn=f,
        context_param=context_param,
        timeout_s=timeout_s,
        max_output_chars=max_output_chars,
        read_only=read_only,
        external=external,
        side_effects=side_effects,
        isolate=isolate,
        long_running=long_running,
        network=network,
        irreversible=irreversible,
        volatile=volatile,
        asks=asks,
        explain=explain,
    )


_SECTION = re.compile(r"^(Args|Arguments|Returns|Raises|Yields|Examples?):\s*$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {arg: description})."""
    desc_lines: list[str] = []
    args: dict[str, str] = {}
    section = None
    current = None
    for line in doc.splitlines():
        m = _SECTION.match(line.strip())
        if m and not line.startswith(" "):
            section = m.group(1)
            continue
        if section is None:
            desc_lines.append(line)
        elif section in ("Args", "Arguments"):
            am = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
            if am:
                current = am.group(1)
                args[current] = am.group(2).strip()
            elif current and line.strip():
                args[current] += " " + line.strip()
    return "\n".join(desc_lines).strip(), args


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's auto titles: they cost tokens and tell the model nothing."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items() if k != "title" or not isinstance(v, str)}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    cleaned = walk(schema)
    cleaned.pop("additionalProperties", None)
    return dict(cleaned)


def format_validation_error(spec: ToolSpec, err: ValidationError) -> str:
    """Pydantic's complaints on one line, then the schema the model should follow."""
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in err.errors())
    schema = json.dumps(spec.parameters, ensure_ascii=False)
    return f"Invalid arguments for tool '{spec.name}': {problems}. Expected JSON schema: {schema}"
