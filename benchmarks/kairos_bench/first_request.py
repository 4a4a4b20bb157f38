"""``first-request``: how long a new user waits for the first token of the default agent's first answer.

Per llama-cpp-python build flavour (the installed one and the one kairos shipped before, ``avx2``), each
step a new process (:mod:`kairos_bench._llama_child`), one at a time, on a cache folder and an empty user
config of its own (this machine's user settings do not count):

1. ``first_request``: a fresh cache, the install step (``kairos models assemble``'s warm-up of the
   default agent's system turn), then ``kairos run``'s first request in a new workspace — repeated with
   a fresh cache each time;
2. ``cold``: the same without the install step's warm-up (what every first request paid before);
3. ``after_20_workspaces``: on the warmed cache, 20 other workspaces each run a first request with a
   system turn of their own (their ``kairos.toml`` narrows ``[tools] builtins`` to a different set), then
   a new default workspace's first request again.

TTFT is the model's own (request sent to first token); ``process_to_first_token_s`` adds the process
start, imports and model load a user also waits for. ``prompt_tok_s``/``gen_tok_s`` come from the
``llama-build`` measurement (2,048-token prompt, 128 tokens) in the same run.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from kairos.errors import KairosError
from kairos_bench._flavours import Flavour, available, installed, run_child

TASK = "What time is it in Tokyo right now, and which files are in the scripts folder?"
"""The demo task `make run` asks."""
BEFORE = "avx2"
"""The flavour kairos shipped before the dispatch build."""
BUILTINS = ("read_file", "write_file", "edit_file", "list_dir", "grep", "bash", "python", "current_time")
OTHER_WORKSPACES = 20


def _workspace(root: Path, name: str, builtins: tuple[str, ...] | None = None) -> Path:
    ws = root / name
    (ws / "scripts").mkdir(parents=True)
    (ws / "scripts" / "build.sh").write_text("#!/bin/sh\necho build\n")
    (ws / "README.md").write_text(f"# {name}\n")
    if builtins is not None:
        (ws / "kairos.toml").write_text(f"[tools]\nbuiltins = {list(builtins)!r}\n".replace("'", '"'))
    return ws


def _user_config(root: Path) -> Path:
    """An empty user config folder: the defaults, nothing of this machine's user."""
    folder = root / "user-config"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _env(cache: Path, config: Path) -> dict[str, str]:
    return {"KAIROS_PREFIX_CACHE_DIR": str(cache), "KAIROS_CONFIG_DIR": str(config)}


def _first(flavour: Flavour, ws: Path, cache: Path, config: Path) -> dict[str, Any]:
    return run_child(flavour, ["first", str(ws), TASK], env=_env(cache, config))


def _prewarm(flavour: Flavour, cache: Path, config: Path) -> dict[str, Any]:
    return run_child(flavour, ["prewarm"], env=_env(cache, config))


def measure(flavour: Flavour, repeats: int, others: int, root: Path, console: Console) -> list[dict[str, Any]]:
    """Every row of one flavour (see the module docstring)."""
    rows: list[dict[str, Any]] = []

    def row(step: str, r: int, result: dict[str, Any], **extra: Any) -> None:
        rows.append({"flavour": flavour.name, "step": step, "repeat": r, **extra, **result})
        console.print(f"  {rows[-1]}")

    root = root / flavour.name
    config = _user_config(root)
    for r in range(1, repeats + 1):
        console.print(f"first-request: {flavour.name}, install + first request, repeat {r}/{repeats} ...")
        cache = root / f"cache-{r}"
        warm = _prewarm(flavour, cache, config)
        row("first_request", r, _first(flavour, _workspace(root, f"new-{r}"), cache, config), **warm)
        console.print(f"first-request: {flavour.name}, cold (no install warm-up), repeat {r}/{repeats} ...")
        row("cold", r, _first(flavour, _workspace(root, f"cold-{r}"), root / f"cold-cache-{r}", config))
    cache = root / f"cache-{repeats}"
    subsets = itertools.islice(itertools.combinations(BUILTINS, 3), others)
    for i, subset in enumerate(subsets, 1):
        console.print(f"first-request: {flavour.name}, other workspace {i}/{others} ({', '.join(subset)}) ...")
        row("other_workspace", i, _first(flavour, _workspace(root, f"other-{i}", subset), cache, config))
    states = sorted(cache.glob("*.kvstate"))
    for r in range(1, repeats + 1):
        console.print(f"first-request: {flavour.name}, after {others} workspaces, repeat {r}/{repeats} ...")
        result = _first(flavour, _workspace(root, f"after-{r}"), cache, config)
        row(
            "after_20_workspaces",
            r,
            result,
            states=len(states),
            states_mb=round(sum(p.stat().st_size for p in states) / 2**20),
        )
    return rows


def _median(rows: list[dict[str, Any]], step: str, key: str) -> float | None:
    values = [r[key] for r in rows if r["step"] == step and key in r]
    return round(statistics.median(values), 2) if values else None


def run(
    console: Console | None = None,
    *,
    quick: bool = False,
    repeats: int = 3,
    modes: str | None = None,
    model: str | None = None,  # accepted from `kairos bench`; the bundled 1.5B is what is measured
) -> dict[str, Any]:
    """The installed flavour and the one shipped before; ``modes``: flavours to run instead, comma-separated.

    The summary's plain keys are the first flavour's; the others' keys end in ``_<flavour>``.
    """
    console = console or Console(stderr=True)
    others = OTHER_WORKSPACES
    if quick:
        repeats, others = 1, 2
    shipped = installed()
    names = modes.split(",") if modes else list(dict.fromkeys(n for n in (shipped, BEFORE) if n))
    flavours = [f for f in available() if f.name in names]
    if not flavours:
        raise KairosError(f"none of the flavours {names} is built here: python scripts/llama_build.py NAME")
    rows: list[dict[str, Any]] = []
    speeds: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="kairos-first-request-") as folder:
        for f in flavours:
            rows += measure(f, repeats, others, Path(folder), console)
            speeds[f.name] = []
            for r in range(repeats):
                console.print(f"first-request: {f.name}, model speed, repeat {r + 1}/{repeats} ...")
                speeds[f.name].append(run_child(f, ["speed"]))
                rows.append({"flavour": f.name, "step": "speed", "repeat": r + 1, **speeds[f.name][-1]})
    primary = names[0]  # the flavour the unsuffixed keys describe: the first asked for, else the installed one
    summary: dict[str, Any] = {"installed_flavour": shipped, "flavour": primary}
    for f in flavours:
        mine = [r for r in rows if r["flavour"] == f.name]
        suffix = "" if f.name == primary else f"_{f.name}"
        summary[f"ttft_first_request_s{suffix}"] = _median(mine, "first_request", "ttft_s")
        summary[f"ttft_after_20_workspaces_s{suffix}"] = _median(mine, "after_20_workspaces", "ttft_s")
        summary[f"ttft_cold_s{suffix}"] = _median(mine, "cold", "ttft_s")
        summary[f"process_to_first_token_s{suffix}"] = _median(mine, "first_request", "process_to_first_token_s")
        summary[f"new_tokens_first_request{suffix}"] = _median(mine, "first_request", "new_tokens")
        summary[f"prompt_tok_s{suffix}"] = round(statistics.median(s["prompt_tok_s_2048"] for s in speeds[f.name]), 1)
        summary[f"gen_tok_s{suffix}"] = round(statistics.median(s["gen_tok_s"] for s in speeds[f.name]), 1)
    return {
        "bench": "first-request",
        "params": {
            "task": TASK,
            "repeats": repeats,
            "other_workspaces": f"{others}, each with [tools] builtins narrowed to another 3 of 8 (own system turn)",
            "flavours": [f.name for f in flavours],
            "ttft": "request sent to first token, the model's own clock; median of the repeats",
            "prompt_tok_s": "2,048-token prompt from an empty KV cache (llama-build's measure), median",
        },
        "rows": rows,
        "summary": summary,
    }
