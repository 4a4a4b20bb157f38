"""Tools: typed Python functions the model can call.

``@tool`` turns a (sync or async) function into a :class:`Tool`: the JSON schema comes from the
type hints (pydantic), the description from the docstring, and ``Args:`` lines describe the
parameters. A parameter annotated :class:`ToolContext` is injected by the harness and hidden
from the model.
"""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from kairos.models.types import ToolSpec

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_OUTPUT_CHARS = 12_000
STATE_DIR_NAME = ".kairos"
SECRET_ENV_PATTERNS: tuple[str, ...] = (
    "*_KEY",
    "*_KEYS",
    "*APIKEY*",
    "*API_KEY*",
    "*ACCESS_KEY*",
    "*TOKEN*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*COOKIE*",
)
"""Environment variables a tool's processes never see (case-insensitive fnmatch patterns)."""
READABLE_STATE = ("spill",)
"""Sub-folders of kairos's state that file tools may read (spilled outputs point there)."""


@dataclass(slots=True)
class ToolResult:
    """What a tool returns to the model."""

    content: str
    is_error: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ToolContext:
    """Per-session facts and resources a tool may need (never shown to the model)."""

    workspace: Path
    """Root directory tools are confined to."""
    session_id: str = ""
    cwd: Path | None = None
    """Current directory of the session's shell; starts at ``workspace``."""
    resources: dict[str, Any] = field(default_factory=dict)
    """Long-lived per-session objects (the bash shell, caches); closed with the session."""
    state_dirs: tuple[Path, ...] = ()
    """kairos's own state (trajectories, spill files): file tools never write there, and read only its
    ``spill`` folder. ``<workspace>/.kairos`` is always one of them."""
    secret_env: tuple[str, ...] = SECRET_ENV_PATTERNS
    """Environment variables kept from the processes tools start (see :meth:`environment`)."""

    def __post_init__(self) -> None:
        self.workspace = self.workspace.resolve()
        if self.cwd is None:
            self.cwd = self.workspace
        dirs = {self.workspace / STATE_DIR_NAME, *(d.resolve() for d in self.state_dirs)}
        self.state_dirs = tuple(sorted(dirs))

    def resolve_path(self, path: str, *, write: bool = False) -> Path:
        """Resolve ``path`` against the cwd and refuse anything outside the workspace or inside kairos's state.

        Raises:
            PermissionError: the path (after following symlinks) leaves the workspace, or is kairos's
                own state (any write; a read outside its ``spill`` folder).
        """
        base = self.cwd or self.workspace
        p = (base / path).resolve() if not Path(path).is_absolute() else Path(path).resolve()
        if p != self.workspace and self.workspace not in p.parents:
            raise PermissionError(f"{path!r} is outside the workspace {self.workspace}; use a path inside it")
        for state in self.state_dirs:
            if p != state and state not in p.parents:
                continue
            readable = any(p == state / d or state / d in p.parents for d in READABLE_STATE)
            if write or not readable:
                raise PermissionError(
                    f"{path!r} is inside {state.name}/, kairos's own state (sessions, approvals); "
                    "tools cannot change it" + ("" if write else " or read it, except its spill/ files")
                )
        return p

    def environment(self) -> dict[str, str]:
        """``os.environ`` without secrets (API keys, tokens, passwords): what tool processes get."""
        return {k: v for k, v in os.environ.items() if not is_secret_name(k, self.secret_env)}

    async def aclose(self) -> None:
        for res in list(self.resources.values()):
            close = getattr(res, "aclose", None)
            if close is not None:
                await close()
        self.resources.clear()


def is_secret_name(name: str, patterns: Iterable[str] = SECRET_ENV_PATTERNS) -> bool:
    """Whether an environment variable's name looks like it holds a secret."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p.upper()) for p in patterns)


ToolFn = Callable[..., Any]


@dataclass(slots=True)
class Tool:
    """A callable tool with its schema and limits."""

    name: str
    description: str
    args_model: type[BaseModel]
    fn: ToolFn
    context_param: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    external: bool = False
    """Output comes from outside the trust boundary (web pages, files from others, email)."""
    side_effects: bool = False
    """Calling it changes the world (writes, sends, deletes)."""
    _spec: ToolSpec | None = None

    @property
    def spec(self) -> ToolSpec:
        if self._spec is None:
            self._spec = ToolSpec(self.name, self.description, _clean_schema(self.args_model.model_json_schema()))
        return self._spec

    def validate(self, arguments: dict[str, Any]) -> BaseModel:
        """Raises ``ValidationError`` with pydantic's explanation."""
        return self.args_model.model_validate(arguments)

    async def call(self, args: BaseModel, ctx: ToolContext) -> ToolResult:
        """Run the tool on validated arguments (no timeout or capping; the executor adds those)."""
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if self.context_param:
            kwargs[self.context_param] = ctx
        if inspect.iscoroutinefunction(self.fn):
            out = await self.fn(**kwargs)
        else:
            out = await asyncio.to_thread(self.fn, **kwargs)
        if inspect.isawaitable(out):
            out = await out
        return to_result(out)


def to_result(out: Any) -> ToolResult:
    if isinstance(out, ToolResult):
        return out
    if isinstance(out, str):
        return ToolResult(out)
    return ToolResult(json.dumps(out, ensure_ascii=False, default=str))


@overload
def tool(fn: ToolFn, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    external: bool = False,
    side_effects: bool = False,
) -> Callable[[ToolFn], Tool]: ...


def tool(
    fn: ToolFn | None = None,
    /,
    *,
    name: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    external: bool = False,
    side_effects: bool = False,
) -> Tool | Callable[[ToolFn], Tool]:
    """Decorate a typed function as a tool. Usable bare (``@tool``) or with options."""

    def wrap(f: ToolFn) -> Tool:
        return make_tool(
            f,
            name=name,
            timeout_s=timeout_s,
            max_output_chars=max_output_chars,
            external=external,
            side_effects=side_effects,
        )

    return wrap(fn) if fn is not None else wrap


def make_tool(
    f: ToolFn,
    *,
    name: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    external: bool = False,
    side_effects: bool = False,
) -> Tool:
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
    model_name = "".join(part.title() for part in (name or f.__name__).split("_")) + "Args"
    args_model = create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)
    return Tool(
        name=name or f.__name__,
        description=description,
        args_model=args_model,
        fn=f,
        context_param=context_param,
        timeout_s=timeout_s,
        max_output_chars=max_output_chars,
        external=external,
        side_effects=side_effects,
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


class ToolRegistry:
    """The tools of an agent in a fixed order (sorted by name), so the prefix never reorders."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, t: Tool) -> None:
        if t.name in self._tools:
            raise ValueError(f"two tools are named {t.name!r}; tool names must be unique")
        self._tools[t.name] = t
        self._tools = dict(sorted(self._tools.items()))

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec for t in self._tools.values())

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


def format_validation_error(t: Tool, err: ValidationError) -> str:
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in err.errors())
    schema = json.dumps(t.spec.parameters, ensure_ascii=False)
    return f"Invalid arguments for tool '{t.name}': {problems}. Expected JSON schema: {schema}"
