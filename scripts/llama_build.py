"""Build llama-cpp-python once per machine and build flavour; print the folder that holds the wheel.

Usage: python scripts/llama_build.py FLAVOUR [--python PY]

Flavours (the `llama-build` bench measures them side by side):
  dispatch  every x86 CPU variant as its own library, the best one picked when the model loads
            (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS); kairos picks the variant from the features the
            kernel grants (/proc/cpuinfo), so a CPU that lists AMX or AVX-512 the VM does not grant is safe.
            Built once, reusable on any x86-64 host.
  avx2      AVX2 + FMA + F16C + BMI2 only (the build kairos shipped before the dispatch build).
  native    -march=native: this host's CPU as the compiler sees it (CPUID, not what the kernel grants);
            kept per set of CPU flags, never reused on another CPU.

The wheel is kept in ~/.cache/kairos/wheels/llama-cpp-python-VERSION-KEY, outside the repository, so a fresh
clone on the same machine does not compile again. Compiler output goes through build_progress.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

VERSION = "0.3.36"
FLAVOURS = {
    "dispatch": "-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON",
    "avx2": "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON",
    "native": "-DGGML_NATIVE=ON",
}
MINUTES = {"dispatch": "~12", "avx2": "~6", "native": "~6"}


def cpu_flags() -> list[str]:
    """The CPU feature flags the kernel reports (empty where /proc/cpuinfo is missing)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            return sorted(line.split(":", 1)[1].split())
    return []


def wheel_dir(flavour: str) -> Path:
    """Where the wheel of ``flavour`` is kept; a native build is keyed by this CPU's flags too."""
    key = flavour
    if flavour == "native":
        key += "-" + hashlib.sha256(" ".join(cpu_flags()).encode()).hexdigest()[:10]
    return Path.home() / ".cache" / "kairos" / "wheels" / f"llama-cpp-python-{VERSION}-{key}"


def build(flavour: str, python: str) -> Path:
    """Compile the wheel unless it is already kept; returns its folder."""
    out = wheel_dir(flavour)
    if any(out.glob("llama_cpp_python-*.whl")):
        return out
    minutes = MINUTES[flavour]
    print(f"==> llama-cpp-python {VERSION}, {flavour} build (once per machine: {minutes} min)", file=sys.stderr)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    started = time.monotonic()
    env = os.environ | {"CMAKE_ARGS": FLAVOURS[flavour], "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)}
    cmd = [python, "-m", "pip", "wheel", "-v", "--no-deps", "--no-cache-dir", "-w", str(tmp)]
    pip = subprocess.Popen(
        [*cmd, f"llama-cpp-python=={VERSION}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    progress = Path(__file__).with_name("build_progress.py")
    shown = subprocess.run([sys.executable, str(progress)], stdin=pip.stdout, stdout=sys.stderr, check=False)
    if pip.wait() != 0 or shown.returncode != 0 or not any(tmp.glob("*.whl")):
        raise SystemExit(f"building llama-cpp-python ({flavour}) failed: see the output above")
    (tmp / "build.json").write_text(
        json.dumps(
            {
                "flavour": flavour,
                "cmake_args": FLAVOURS[flavour],
                "seconds": round(time.monotonic() - started),
                "cpus": os.cpu_count(),
            }
        )
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def main() -> int:
    """Build (or find) the wheel of the flavour named on the command line and print its folder."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("flavour", choices=sorted(FLAVOURS))
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose pip builds the wheel")
    args = parser.parse_args()
    print(build(args.flavour, args.python))
    return 0


if __name__ == "__main__":
    sys.exit(main())
