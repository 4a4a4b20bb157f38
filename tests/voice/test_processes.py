"""The voice stack loads beside the rest of kairos in one process, in either order (a native clash is a crash)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "first, second",
    [("usearch.index", "onnxruntime"), ("onnxruntime", "usearch.index")],
    ids=["usearch-first", "ort-first"],
)
def test_the_knowledge_index_and_onnxruntime_load_in_one_process(first: str, second: str) -> None:
    pytest.importorskip("onnxruntime", reason="the voice extra is not installed: pip install -e '.[voice]'")
    code = f"import {first}; import {second}; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])
