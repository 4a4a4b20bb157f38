"""Schema tools: a tool known only by its JSON Schema and a handler (what an MCP server provides)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kairos.models.types import ToolSpec
from kairos.tools.base import DEFAULT_MAX_OUTPUT_CHARS, DEFAULT_TIMEOUT_S, InvalidArguments, ToolContext, ToolResult
from kairos.tools.function import to_result

Handler = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]


@dataclass(slots=True)
class SchemaTool:
    """A tool known only by its JSON Schema and an async handler (an MCP server's tools, for one).

    Arguments are checked with ``jsonschema`` against ``parameters``; the handler receives them as a
    dict and may return a string, a :class:`ToolResult` or anything JSON-able.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    read_only: bool = False
    external: bool = False
    side_effects: bool = False
    long_running: bool = False
    volatile: bool = False
    irreversible: bool = False
    _spec: ToolSpec | None = None
    _validator: Any = None

    @property
    def spec(self) -> ToolSpec:
        """The spec exactly as given."""
        if self._spec is None:
            self._spec = ToolSpec(self.name, self.description, self.parameters)
        return self._spec

    def validate(self, arguments: dict[str, Any]) -> None:
        """Raises ``InvalidArguments`` listing every schema violation and the expected schema."""
        if self._validator is None:
            from jsonschema import Draft202012Validator  # on first use: most agents have no schema tools

            self._validator = Draft202012Validator(self.parameters)
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if errors:
            problems = "; ".join(f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors)
            schema = json.dumps(self.parameters, ensure_ascii=False)
            raise InvalidArguments(
                f"Invalid arguments for tool '{self.name}': {problems}. Expected JSON schema: {schema}"
            )

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run the handler."""
        return to_result(await self.handler(arguments, ctx))
