"""The local model's reply grammar as a JSON schema: tool calls or the final answer, nothing else."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kairos.models._reply import FINAL_ANSWER
from kairos.models.types import ToolSpec

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")


def grammar_schema(schema: Any) -> Any:
    """``schema`` without ``pattern`` keywords, for the grammar only.

    llama.cpp turns some regexes (a digit class, say) into a grammar it cannot parse, and such a
    grammar crashes the process. Arguments are still validated against the tool's full schema
    before the tool runs, so a value that misses the pattern reaches the model as a clear error.
    A property *named* ``pattern`` is kept.
    """
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "pattern"}
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: grammar_schema(sub) for name, sub in out[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [grammar_schema(sub) for sub in out[key]]
    for key in _SCHEMA_ONE:
        if key in out:
            out[key] = grammar_schema(out[key])
    return out


def args_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = grammar_schema(parameters) if parameters else {"type": "object"}
    if schema.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema:
        schema["additionalProperties"] = False  # stops the small model inventing arguments
    return schema


def _call_schema(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def reply_schema(
    tools: Iterable[ToolSpec], args: dict[str, dict[str, Any]] | None = None, *, final: bool = True
) -> dict[str, Any]:
    """``{"tool_calls": [call, ...]}`` or the final answer; ``args`` overrides argument schemas.

    ``final=False`` leaves the final answer out (a call is required; with no tools it stays allowed).

    Measured on Qwen2.5-Coder-1.5B: with this wrapper it lists two independent calls when asked
    for two things; with "one call object, or an array of them" it always emitted only one.
    """
    calls = [_call_schema(t.name, (args or {}).get(t.name) or args_schema(t.parameters)) for t in tools]
    text = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    final_call = _call_schema(FINAL_ANSWER, {**text, "additionalProperties": False})
    if not calls:
        return final_call
    array = {"type": "array", "items": {"anyOf": calls}, "minItems": 1, "maxItems": 8}
    wrapper = {
        "type": "object",
        "properties": {"tool_calls": array},
        "required": ["tool_calls"],
        "additionalProperties": False,
    }
    return {"anyOf": [wrapper, final_call]} if final else wrapper


ANSWER_OPENING = '{"name": "' + FINAL_ANSWER + '", "arguments": {"text": "'
"""How the final answer's JSON starts, as the grammar-shaped replies write it (the stored replies show it)."""

ANSWER_REST_GBNF = r"""root ::= char* "\"" space "}" space "}" space
char ::= [^"\\] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
space ::= " "?
"""
"""The rest of a final answer after :data:`ANSWER_OPENING`, as llama.cpp converts :func:`reply_schema` without tools."""
