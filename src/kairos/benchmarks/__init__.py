"""Benchmarks behind ``kairos bench NAME --json PATH``.

Every bench returns ``{"bench", "params", "rows", "summary"}``. Benches import lazily so that
``kairos bench list`` does not load models or peer frameworks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

Runner = Callable[..., dict[str, Any]]


def _lazy(module: str) -> Runner:
    def run(**kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = importlib.import_module(f"kairos.benchmarks.{module}").run(**kwargs)
        return result

    return run


BENCHMARKS: dict[str, tuple[Runner, str]] = {
    "kv-cache": (_lazy("kv_cache"), "prefix-cache reuse and TTFT of 5 context layouts on the bundled model"),
    "overhead": (_lazy("overhead"), "harness ms per turn at 10/100/1000 messages vs openai-agents and LangGraph"),
}
