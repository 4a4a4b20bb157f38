"""``llama-build``: llama.cpp build flavours and settings side by side on the bundled 1.5B model.

Every flavour built on this machine (``scripts/llama_build.py``: ``dispatch``, ``avx2``, ``native``) runs
the same measurement in a fresh process of its own (:mod:`kairos_bench._llama_child`): prompt tokens/s
at 512 and 2,048 tokens from an empty KV cache, generated tokens/s over 128 greedy tokens, peak RSS.
The flavours take turns within each repeat, so a busy minute hits all of them. Then the settings that
cost nothing to try (``n_batch``/``n_ubatch``, flash attention, a q8_0 KV cache, threads) on the
installed flavour. Medians of the repeats.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from rich.console import Console

from kairos.errors import KairosError
from kairos_bench._flavours import Flavour, available, installed, run_child

SETTINGS: dict[str, list[str]] = {
    "default (n_batch 512)": [],
    "n_batch 256": ["--n-batch", "256"],
    "n_batch 1024": ["--n-batch", "1024"],
    "n_batch 2048, n_ubatch 512": ["--n-batch", "2048", "--n-ubatch", "512"],
    "flash attention": ["--flash-attn"],
    "q8_0 KV cache + flash attention": ["--flash-attn", "--kv", "q8_0"],
    "1 thread": ["--threads", "1"],
}
MEASURES = ("prompt_tok_s_512", "prompt_tok_s_2048", "gen_tok_s", "peak_rss_mb", "load_s")


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return round(float(statistics.median(r[key] for r in rows)), 1)


def _build_info(flavour: Flavour) -> dict[str, Any]:
    info = flavour.wheel.parent / "build.json"
    return json.loads(info.read_text()) if info.exists() else {}


def run(
    console: Console | None = None,
    *,
    quick: bool = False,
    repeats: int = 3,
    modes: str | None = None,
    model: str | None = None,  # accepted from `kairos bench`; the bundled 1.5B is what is measured
) -> dict[str, Any]:
    """Each flavour, then each setting on the installed flavour; ``modes``: flavours to run, comma-separated."""
    console = console or Console(stderr=True)
    if quick:
        repeats = 1
    flavours = available()
    if modes:
        wanted = modes.split(",")
        flavours = [f for f in flavours if f.name in wanted]
    if not flavours:
        raise KairosError(
            "no llama-cpp-python flavour is built here: python scripts/llama_build.py dispatch|avx2|native"
        )
    shipped = installed()
    rows: list[dict[str, Any]] = []
    for r in range(repeats):
        for f in flavours:
            console.print(f"llama-build: {f.name}, repeat {r + 1}/{repeats} ...")
            row = {"phase": "flavour", "flavour": f.name, "repeat": r + 1, **run_child(f, ["speed"])}
            console.print(f"  {row}")
            rows.append(row)
    base = next((f for f in flavours if f.name == shipped), flavours[0])
    for r in range(1 if quick else repeats):
        for label, args in SETTINGS.items():
            if label.startswith("default"):
                continue  # the flavour phase measured it
            console.print(f"llama-build: {base.name}, {label}, repeat {r + 1} ...")
            row = {"phase": "setting", "flavour": base.name, "setting": label, "repeat": r + 1}
            row |= run_child(base, ["speed", *args])
            console.print(f"  {row}")
            rows.append(row)
    summary: dict[str, Any] = {"installed_flavour": shipped}
    for f in flavours:
        mine = [r for r in rows if r["phase"] == "flavour" and r["flavour"] == f.name]
        for key in MEASURES:
            summary[f"{key}_{f.name}"] = _median(mine, key)
        summary[f"cpu_variant_{f.name}"] = mine[0]["cpu_variant"]
        summary[f"build_s_{f.name}"] = _build_info(f).get("seconds")
    settings: dict[str, dict[str, float]] = {}
    default_rows = [r for r in rows if r["phase"] == "flavour" and r["flavour"] == base.name]
    settings["default (n_batch 512)"] = {k: _median(default_rows, k) for k in MEASURES}
    for label in SETTINGS:
        mine = [r for r in rows if r.get("setting") == label]
        if mine:
            settings[label] = {k: _median(mine, k) for k in MEASURES}
    summary["settings"] = settings
    return {
        "bench": "llama-build",
        "params": {
            "model": "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (bundled), n_ctx 4096",
            "repeats": repeats,
            "prompt": "the default system prompt's text, repeated, from an empty KV cache",
            "generated": "128 greedy tokens after a 64-token prompt",
            "flavours": {f.name: _build_info(f).get("cmake_args", "") for f in flavours},
            "settings_on": base.name,
            "median_of": "repeats; the flavours take turns within a repeat",
        },
        "rows": rows,
        "summary": summary,
    }
