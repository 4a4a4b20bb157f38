"""``LocalModel``: the default, offline backend (a bundled GGUF through llama-cpp-python).

Three things make a 1.5B model usable as an agent on a laptop CPU:

* **Our own ChatML rendering** (Qwen2.5 style, :mod:`kairos.models._chatml`), fully deterministic,
  so the prompt of turn N+1 starts with exactly the tokens of turn N.
* **KV-cache reuse**: the ``Llama`` state is never reset. ``Llama.generate`` keeps the longest
  common prefix of its evaluated tokens (prompt *and* generated reply), so a follow-up request
  only pays for its new suffix. We splice the exact generated token ids back in when a reply is
  re-rendered, because re-tokenizing the text can give different ids and break the prefix.
* **Grammar-constrained replies** (:mod:`kairos.models._grammar`): every reply is one JSON object, either
  ``{"tool_calls": [{"name": ..., "arguments": {...}}, ...]}`` or
  ``{"name": "final_answer", "arguments": {"text": ...}}``, so the output always parses.

The model loads lazily on first use (``count_tokens`` or ``stream``); call ``load()`` up front to
surface assembly progress and errors early.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kairos.errors import ContextOverflowError, ModelError
from kairos.models._chatml import (
    IM_END,
    IM_START,
    Segment,
    prompt_segments,
    render_prompt,
    synthesize_raw,
    system_turn_text,
)
from kairos.models._choices import choice_logprobs_from_logits, first_token_ids, last_logits
from kairos.models._cpu_backend import ensure_cpu_backend
from kairos.models._grammar import ANSWER_OPENING, ANSWER_REST_GBNF, args_schema, grammar_schema, reply_schema
from kairos.models._prefix_store import DEFAULT_MAX_BYTES, PrefixStateStore, state_dir
from kairos.models._reply import FINAL_ANSWER, ReplyScanner, parse_reply, repeating
from kairos.models.base import ChoiceLogprobs
from kairos.models.bundled import ProgressFn, default_cache_dir, resolve_model_path
from kairos.models.types import (
    AllBut,
    Message,
    ModelProgress,
    ModelRequest,
    ModelResponse,
    ReasoningPolicy,
    ResponseDone,
    StreamEvent,
    ToolSpec,
    Usage,
)

log = logging.getLogger("kairos.models")

_SPLICE_CAP = 1024


@dataclass(frozen=True)
class PrefixWarmth:
    """What :meth:`LocalModel.prewarm` did: the system turn's length, its state file, whether it was computed."""

    tokens: int
    path: Path | None
    computed: bool
    seconds: float = 0.0


class _Stopped(Exception):
    """Internal: the consumer stopped the stream while the prompt was being read."""


# ---- the backend ---------------------------------------------------------------------------


class LocalModel:
    """A GGUF model in-process; one ``Llama`` (and KV cache) per instance, calls serialised.

    Nothing is loaded until the first request (or :meth:`load`).

    Args:
        model: a bundled model's name (``local``, ``local-small``) or a path to a ``.gguf`` file.
        n_ctx: the context window in tokens.
        n_threads: CPU threads; default every core this process may use.
        n_batch: prompt tokens evaluated per batch.
        flash_attn: llama.cpp's flash attention; off by default: no measurable gain here
            (``kairos bench llama-build``, an alternating A/B: +3 % prompt tokens/s, within the noise).
        max_tokens: a cap on every reply, below the request's own ``max_tokens``; None: no cap.
        verbose: let llama.cpp log to stderr.
        prefix_cache: keep the system prefix's KV state on disk so new processes start warm;
            default on unless ``KAIROS_PREFIX_CACHE=0``.
        prefix_cache_bytes: the size bound of that folder (least recently used states go first).
    """

    reasoning_policy = ReasoningPolicy.STRIP
    vision = False
    """It reads text only: a message's images reach it as a one-line note (see ``_chatml.prompt_segments``)."""

    def __init__(
        self,
        model: str = "local",
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        n_batch: int = 512,
        flash_attn: bool = False,
        max_tokens: int | None = None,
        verbose: bool = False,
        prefix_cache: bool | None = None,
        prefix_cache_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.name = model
        if prefix_cache is None:
            prefix_cache = os.environ.get("KAIROS_PREFIX_CACHE", "1") != "0"
        self.prefix_cache = prefix_cache
        """Keep the system prefix's KV state on disk so new processes start warm."""
        self.prefix_store: PrefixStateStore | None = None
        self.prefix_cache_bytes = prefix_cache_bytes
        self.context_window = n_ctx
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.n_threads = n_threads or cores
        self.n_batch = n_batch
        self.flash_attn = flash_attn
        self.max_tokens = max_tokens
        self.verbose = verbose
        self._llm: Any = None
        self._load_lock = threading.Lock()
        self._lock = threading.Lock()  # one generation at a time: the KV cache is shared state
        self._specials: dict[str, int] = {}
        self._bos: list[int] = []
        self._splice: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._grammars: dict[str, Any] = {}
        self._opening: tuple[list[int], Any] | None = None
        self._last_prompt: tuple[ModelRequest, bool, list[int]] | None = None
        self.cpu_variant: str | None = None
        """The llama.cpp CPU kernels in use (a dispatch build's variant, e.g. ``zen4``); None: built in."""
        self.grammar_build_s: float = 0.0
        """Seconds spent on the last grammar built (0 when it came from the cache)."""

    # -- loading ---------------------------------------------------------------------------

    def load(self, progress: ProgressFn | None = None) -> None:
        """Assemble (first run only) and load the GGUF; idempotent and thread-safe."""
        with self._load_lock:
            if self._llm is not None:
                return
            path = resolve_model_path(self.name, progress=progress)
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise ModelError(
                    "the local model needs llama-cpp-python: pip install 'kairos-harness[local]'", model=self.name
                ) from exc
            self.cpu_variant = ensure_cpu_backend(verbose=self.verbose)
            llm = Llama(
                model_path=str(path),
                n_ctx=self.context_window,
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                n_batch=self.n_batch,
                flash_attn=self.flash_attn,
                verbose=self.verbose,
            )
            for marker in (IM_START, IM_END):
                ids = llm.tokenize(marker.encode(), add_bos=False, special=True)
                if len(ids) != 1:
                    raise ModelError(f"{path.name} has no {marker} token; it is not a ChatML model", model=self.name)
                self._specials[marker] = ids[0]
            self._bos = llm.tokenize(b"", add_bos=True, special=True)  # [] for Qwen2.5: its GGUF adds no BOS
            self._llm = llm
            if self.prefix_cache:
                # flash attention lays the V cache out differently: a state of the other layout never loads
                model_id = f"{path.name}:{path.stat().st_size}:fa{int(self.flash_attn)}"
                self.prefix_store = PrefixStateStore(
                    state_dir(default_cache_dir() / "prefix-states"),
                    model_id,
                    self.context_window,
                    self.prefix_cache_bytes,
                )

    def close(self) -> None:
        """Free the model and its KV cache now rather than at garbage collection."""
        with self._lock, self._load_lock:
            if self._llm is not None:
                self._llm.close()
                self._llm = None

    # -- tokens ----------------------------------------------------------------------------

    def _tokens(self, request: ModelRequest, *, reply_format: bool = True) -> list[int]:
        last = self._last_prompt
        if last is not None and last[1] == reply_format and (last[0] is request or last[0] == request):
            return last[2]
        self.load()
        tokens = list(self._bos)
        for seg in prompt_segments(request, reply_format=reply_format):
            spliced = self._splice.get(seg.text) if seg.kind == "raw" else None
            if seg.kind == "special":
                tokens.append(self._specials[seg.text])
            elif spliced is not None:  # the exact ids generated for this reply, not a re-tokenization
                tokens.extend(spliced)
            elif seg.text:
                tokens.extend(self._llm.tokenize(seg.text.encode(), add_bos=False, special=False))
        self._last_prompt = (request, reply_format, tokens)
        return tokens

    def count_tokens(self, request: ModelRequest) -> int:
        """Exact prompt tokens (loads the model on first use); the tokens are kept for ``stream``."""
        return len(self._tokens(request))

    def _remember(self, raw: str, ids: list[int]) -> None:
        self._splice[raw] = tuple(ids)
        self._splice.move_to_end(raw)
        while len(self._splice) > _SPLICE_CAP:
            self._splice.popitem(last=False)

    def _reused_prefix(self, tokens: list[int]) -> int:
        """How many prompt tokens ``Llama.generate`` (0.3.36) keeps from its evaluated state.

        Mirrors its rule: longest common prefix with the evaluated ids (prompt and generated),
        minus one when the whole prompt matches (it replays one token to refresh the logits),
        unless the state is exactly the prompt with live logits.
        """
        llm = self._llm
        n = int(llm.n_tokens)
        if n == 0:
            return 0
        lcp = self._common_prefix(tokens)
        consumed = lcp == len(tokens)
        if consumed and n == len(tokens) and not getattr(llm, "_requires_eval", True):
            return lcp
        return max(lcp - 1 if consumed else lcp, 0)

    def common_prefix_with_cache(self, request: ModelRequest) -> int:
        """Tokens of ``request`` a perfect prefix cache could reuse from the current KV state.

        That is the longest common prefix, before llama.cpp's replay-one-token rule.
        """
        tokens = self._tokens(request)
        with self._lock:
            return self._common_prefix(tokens)

    def _common_prefix(self, tokens: list[int]) -> int:
        evaluated = self._llm.input_ids[: int(self._llm.n_tokens)].tolist()
        return next(
            (i for i, (a, b) in enumerate(zip(evaluated, tokens, strict=False)) if a != b),
            min(len(evaluated), len(tokens)),
        )

    def _system_turn(self, tokens: list[int]) -> list[int]:
        """The prompt's system turn (system prompt and tools): the part shared across sessions."""
        end = self._specials[IM_END]
        return tokens[: tokens.index(end) + 1] if end in tokens else []

    def _warm(self, tokens: list[int], evaluate: Callable[[list[int]], None] | None = None) -> int:
        """Load the system prefix's KV state from disk when that helps; the prompt tokens reused.

        ``evaluate`` reads the prefix when it is not on disk (default ``Llama.eval``).
        """
        cached = self._reused_prefix(tokens)
        if self.prefix_store is not None:
            head = self._system_turn(tokens)
            if self.prefix_store.warm(self._llm, head, self._common_prefix(head), evaluate):
                cached = self._reused_prefix(tokens)  # loaded from disk: reused, not recomputed
        return cached

    def prewarm(self, request: ModelRequest, progress: Callable[[int, int], None] | None = None) -> PrefixWarmth:
        """Put the KV state of ``request``'s system turn in the disk cache (``kairos models assemble`` does).

        A new process whose first request starts with the same system turn then reads only its new
        tokens. Nothing is computed when the state is already on disk; ``progress(done, total)`` while
        it is read.
        """
        tokens = self._tokens(request)
        with self._lock:
            head = self._system_turn(tokens)
            store = self.prefix_store
            if store is None:
                return PrefixWarmth(len(head), None, computed=False)
            path = store.path_for(head)
            t0 = time.perf_counter()

            def report(done: int) -> None:
                if progress is not None:
                    progress(done, len(head))

            self._llm.reset()
            loaded = store.warm(self._llm, head, 0, lambda prefix: self._read(prefix, report, threading.Event()))
            return PrefixWarmth(len(head), path, computed=not loaded, seconds=time.perf_counter() - t0)

    def _read(self, tokens: list[int], report: Callable[[int], None], stop: threading.Event) -> None:
        """Evaluate what of ``tokens`` is not resident, ``n_batch`` at a time, reporting after each batch.

        Afterwards the state is exactly ``tokens`` with live logits, so ``Llama.generate`` samples at
        once (it evaluates nothing itself). Between batches a set ``stop`` raises :class:`_Stopped`;
        what was read stays resident, so the next request (the same prompt and a line the user typed
        meanwhile) goes on from there.
        """
        llm = self._llm
        start = self._reused_prefix(tokens)
        if start == len(tokens):
            return
        if not llm._ctx.kv_cache_seq_rm(-1, start, -1):  # a model without partial KV removal
            llm.reset()
            start = 0
        llm.n_tokens = start
        report(start)
        step = max(1, int(llm.n_batch))
        for i in range(start, len(tokens), step):
            if stop.is_set():
                raise _Stopped
            llm.eval(tokens[i : i + step])
            report(min(i + step, len(tokens)))

    def reset_cache(self) -> None:
        """Forget the KV state (benchmarks start each variant cold); the next call re-reads all."""
        if self._llm is not None:
            with self._lock:
                self._llm.reset()

    def _grammar(self, tools: tuple[ToolSpec, ...], *, final: bool = True) -> Any:
        """The reply grammar for this tool set, built once (the GBNF conversion is not free).

        ``final=False``: a call of one of ``tools`` is required (the request's ``tool_choice``).
        """
        key = ("" if final else "required\n") + "\n".join(t.serialized() for t in tools)
        if key in self._grammars:
            self.grammar_build_s = 0.0
            return self._grammars[key]
        from llama_cpp.llama_grammar import LlamaGrammar

        t0 = time.perf_counter()

        def build(args: dict[str, dict[str, Any]] | None = None, only: ToolSpec | None = None) -> Any:
            schema = args_schema(only.parameters) if only else reply_schema(tools, args, final=final)
            return LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)

        try:
            grammar = build()
        except Exception:  # a tool schema the converter cannot express: accept any object for that tool
            loose: dict[str, dict[str, Any]] = {}
            for t in tools:
                try:
                    build(only=t)
                except Exception:
                    loose[t.name] = {"type": "object"}
            grammar = build(loose)
        self.grammar_build_s = time.perf_counter() - t0
        self._grammars[key] = grammar
        return grammar

    def _answer_opening(self) -> tuple[list[int], Any]:
        """The tokens of :data:`ANSWER_OPENING` and the grammar of the rest of the reply (built once).

        A reply that can only be a final answer starts with a fixed ``{"name": "final_answer", ...``;
        generating those ~14 tokens one by one cost ~0.7 s before the first word of the answer (measured
        by ``kairos bench voice``); read with the prompt they cost a batch.
        """
        if self._opening is None:
            from llama_cpp.llama_grammar import LlamaGrammar

            ids = self._llm.tokenize(ANSWER_OPENING.encode(), add_bos=False, special=False)
            self._opening = (ids, LlamaGrammar.from_string(ANSWER_REST_GBNF, verbose=False))
        return list(self._opening[0]), self._opening[1]

    # -- generation ------------------------------------------------------------------------

    def _generate(
        self, request: ModelRequest, sink: Callable[[StreamEvent], None], stop: threading.Event, t0: float
    ) -> None:
        """Worker-thread body: prompt, constrained decoding, deltas, one ``ResponseDone``."""
        with self._lock:
            if stop.is_set():
                return
            tokens = self._tokens(request)
            llm = self._llm
            budget = min(request.max_tokens, self.max_tokens or request.max_tokens, self.context_window - len(tokens))
            if budget <= 0:
                raise ContextOverflowError(
                    f"prompt of {len(tokens)} tokens leaves no room to reply in a {self.context_window}-token window",
                    prompt_tokens=len(tokens),
                    limit=self.context_window,
                )
            allowed = request.allowed_tools()  # the prompt lists every tool; the grammar only the allowed
            forced: list[int] = []
            if allowed:
                final = request.tool_choice == "auto" or isinstance(request.tool_choice, AllBut)
                grammar = self._grammar(allowed, final=final)
            else:  # only a final answer may follow: its JSON opening is read with the prompt, not generated
                forced, grammar = self._answer_opening()
                tokens = [*tokens, *forced]  # a copy: the list above is cached
                budget = max(1, budget - len(forced))

            reported = [-1]

            def report(done: int) -> None:
                if done != reported[0]:
                    reported[0] = done
                    sink(ModelProgress("reading", done, len(tokens)))

            report(self._reused_prefix(tokens))
            try:  # the prompt is read here, batch by batch, so the user sees how far (and can stop it)
                cached = self._warm(tokens, lambda prefix: self._read(prefix, report, stop))
                self._read(tokens, report, stop)
            except _Stopped:
                return
            sink(ModelProgress("generating", len(tokens), len(tokens)))
            from llama_cpp import llama_model_get_vocab, llama_vocab_is_eog

            vocab = llama_model_get_vocab(llm.model)
            scanner = ReplyScanner()
            ids: list[int] = []
            raw_bytes = bytearray(ANSWER_OPENING.encode() if forced else b"")
            if forced:
                scanner.feed(ANSWER_OPENING)  # no text yet: it only tells the scanner a final answer began
            utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")  # chars split across tokens
            ttft: float | None = None
            finish = "length"
            gen = llm.generate(tokens, temp=max(request.temperature, 0.0), repeat_penalty=1.0, grammar=grammar)
            try:
                for tok in gen:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    if stop.is_set():
                        return
                    if llama_vocab_is_eog(vocab, tok):
                        finish = "stop"
                        break
                    ids.append(tok)
                    piece = llm.detokenize([tok])
                    raw_bytes += piece
                    for event in scanner.feed(utf8.decode(piece)):
                        sink(event)
                    if len(ids) >= budget:
                        break
                    if repeating(ids):  # cut like max_tokens, minutes earlier
                        log.warning("the model repeated itself; its reply was cut at %d tokens", len(ids))
                        break
            finally:
                gen.close()
            raw = raw_bytes.decode("utf-8", errors="replace")
            self._remember(raw, [*forced, *ids])
            parsed = parse_reply(raw, scanner)  # None: cut off by max_tokens before the JSON closed
            cut = scanner.answer if scanner.answering else raw  # a cut answer keeps its text, not JSON syntax
            content, calls = parsed if parsed is not None else (cut, ())
            finish = "stop" if parsed is not None else finish
            usage = Usage(
                prompt_tokens=len(tokens),
                cached_prompt_tokens=cached,
                completion_tokens=len(ids),
                ttft_s=ttft,
                total_s=time.perf_counter() - t0,
            )
            message = Message.assistant(content, calls, raw=raw)
            sink(ResponseDone(ModelResponse(message, usage, finish_reason=finish)))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Generate in a worker thread; closing or cancelling this iterator stops it within a token."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[StreamEvent | BaseException] = asyncio.Queue()
        stop = threading.Event()

        def sink(item: StreamEvent | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                stop.set()

        def work() -> None:
            try:
                self._generate(request, sink, stop, t0)
            except BaseException as exc:  # handed to the consumer, never lost in the thread
                sink(exc)

        t0 = time.perf_counter()
        threading.Thread(target=work, name="kairos-local-model", daemon=True).start()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, ResponseDone):
                    return
        finally:
            stop.set()

    # -- choice scoring (no generation) ----------------------------------------------------

    def _score_choices(
        self, request: ModelRequest, choices: tuple[str, ...], reply_prefix: str | None
    ) -> ChoiceLogprobs:
        """Worker-thread body: evaluate the prompt's new tokens, read the next-token logits once."""
        with self._lock:
            t0 = time.perf_counter()
            tokens = self._tokens(request, reply_format=reply_prefix is not None)
            llm = self._llm
            if reply_prefix:  # the reply as generation would start it (a copy: the list above is cached)
                tokens = [*tokens, *llm.tokenize(reply_prefix.encode(), add_bos=False, special=False)]
            if len(tokens) >= self.context_window:
                raise ContextOverflowError(
                    f"prompt of {len(tokens)} tokens does not fit a {self.context_window}-token window",
                    prompt_tokens=len(tokens),
                    limit=self.context_window,
                )
            ids = first_token_ids(lambda text: llm.tokenize(text.encode(), add_bos=False, special=False), choices)
            # Always decode at least the last prompt token: the logits read below are then this
            # prompt's, whatever ran before (a generation, a state loaded from disk).
            cached = min(self._warm(tokens), len(tokens) - 1)
            if not llm._ctx.kv_cache_seq_rm(-1, cached, -1):  # a model without partial KV removal
                llm.reset()
                cached = 0
            llm.n_tokens = cached
            llm.eval(tokens[cached:])
            logits = last_logits(llm)
            usage = Usage(prompt_tokens=len(tokens), cached_prompt_tokens=cached, total_s=time.perf_counter() - t0)
            return ChoiceLogprobs(choice_logprobs_from_logits(logits, ids), usage)

    async def choice_logprobs(
        self, request: ModelRequest, choices: Sequence[str], *, reply_prefix: str | None = None
    ) -> ChoiceLogprobs:
        """Score ``choices`` as the reply's first token: one prompt evaluation, no decoding (see ``ChoiceScorer``).

        The prompt is the plain ChatML rendering (no reply-format rules); with ``reply_prefix`` it is
        the prompt generation uses (tools and reply format) followed by the start of the reply. Its
        prefix shares the KV cache with earlier calls, so requests that differ only at the end pay
        only for the end. Cancelling waits for nothing, but the evaluation already started finishes
        in its thread.
        """
        if request.tools and reply_prefix is None:
            raise ValueError("choice scoring takes a request without tools: the reply is plain text")
        return await asyncio.to_thread(self._score_choices, request, tuple(choices), reply_prefix)


__all__ = [  # the rendering and the grammar live in _chatml and _grammar; their public names stay importable here
    "FINAL_ANSWER",
    "IM_END",
    "IM_START",
    "LocalModel",
    "PrefixWarmth",
    "ReplyScanner",
    "Segment",
    "ensure_cpu_backend",
    "grammar_schema",
    "parse_reply",
    "prompt_segments",
    "render_prompt",
    "reply_schema",
    "synthesize_raw",
    "system_turn_text",
]
