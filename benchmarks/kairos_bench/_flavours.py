"""llama-cpp-python build flavours side by side: each wheel in a folder of its own, each run in a child process.

``scripts/llama_build.py FLAVOUR`` keeps one wheel per flavour in ``~/.cache/kairos/wheels``. A bench
installs each into ``~/.cache/kairos/flavours/<name>`` (``pip install --target``, once) and runs
:mod:`kairos_bench._llama_child` with that folder first on ``PYTHONPATH``: the same kairos code on each
flavour's compiled llama.cpp, in a fresh process per measurement, one process at a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

from kairos.errors import KairosError

WHEELS = Path.home() / ".cache" / "kairos" / "wheels"
SITES = Path.home() / ".cache" / "kairos" / "flavours"
PREFIX = "llama-cpp-python-0.3.36-"


@dataclass(frozen=True)
class Flavour:
    """One build of llama-cpp-python: its wheel and the folder it is installed in for the benches."""

    name: str
    wheel: Path

    @property
    def site(self) -> Path:
        return SITES / self.wheel.parent.name


def available() -> list[Flavour]:
    """Every flavour whose wheel has been built on this machine (``scripts/llama_build.py``)."""
    found = []
    for folder in sorted(WHEELS.glob(PREFIX + "*")):
        wheels = sorted(folder.glob("llama_cpp_python-*.whl"))
        if folder.is_dir() and not folder.name.endswith(".tmp") and wheels:
            found.append(Flavour(folder.name[len(PREFIX) :], wheels[0]))
    return found


def _files(record: str) -> frozenset[str]:
    """The (path, hash) lines of a RECORD that come from the build (not pip's own bookkeeping)."""
    return frozenset(
        line.rsplit(",", 1)[0] for line in record.splitlines() if line.startswith("llama_cpp/") and ",sha256=" in line
    )


def installed() -> str | None:
    """The flavour installed in this environment (the one kairos runs on), by its files' hashes."""
    try:
        ours = _files(distribution("llama_cpp_python").read_text("RECORD") or "")
    except Exception:
        return None
    for flavour in available():
        with zipfile.ZipFile(flavour.wheel) as z:
            record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
            if _files(z.read(record).decode()) == ours:
                return flavour.name
    return None


def install(flavour: Flavour) -> Path:
    """The folder holding ``flavour``'s llama_cpp package, installed there once."""
    if not (flavour.site / "llama_cpp" / "__init__.py").exists():
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(flavour.site)]
        subprocess.run([*cmd, str(flavour.wheel)], check=True)
    return flavour.site


def run_child(
    flavour: Flavour, args: list[str], env: dict[str, str] | None = None, timeout: float = 900
) -> dict[str, Any]:
    """Run one ``_llama_child`` measurement on ``flavour``; its JSON result.

    Raises:
        KairosError: the child failed (its stderr's tail says why).
    """
    site = install(flavour)
    child_env = os.environ | (env or {})
    child_env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-m", "kairos_bench._llama_child", *args],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-1500:]
        raise KairosError(f"{flavour.name}: {' '.join(args)} failed (exit {proc.returncode}):\n{tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    if not result.get("llama_cpp", "").startswith(str(site)):
        raise KairosError(f"{flavour.name}: the child ran {result.get('llama_cpp')}, not {site}")
    return result
