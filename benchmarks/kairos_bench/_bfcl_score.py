"""BFCL's AST scoring, small: one model reply's calls against the possible answers of one case.

Mirrors ``bfcl_eval.eval_checker.ast_eval.ast_checker`` for Python cases (we do not import it: the
wheel is installed without its dependencies, and its checker imports every model handler). The
rules: the function name matches exactly, every required parameter is present, no parameter
outside the function's schema or the answer, each value of the declared type (an int is accepted
for a float, a value of the answer's own type is accepted as a "variable") and in the possible
answers (strings compared without case, spaces and ``,./-_*^``), a parameter left out only when
the answer lists ``""`` for it, and parallel calls matched in any order. Irrelevance: no call.

Also here, for the plain chat-template way: :func:`parse_calls`, which reads calls generously
out of free text (``<tool_call>`` tags, fenced JSON, bare JSON objects, several allowed).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance")

_PY_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}

Call = tuple[str, dict[str, Any]]
"""One tool call as scored: the function name and its decoded arguments."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a reply is correct, and why not."""

    ok: bool
    reason: str = ""


def standardize(text: str) -> str:
    """BFCL's string normalisation: no spaces or ``,./-_*^``, lower case, single quotes doubled."""
    return re.sub(r"[ ,./\-_*^]", "", text).lower().replace("'", '"')


def _std(value: Any) -> Any:
    return standardize(value) if isinstance(value, str) else value


def _type_ok(value: Any, expected: type | None, options: list[Any]) -> bool:
    if expected is None or type(value) is expected:
        return True
    answer_type = next((type(o) for o in options if o != ""), None)
    return answer_type is not None and type(value) is answer_type  # BFCL's "variable" case


def _items_ok(value: list[Any], item_type: type | None) -> bool:
    if item_type is None:
        return True
    return all(type(v) is item_type or (item_type is float and type(v) is int) for v in value)


def _dict_ok(value: dict[str, Any], options: list[Any]) -> bool:
    for option in options:
        if not isinstance(option, dict):
            continue
        if any(k not in option or _std(v) not in [_std(o) for o in option[k]] for k, v in value.items()):
            continue
        if all(k in value or "" in opts for k, opts in option.items()):
            return True
    return False


def _value_ok(value: Any, gorilla_type: str, item_type: type | None, options: list[Any]) -> bool:
    expected = _PY_TYPES.get(gorilla_type)
    if expected is float and type(value) is int:
        value = float(value)  # BFCL lets Python promote an int where a float is declared
    if not _type_ok(value, expected, options):
        return False
    if expected is list and isinstance(value, list) and not _items_ok(value, item_type):
        return False
    if expected is dict and isinstance(value, dict):
        return _dict_ok(value, options)
    if expected is list and item_type is dict and isinstance(value, list):
        return any(
            isinstance(o, list)
            and len(o) == len(value)
            and all(_dict_ok(v, [d]) for v, d in zip(value, o, strict=True))
            for o in options
        )
    if isinstance(value, str):
        return standardize(value) in [standardize(o) for o in options if isinstance(o, str)]
    if isinstance(value, list):
        return [_std(v) for v in value] in [[_std(x) for x in o] for o in options if isinstance(o, list)]
    return bool(value in options)


def check_call(function: dict[str, Any], call: Call, answer: dict[str, dict[str, list[Any]]]) -> Verdict:
    """One call against one function's possible answer (BFCL's ``simple_function_checker``)."""
    name, args = call
    expected_name, options = next(iter(answer.items()))
    if name != expected_name or function.get("name") != expected_name:
        return Verdict(False, f"wrong function {name!r}, expected {expected_name!r}")
    params = function.get("parameters", {})
    props: dict[str, Any] = params.get("properties", {})
    for required in params.get("required", []):
        if required not in args:
            return Verdict(False, f"missing required parameter {required!r}")
    for key, value in args.items():
        if key not in props or key not in options:
            return Verdict(False, f"unexpected parameter {key!r}")
        spec = props[key]
        items = spec.get("items") if isinstance(spec.get("items"), dict) else None
        item_type = _PY_TYPES.get(items.get("type", "")) if items else None
        if not _value_ok(value, spec.get("type", "any"), item_type, options[key]):
            return Verdict(False, f"wrong value for {key!r}: {value!r}, expected one of {options[key]!r}")
    for key, opts in options.items():
        if key not in args and "" not in opts:
            return Verdict(False, f"parameter {key!r} left out but not optional")
    return Verdict(True)


def score(
    category: str, functions: list[dict[str, Any]], calls: list[Call], answers: list[dict[str, Any]] | None
) -> Verdict:
    """A whole reply: the right number of calls, each matching an answer (any order when parallel)."""
    if category == "irrelevance":
        return Verdict(not calls, f"called {calls[0][0]!r} on an irrelevant request" if calls else "")
    if answers is None:
        return Verdict(False, "no possible answer for this case")
    if len(calls) != len(answers):
        return Verdict(False, f"{len(calls)} call(s), expected {len(answers)}")
    by_name = {f["name"]: f for f in functions}
    unused = list(range(len(calls)))
    for answer in answers:
        function = by_name.get(next(iter(answer)), {})
        verdicts = [(i, check_call(function, calls[i], answer)) for i in unused]
        match = next((i for i, v in verdicts if v.ok), None)
        if match is None:
            return verdicts[0][1] if len(verdicts) == 1 else Verdict(False, f"no call matches {next(iter(answer))!r}")
        unused.remove(match)
    return Verdict(True)


# ---- generous parsing of free-text replies (the plain way) ----------------------------------


def _as_calls(obj: Any) -> list[Call]:
    if isinstance(obj, list):
        return [c for item in obj for c in _as_calls(item)]
    if not isinstance(obj, dict):
        return []
    if isinstance(obj.get("tool_calls"), list):
        return _as_calls(obj["tool_calls"])
    if isinstance(obj.get("function"), dict):
        return _as_calls(obj["function"])
    name = obj.get("name")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return []
    if not isinstance(name, str) or not isinstance(args, dict):
        return []
    return [(name, args)]


def parse_calls(text: str) -> list[Call]:
    """Every call written in ``text``: each JSON value that looks like a call, wherever it stands.

    That covers ``<tool_call>{...}</tool_call>`` tags, fenced ```` ```json ```` blocks, bare objects
    and arrays of calls, with ``arguments`` (or ``parameters``) as an object or a JSON string.
    """
    decoder = json.JSONDecoder()
    calls: list[Call] = []
    i = 0
    while i < len(text):
        if text[i] in "{[":
            try:
                obj, end = decoder.raw_decode(text, i)
            except ValueError:
                i += 1
                continue
            found = _as_calls(obj)
            if found:
                calls += found
                i = end
                continue
        i += 1
    return calls
