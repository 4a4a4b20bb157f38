"""One measurement in a fresh process, on whatever llama-cpp-python build is first on ``sys.path``.

The ``llama-build`` and ``first-request`` benches start this module with a build flavour's install folder
on ``PYTHONPATH`` (see :mod:`kairos_bench._flavours`), so each flavour runs its own compiled code in a
process of its own, as a user's ``kairos run`` would. It prints one JSON object on stdout.

    python -m kairos_bench._llama_child speed [--n-batch N] [--n-ubatch N] [--flash-attn] [--kv q8_0] [--threads N]
    python -m kairos_bench._llama_child first WORKSPACE TASK
    python -m kairos_bench._llama_child prewarm
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402  (the clock starts before the imports: a user waits for them too)
import asyncio  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
from collections.abc import AsyncGenerator  # noqa: E402
from contextlib import aclosing  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, cast  # noqa: E402

PROMPT_SIZES = (512, 2048)
GENERATED = 128
_KV_TYPES = {"f16": 1, "q8_0": 8}  # ggml_type


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _filler(llm: Any, n: int) -> list[int]:
    """``n`` tokens of real prose and code (the default system prompt, repeated), never the same twice in a row."""
    from kairos.prompts.builder import KAIROS_SPEC, PromptBuilder

    text = PromptBuilder(KAIROS_SPEC).static()
    ids: list[int] = []
    i = 0
    while len(ids) < n:
        ids += llm.tokenize(f"\n[{i}]\n{text}".encode(), add_bos=False, special=False)
        i += 1
    return ids[:n]


def speed(args: argparse.Namespace) -> dict[str, Any]:
    """Prompt tokens/s at each prompt size (from an empty KV cache) and generated tokens/s."""
    import llama_cpp

    from kairos.models.bundled import resolve_model_path
    from kairos.models.local import ensure_cpu_backend

    variant = ensure_cpu_backend()
    t0 = time.perf_counter()
    kwargs: dict[str, Any] = {"n_batch": args.n_batch, "n_ubatch": args.n_ubatch or args.n_batch}
    if args.flash_attn:
        kwargs["flash_attn"] = True
    if args.kv != "f16":
        kwargs["type_k"] = kwargs["type_v"] = _KV_TYPES[args.kv]
    llm: Any = llama_cpp.Llama(
        model_path=str(resolve_model_path("local")),
        n_ctx=4096,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
        **kwargs,
    )
    out: dict[str, Any] = {"load_s": round(time.perf_counter() - t0, 2), "cpu_variant": variant}
    for n in PROMPT_SIZES:
        tokens = _filler(llm, n)
        llm.reset()
        t = time.perf_counter()
        llm.eval(tokens)
        out[f"prompt_tok_s_{n}"] = round(n / (time.perf_counter() - t), 1)
    llm.reset()
    llm.eval(_filler(llm, 64))
    t = time.perf_counter()
    for _ in range(GENERATED):  # greedy, one token at a time, as generation runs
        token = int(llm.scores[llm.n_tokens - 1].argmax())
        llm.eval([token])
    out["gen_tok_s"] = round(GENERATED / (time.perf_counter() - t), 1)
    out["peak_rss_mb"] = round(_rss_mb())
    return out


async def _first(workspace: Path, task: str) -> dict[str, Any]:
    from kairos.agent.events import RequestStats
    from kairos.app import build_agent
    from kairos.config import load_config
    from kairos.context.session import SessionStore
    from kairos.models import load_model

    config = load_config(workspace)
    model = load_model(config.model, config.model_settings())
    t_load = time.perf_counter()
    model.load()  # type: ignore[attr-defined]  # the bundled model: loaded before the clock of the request
    loaded = time.perf_counter() - t_load
    agent = build_agent(model, workspace, config)
    store = SessionStore(workspace)
    session = store.new()
    out: dict[str, Any] = {"model_load_s": round(loaded, 2)}
    try:
        async with aclosing(cast(AsyncGenerator[Any, None], agent.run(session, task))) as events:
            async for event in events:
                if not isinstance(event, RequestStats):
                    continue
                u = event.usage
                out |= {
                    "ttft_s": round(u.ttft_s or 0.0, 3),
                    "prompt_tokens": u.prompt_tokens,
                    "cached_tokens": u.cached_prompt_tokens,
                    "new_tokens": u.prompt_tokens - u.cached_prompt_tokens,
                    "process_to_first_token_s": round(
                        time.perf_counter() - STARTED - (u.total_s or 0.0) + (u.ttft_s or 0.0), 2
                    ),
                }
                break  # the first request is what is measured; the rest of the turn is cancelled
    finally:
        await session.aclose()
        store.close()
    return out


def prewarm(args: argparse.Namespace) -> dict[str, Any]:
    """The install step's warm-up (``kairos models assemble``), timed."""
    import tempfile

    from kairos.app import prewarm as warm
    from kairos.config import load_config
    from kairos.models import load_model

    with tempfile.TemporaryDirectory() as empty:
        config = load_config(Path(empty))
    model = load_model(config.model, config.model_settings())
    warmth = warm(model, config)
    if warmth is None:
        raise SystemExit("the configured model has no prefix cache")
    return {"prewarm_tokens": warmth.tokens, "prewarm_s": round(warmth.seconds, 2), "computed": warmth.computed}


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("speed")
    s.add_argument("--n-batch", type=int, default=512)
    s.add_argument("--n-ubatch", type=int, default=0)
    s.add_argument("--flash-attn", action="store_true")
    s.add_argument("--kv", choices=sorted(_KV_TYPES), default="f16")
    s.add_argument("--threads", type=int, default=2)
    f = sub.add_parser("first")
    f.add_argument("workspace", type=Path)
    f.add_argument("task")
    sub.add_parser("prewarm")
    args = parser.parse_args()
    import llama_cpp

    if args.what == "speed":
        result = speed(args)
    elif args.what == "first":
        result = asyncio.run(_first(args.workspace, args.task))
    else:
        result = prewarm(args)
    result["llama_cpp"] = str(Path(llama_cpp.__file__).parent)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
