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
    "status-bar": (_lazy("status_bar"), "Exp 2-8: call-limit violations with and without the status bar"),
    "status-techniques": (_lazy("status_techniques"), "Exp 2-9: file tasks with each status technique on/off"),
    "compression": (_lazy("compression"), "Exp 2-10: six compression strategies under a small window"),
    "injection": (_lazy("injection"), "Exp 2-5: attack success rate, 3 attacks x 4 defence configurations"),
    "skills": (_lazy("skills"), "Exp 2-6 in small: a task only a skill's script can do; progressive loading"),
}

TAKES_TRIALS = frozenset({"status-bar", "compression", "injection", "skills"})
"""Benches whose ``run`` takes ``trials`` (``kairos bench NAME --trials N``)."""
