"""``kairos voice --input FILE.wav --output reply.wav`` on the real speech engines and a scripted model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from kairos.cli import app
from kairos.testing import ScriptedModel, reply
from kairos.voice.asr import WhisperTranscriber
from kairos.voice.audio import read_wav, silence, write_wav
from kairos.voice.tts import HibariSynthesizer
from kairos.voice.wer import word_error_rate

runner = CliRunner()


def test_a_spoken_question_gets_a_spoken_answer_without_its_control_tokens(
    scripted: ScriptedModel, workspace: Path, hibari: HibariSynthesizer, whisper: WhisperTranscriber
) -> None:
    question = workspace / "question.wav"
    write_wav(
        question, np.concatenate([silence(300), hibari.synthesize("What is the capital of France?"), silence(300)])
    )
    scripted.extend([reply("[THINKING] The capital of France is Paris. [EMO:happy] Anything else?")])
    out = workspace / "reply.wav"
    result = runner.invoke(app, ["voice", "-w", str(workspace), "--input", str(question), "--output", str(out)])
    assert result.exit_code == 0, result.output
    said = [m.content for m in scripted.requests[0].messages if m.role == "user"]
    assert any("capital of France" in m for m in said)
    assert "# Voice" in scripted.requests[0].system_deployment  # the voice part, after the cache boundary
    assert not scripted.requests[0].tools  # the voice agent has no tools by default
    assert "Paris" in result.output and "[" not in result.output.split("agent:")[1].split("\n")[0]
    assert "first audio" in result.output  # the waterfall
    audio, rate = read_wav(out)
    heard = whisper.transcribe(audio)
    assert word_error_rate("The capital of France is Paris. Anything else?", heard) <= 0.3
    assert "thinking" not in heard.lower() and "happy" not in heard.lower()


def test_an_unreadable_input_file_is_a_clear_error(workspace: Path) -> None:
    bad = workspace / "not-audio.wav"
    bad.write_text("hello")
    result = runner.invoke(app, ["voice", "-w", str(workspace), "--input", str(bad)])
    assert result.exit_code == 1 and "cannot read" in result.output and "WAV" in result.output
