"""``voice``: the offline voice cascade end to end (issue 27 §5): speech in, the agent's reply out as audio.

A fixed script of eight short requests a user says to an assistant (``data/voice_script.json``) is
synthesised in several voices and speeds: hibari "heart" at 1.0x and 1.2x, espeak-ng ``en-us`` and
``en-gb`` at 165 and 200 words per minute (when espeak-ng is installed), each clean and with pink
noise mixed in at 15 dB SNR (sox's ``synth pinknoise`` when ``sox`` is on the PATH, else numpy's; the
params say which). Each utterance gets 300 ms of silence before and 1.5 s after.

Each utterance runs in a fresh session of one :class:`~kairos.runtime.Runtime` with a lean agent (a
short voice system prompt and :class:`~kairos.voice.prompt.VoicePrompt`, so the prompt prefix is small
and byte-stable across sessions), a :class:`~kairos.voice.session.VoiceSession` with its own listener
on the shared engines (:func:`~kairos.voice.stack.voice_stack`), the stack's synthesiser and a
:class:`~kairos.voice.playback.Playback` with no sink (the clock alone). Frames are fed in real time:
frame *i* at ``t0 + i * 30 ms`` (when a frame's work ran late the next ones go at once, as a
microphone's buffer would hand them over): the speculation head start exists only in real time.
After the audio the microphone stays open (silence) until the turn's first audio (30 s at most) and
the reply has finished generating.

Probes, on every fourth utterance each: a **barge-in** ("Wait, stop. What about Friday?") fed once
the reply audio plays, measured as the session's ``bargein_ms`` (from the frame that showed speech to
the audio paused) and as ``onset_to_silence_ms`` (from the frame holding the speech onset, so it
includes the VAD's confirmation); and a **backchannel** ("Mm-hm.", "Yeah.") fed during playback,
which should pause the audio and resume it, not cut it (the session's ``resumed``/``backchannel``
events vs ``cut``).

Latency fields are :class:`~kairos.voice.session.TurnTiming`'s: ms from the end-of-speech decision.
Each row's ``model_calls`` adds, per model call, its start (``start_ms``, same origin: negative when
speculation started it before the decision), prompt tokens, those served from the KV cache, and the
model's own TTFT.
``speech_end_to_first_audio_ms`` adds what the user waits before that decision: from the true end of
the synthesised speech (last frame above 5% of the loudest frame's energy) to the first reply audio,
on the wall clock (real-time runs only).

``wer`` is the streaming listener's final transcript against the script; ``wer_offline`` is the same
Whisper on the whole padded clip at once, so the gap between them is the listener's (its segment
starts 150 ms before the VAD's confirmed onset). Other processes
share the CPUs: each row has the 1-minute load average at its start, the params the run's.

``--no-model`` (or ``--model scripted``) answers with a scripted double: a smoke test of the bench's
plumbing (ASR, TTS, VAD and the session are real), whose LLM latencies are the double's sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
from rich.console import Console

from kairos.agent import Agent
from kairos.agent.events import Activity, AgentEvent, FinalAnswer, ModelDeltaEvent, RequestStats, RunError
from kairos.context.session import SessionStore
from kairos.models.base import Model
from kairos.models.types import ModelRequest, ModelResponse
from kairos.runtime import Runtime
from kairos.testing import ScriptedModel, reply
from kairos.voice.audio import FRAME_MS, FRAME_SAMPLES, Pcm, frames
from kairos.voice.listen import Heard, Listener
from kairos.voice.playback import Playback
from kairos.voice.session import VoiceEvent, VoiceSession
from kairos.voice.stack import VoiceStack
from kairos.voice.wer import word_error_rate
from kairos_bench.voice_clips import (
    PAD_AFTER_MS,
    PAD_BEFORE_MS,
    SNR_DB,
    Clip,
    Probe,
    Utterance,
    available_voices,
    load_script,
    make_clip,
    plan,
    synthesizer_for,
)

N_CTX = 4096
MAX_TOKENS = 96
FINAL_WAIT_S = 5.0
TURN_WAIT_S = 30.0
REPLY_WAIT_S = 90.0
DEFAULT_UTTERANCES = 24
QUICK_UTTERANCES = 6
SILENT = np.zeros(FRAME_SAMPLES, dtype=np.int16)


# -- one utterance -----------------------------------------------------------------------------


class Mic:
    """Feeds a voice session frames at a steady pace (``period_s`` per 30 ms frame; 0.03: real time)."""

    def __init__(self, vs: VoiceSession, period_s: float) -> None:
        self.vs = vs
        self.period_s = period_s
        self.t0 = time.perf_counter()
        self.fed = 0

    def due(self, frame: int) -> float:
        """When frame ``frame`` (from the first) is due on the wall clock."""
        return self.t0 + frame * self.period_s

    async def feed(self, frame: Pcm) -> float:
        """Feed one frame at its time; returns when it was fed."""
        delay = self.due(self.fed) - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        at = time.perf_counter()
        await self.vs.feed(frame)
        self.fed += 1
        return at

    async def play(self, pcm: Pcm) -> tuple[int, list[float]]:
        """Feed ``pcm`` frame by frame: its first frame's index and when each frame was fed."""
        start = self.fed
        return start, [await self.feed(f) for f in frames(pcm)]

    async def until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Feed silence until ``done()`` (True) or ``timeout_s`` of wall time (False)."""
        end = time.perf_counter() + timeout_s
        while not done():
            if time.perf_counter() > end:
                return False
            await self.feed(SILENT)
        return True


@dataclass
class RunWatch:
    """Whether the agent is generating for a session (a model call started and its run has not ended)."""

    session_id: str
    active: bool = False
    ended: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    """Per model call: prompt tokens, those served from the KV cache, completion tokens, TTFT."""
    starts: list[float] = field(default_factory=list)
    """Per model call: when it started (``waiting``), on the wall clock."""

    def __call__(self, session_id: str, event: AgentEvent) -> None:
        if session_id != self.session_id:
            return
        if isinstance(event, Activity) and event.kind == "waiting":
            self.starts.append(time.perf_counter())
        if isinstance(event, RequestStats):
            u = event.usage
            ttft = None if u.ttft_s is None else round(u.ttft_s * 1000, 1)
            self.requests.append(
                {"prompt": u.prompt_tokens, "cached": u.cached_prompt_tokens, "completion": u.completion_tokens,
                 "ttft_ms": ttft, "total_ms": round(u.total_s * 1000, 1)}
            )  # fmt: skip
        elif isinstance(event, Activity | ModelDeltaEvent):
            self.active = True
        elif isinstance(event, FinalAnswer | RunError):
            self.active = False
            self.ended += 1


def _kinds(events: list[tuple[float, VoiceEvent]], *kinds: str) -> list[tuple[float, VoiceEvent]]:
    return [(t, e) for t, e in events if e.kind in kinds]


class Revising:
    """A listener whose final transcript differs from the one taken at the pause: a speculation miss."""

    def __init__(self, inner: Listener) -> None:
        self.inner = inner
        self.endpointer = inner.endpointer

    def feed(self, frame: Pcm) -> list[Heard]:
        return [
            dataclasses.replace(h, text=h.text.rstrip(" .?!") + ", please?") if h.kind == "final" and h.text else h
            for h in self.inner.feed(frame)
        ]


async def run_utterance(
    rt: Runtime, stack: VoiceStack, utt: Utterance, clip: Clip, probe: Clip | None, period_s: float
) -> dict[str, Any]:
    """Speak ``clip`` to a fresh session, wait for the reply, run the probe; the row."""
    sid = rt.create_session(f"voice bench {utt.index}")
    events: list[tuple[float, VoiceEvent]] = []
    watch = RunWatch(sid)
    rt.agent_listeners.append(watch)
    listener = cast(Listener, Revising(stack.listener())) if utt.revised else stack.listener()  # duck-typed
    vs = VoiceSession(
        rt, sid, listener, stack.synthesizer, Playback(),
        on_event=lambda e: events.append((time.perf_counter(), e)),
    )  # fmt: skip
    row: dict[str, Any] = {
        "index": utt.index,
        "text": utt.text,
        "voice": utt.voice.label,
        "engine": utt.voice.engine,
        "rate": utt.voice.rate,
        "noise": f"pink {SNR_DB:g} dB" if utt.noisy else "clean",
        "probe": utt.probe,
        "revised": utt.revised,
    }
    t_start = time.perf_counter()
    try:
        async with vs:
            mic = Mic(vs, period_s)
            start, _ = await mic.play(clip.pcm)
            await mic.until(lambda: bool(_kinds(events, "final")), FINAL_WAIT_S)
            got_turn = await mic.until(lambda: len(vs.turns) >= 1, TURN_WAIT_S)
            if got_turn and probe is not None and utt.probe is not None:
                row |= await _probe(mic, vs, events, utt.probe, probe, utt.probe_text)
            want = 2 if utt.probe == "bargein" and row.get("probe_outcome") == "cut" else 1
            await mic.until(lambda: len(vs.turns) >= want and not watch.active, REPLY_WAIT_S)
            speech_end_at = mic.due(start + clip.end_frame)
    finally:
        with contextlib.suppress(ValueError):
            rt.agent_listeners.remove(watch)
    finals = [e.text for _, e in _kinds(events, "final")]
    transcript = finals[0] if finals else ""
    turn = vs.turns[0] if vs.turns else None
    turn_at = next((t for t, e in _kinds(events, "turn")), None)
    perceived = None
    if turn_at is not None and period_s == FRAME_MS / 1000:
        perceived = round((turn_at - speech_end_at) * 1000, 1)
    replies = [e.text for _, e in _kinds(events, "reply_text")]
    final_at = next((t for t, _ in _kinds(events, "final")), None)
    if turn is not None and final_at is not None:  # the end-of-speech decision: the final less the ASR's time
        eos_at = final_at - turn.asr_final_ms / 1000
        for call, started in zip(watch.requests, watch.starts, strict=False):
            call["start_ms"] = round((started - eos_at) * 1000, 1)
    row |= {
        "transcript": transcript,
        "wer": round(word_error_rate(utt.text, transcript), 3),
        "turn": turn is not None,
        **{k: v for k, v in (turn.to_record() if turn else {}).items() if k != "text"},
        "speech_end_to_first_audio_ms": perceived,
        "reply": " ".join(replies),
        "replies": vs.replies,
        "model_calls": watch.requests,
        "noise_mixer": clip.mixer,
        "wall_s": round(time.perf_counter() - t_start, 2),
    }
    return row


async def _probe(
    mic: Mic,
    vs: VoiceSession,
    events: list[tuple[float, VoiceEvent]],
    kind: Probe,
    clip: Clip,
    clip_text: str,
) -> dict[str, Any]:
    """Once the reply plays, speak ``clip`` over it; what the session did."""
    playing = await mic.until(lambda: vs.playback.speaking, 10.0)
    seen, barges = len(events), len(vs.bargein_ms)
    _, fed_at = await mic.play(clip.pcm)

    def settled() -> bool:
        kinds = {e.kind for _, e in events[seen:]}
        return bool(kinds & {"cut", "backchannel"}) or ("final" in kinds)

    await mic.until(settled, FINAL_WAIT_S)
    if kind == "bargein":
        await mic.until(lambda: len(vs.turns) >= 2, TURN_WAIT_S)
    after = events[seen:]
    kinds = [e.kind for _, e in after]
    paused_at = next((t for t, e in after if e.kind == "paused"), None)
    onset_at = fed_at[min(clip.onset_frame, len(fed_at) - 1)] if fed_at else None
    heard = [f"{e.kind}: {e.text}" for _, e in after if e.kind in ("interim", "final", "backchannel") and e.text]
    outcome = "cut" if "cut" in kinds else "kept" if {"resumed", "backchannel"} & set(kinds) else "none"
    followup = vs.turns[1].to_record() if kind == "bargein" and len(vs.turns) >= 2 else None
    return {
        "probe_said": clip_text,
        "probe_heard": heard,
        "probe_playing": playing,
        "probe_paused": paused_at is not None,
        "probe_outcome": outcome,
        "bargein_ms": round(vs.bargein_ms[barges], 2) if len(vs.bargein_ms) > barges else None,
        "onset_to_silence_ms": (
            round((paused_at - onset_at) * 1000, 1) if paused_at is not None and onset_at is not None else None
        ),
        "followup_turn": followup,
        "probe_events": kinds,
    }


# -- the scripted double -----------------------------------------------------------------------


def scripted_model() -> ScriptedModel:
    """Canned spoken replies, three sentences each (long enough to speak over)."""

    def answer(request: ModelRequest) -> ModelResponse:
        said = next((m.content for m in reversed(request.messages) if m.from_user), "")
        return reply(
            f"You asked: {said.splitlines()[-1][:60]} I can't check that from here. "
            "But I can set a reminder for you, if you like."
        )

    return ScriptedModel([answer] * 1000, name="scripted", chunk=8, delay_s=0.05)


# -- the run -----------------------------------------------------------------------------------


def run(
    *,
    console: Console,
    quick: bool = False,
    model: str | Model = "local",
    no_model: bool | None = None,
    limit: int | None = None,
    realtime: bool = True,
) -> dict[str, Any]:
    """Run ``limit`` utterances (default 24, ``quick``: 6); ``realtime=False`` feeds 10x faster (tests)."""
    n = limit if limit is not None else QUICK_UTTERANCES if quick else DEFAULT_UTTERANCES
    scripted = bool(no_model) or model == "scripted"
    return asyncio.run(_run(console, n, scripted, model, realtime))


async def _run(console: Console, n: int, scripted: bool, model: str | Model, realtime: bool) -> dict[str, Any]:
    owned: Any = None
    if scripted:
        llm: Model = scripted_model()
    elif isinstance(model, str):
        from kairos.models.local import LocalModel

        owned = LocalModel(model, n_ctx=N_CTX)
        with console.status("loading the model ..."):
            owned.load()  # before the voice engines: llama's libggml first (see SileroConfirmer)
        llm = owned
    else:
        llm = model
    try:
        from kairos.voice.stack import voice_stack

        stack = voice_stack()
        return await _measure(console, n, scripted, llm, stack, realtime)
    finally:
        if owned is not None:
            owned.close()


async def _measure(
    console: Console, n: int, scripted: bool, llm: Model, stack: VoiceStack, realtime: bool
) -> dict[str, Any]:
    from kairos.voice.prompt import VoicePrompt

    script = load_script()
    voices = available_voices()
    if not voices:
        raise RuntimeError("no synthesiser for the utterances: install the voice extra or espeak-ng")
    table = plan(script, voices, n)
    mixer: Literal["sox", "numpy"] = "sox" if shutil.which("sox") else "numpy"
    says = {v: synthesizer_for(v, stack) for v in voices}
    with console.status("synthesising the utterances ..."):
        clips = [make_clip(says[u.voice], u.text, u.noisy, seed=u.index, mixer=mixer) for u in table]
        probes = [
            make_clip(says[u.voice], u.probe_text, u.noisy, seed=1000 + u.index, mixer=mixer) if u.probe else None
            for u in table
        ]
    with console.status("transcribing the whole clips offline ..."):
        offline = [stack.transcriber.transcribe(c.pcm) for c in clips]
    period = FRAME_MS / 1000 if realtime else FRAME_MS / 10_000
    load_start = os.getloadavg()[0]
    agent = Agent(llm, system=script["system"], plugins=[VoicePrompt()], max_tokens=MAX_TOKENS)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kairos-voice-") as tmp:
        async with Runtime(agent, SessionStore(Path(tmp))) as rt:
            # warm-up (not measured): Whisper, Silero, the synthesiser and the prompt prefix in the KV cache
            warm = Utterance(-1, script["utterances"][0], voices[0], False)
            await run_utterance(rt, stack, warm, make_clip(says[voices[0]], warm.text, False, 0), None, period)
            for utt, clip, probe, heard in zip(table, clips, probes, offline, strict=True):
                load = round(os.getloadavg()[0], 2)
                r = await run_utterance(rt, stack, utt, clip, probe, period)
                r |= {"transcript_offline": heard, "wer_offline": round(word_error_rate(utt.text, heard), 3)}
                rows.append(r | {"load1": load})
                console.print(
                    f"{utt.index:2d} {utt.voice.label:22s} {r['noise']:11s} wer={r['wer']:.2f} "
                    f"eos_wait={r.get('eos_wait_ms')!s:>5} audio={r.get('first_audio_ms')!s:>7} ms "
                    f"spec={r.get('speculation')!s:7s} probe={utt.probe or '-'}:{r.get('probe_outcome', '-')} "
                    f"heard={r['transcript'][:50]!r}"
                )
    mixers = sorted({r["noise_mixer"] for r in rows if r["noise_mixer"] != "none"})
    return {
        "bench": "voice",
        "params": {
            "model": getattr(llm, "name", "custom"),
            "scripted": scripted,
            "utterances": len(rows),
            "requests": len(script["utterances"]),
            "voices": [v.label for v in voices],
            "synthesizer": type(stack.synthesizer).__name__,
            "asr": type(stack.transcriber).__name__,
            "snr_db": SNR_DB,
            "noise": "pink",
            "noise_mixer": mixers[0] if len(mixers) == 1 else mixers,
            "pad_ms": [PAD_BEFORE_MS, PAD_AFTER_MS],
            "realtime": realtime,
            "max_tokens": MAX_TOKENS,
            "n_ctx": N_CTX,
            **_source_state(),
            "cpus": os.cpu_count(),
            "load1_start": round(load_start, 2),
            "load1_end": round(os.getloadavg()[0], 2),
            "bargein_text": script["bargein"],
            "backchannels": script["backchannels"],
        },
        "rows": rows,
        "summary": summarize(rows),
    }


def _source_state() -> dict[str, Any]:
    """The commit measured and whether kairos.voice had uncommitted changes (others edit it while benches run)."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "src/kairos/voice"],
            capture_output=True, text=True, timeout=10,
        ).stdout.split()[1::2]  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"commit": commit or None, "voice_uncommitted": dirty}


def _p(values: list[float], q: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 1)
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 1)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The waterfall's medians, end-of-speech to first audio p50/p95, barge-in p95, hit rate, WER."""
    turns = [r for r in rows if r["turn"] and not r.get("revised")]  # the waterfall: turns as spoken
    revised = [r for r in rows if r["turn"] and r.get("revised")]
    misses = [r for r in revised if r["speculation"] == "miss"]
    reruns = [r["model_calls"][-1] for r in misses if r.get("model_calls")]  # the cut call reports no stats

    def col(key: str, among: list[dict[str, Any]] = turns) -> list[float]:
        return [float(r[key]) for r in among if r.get(key) is not None]

    def calls(key: str) -> list[float]:
        out = []
        for r in turns:
            for c in r.get("model_calls", [])[:1]:  # each utterance's first call: its turn's
                value = c["prompt"] - c["cached"] if key == "new" else c.get(key)
                if value is not None:
                    out.append(float(value))
        return out

    spec = [r for r in turns if r["speculation"] != "none"]
    bargeins = [r for r in rows if r["probe"] == "bargein"]
    backs = [r for r in rows if r["probe"] == "backchannel" and r.get("probe_paused")]
    pauses = col("bargein_ms", [r for r in rows if r["probe"]])
    onsets = col("onset_to_silence_ms", [r for r in rows if r["probe"]])
    by: dict[str, dict[str, float]] = {"voice": {}, "noise": {}}
    for key in by:
        for value in sorted({r[key] for r in rows}):
            mine = [r["wer"] for r in rows if r[key] == value]
            by[key][value] = round(statistics.fmean(mine), 3)
    return {
        "eos_to_first_audio_p50_ms": _p(col("first_audio_ms"), 50),
        "eos_to_first_audio_p95_ms": _p(col("first_audio_ms"), 95),
        "speech_end_to_first_audio_p50_ms": _p(col("speech_end_to_first_audio_ms"), 50),
        "speech_end_to_first_audio_p95_ms": _p(col("speech_end_to_first_audio_ms"), 95),
        "eos_wait_ms_p50": _p(col("eos_wait_ms"), 50),
        "asr_final_ms_p50": _p(col("asr_final_ms"), 50),
        "llm_first_token_ms_p50": _p(col("llm_first_token_ms"), 50),
        "first_chunk_ms_p50": _p(col("first_chunk_ms"), 50),
        "first_audio_ms_p50": _p(col("first_audio_ms"), 50),
        "model_call_start_ms_p50": _p(calls("start_ms"), 50),
        "model_ttft_p50_ms": _p(calls("ttft_ms"), 50),
        "model_new_prompt_tokens_p50": _p(calls("new"), 50),
        "model_cached_prompt_tokens_p50": _p(calls("cached"), 50),
        "speculative_hit_rate": round(sum(r["speculation"] == "hit" for r in spec) / len(spec), 3) if spec else None,
        "speculation": {k: sum(r["speculation"] == k for r in turns) for k in ("hit", "miss", "aborted", "none")},
        "revised_turns": len(revised),
        "revised_miss_rate": round(len(misses) / len(revised), 3) if revised else None,
        "restart_first_audio_p50_ms": _p(col("first_audio_ms", misses), 50),
        "restart_ttft_p50_ms": _p([float(c["ttft_ms"]) for c in reruns if c.get("ttft_ms") is not None], 50),
        "restart_new_prompt_tokens_p50": _p([float(c["prompt"] - c["cached"]) for c in reruns], 50),
        "restart_cached_prompt_tokens_p50": _p([float(c["cached"]) for c in reruns], 50),
        "wer": round(statistics.fmean(r["wer"] for r in rows), 3) if rows else None,
        "wer_offline": round(statistics.fmean(r["wer_offline"] for r in rows), 3) if rows else None,
        "wer_by_voice": by["voice"],
        "wer_by_noise": by["noise"],
        "turns": len(turns),
        "utterances_without_turn": len(rows) - len(turns),
        "bargein_to_silence_p50_ms": _p(pauses, 50),
        "bargein_to_silence_p95_ms": _p(pauses, 95),
        "onset_to_silence_p50_ms": _p(onsets, 50),
        "onset_to_silence_p95_ms": _p(onsets, 95),
        "pauses_measured": len(pauses),
        "bargein_cut_rate": (
            round(sum(r.get("probe_outcome") == "cut" for r in bargeins) / len(bargeins), 3) if bargeins else None
        ),
        "backchannel_kept_rate": (
            round(sum(r.get("probe_outcome") == "kept" for r in backs) / len(backs), 3) if backs else None
        ),
        "backchannels_measured": len(backs),
        "pipecat_cloud_cascade_ms": "500-800 (published)",
        "target_eos_to_first_audio_p50_ms": 1000,
        "target_bargein_to_silence_p95_ms": 150,
    }
