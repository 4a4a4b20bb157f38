"""Pick llama.cpp's CPU kernels by what the kernel grants, not by what the CPU lists.

kairos builds llama-cpp-python with llama.cpp's runtime CPU dispatch (``GGML_BACKEND_DL`` +
``GGML_CPU_ALL_VARIANTS``): one ``libggml-cpu-<variant>.so`` per x86 feature level, chosen when the
model loads, so one build runs at full speed on any x86-64 host. Left to itself, llama.cpp scores
the variants by CPUID alone (its own source says "this does not check for OS support"), so a VM that
lists AMX or AVX-512 without granting their register state gets kernels that crash; and it looks for
the variants in the current directory, which for kairos is a workspace: a cloned repository could
plant a library there. So kairos loads the variant itself before llama.cpp looks:

* the features come from ``/proc/cpuinfo``, where Linux lists only what it enabled (it clears the
  AVX-512 and AMX flags when the matching XSAVE state is not granted);
* AMX variants are skipped unless ``KAIROS_LLAMA_AMX=1``: a VM may list AMX and still fault on it,
  which is how the native build crashed here before;
* only the folders the llama_cpp wheel installed are searched, and once a backend is registered
  llama.cpp never scans a directory of its own.

A build without dispatch (one CPU backend linked in) needs none of this, and is left alone.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
from pathlib import Path

from kairos.errors import ModelError

# Each x86 variant llama.cpp 0.3.36 builds, with the /proc/cpuinfo flags it needs and ggml's own
# score bits (ggml-cpu/arch/x86/cpu-feats.cpp): the highest score whose flags are all granted wins.
_AVX512 = ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")
_HASWELL = ("sse4_2", "avx", "f16c", "fma", "avx2", "bmi2")
_SCORE = {
    "fma": 1, "f16c": 2, "sse4_2": 4, "bmi2": 8, "avx": 16, "avx2": 32, "avx_vnni": 64, "avx512f": 128,
    "avx512vbmi": 256, "avx512_bf16": 512, "avx512_vnni": 1024, "amx_int8": 2048,
}  # fmt: skip
X86_VARIANTS: dict[str, tuple[str, ...]] = {
    "x64": (),
    "sse42": ("sse4_2",),
    "sandybridge": ("sse4_2", "avx"),
    "ivybridge": ("sse4_2", "avx", "f16c"),
    "piledriver": ("sse4_2", "avx", "f16c", "fma"),
    "haswell": _HASWELL,
    "skylakex": (*_HASWELL, *_AVX512),
    "cannonlake": (*_HASWELL, *_AVX512, "avx512vbmi"),
    "cascadelake": (*_HASWELL, *_AVX512, "avx512_vnni"),
    "icelake": (*_HASWELL, *_AVX512, "avx512vbmi", "avx512_vnni"),
    "cooperlake": (*_HASWELL, *_AVX512, "avx512_vnni", "avx512_bf16"),
    "zen4": (*_HASWELL, *_AVX512, "avx512vbmi", "avx512_vnni", "avx512_bf16"),
    "alderlake": (*_HASWELL, "avx_vnni"),
    "sapphirerapids": (*_HASWELL, *_AVX512, "avx512vbmi", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8"),
}
_VARIANT_DIRS = ("lib", "../bin")
"""Where a dispatch wheel puts the variants, relative to the llama_cpp package (its wheel installs them in
site-packages/bin): never the current directory."""
_loaded: str | None = None


def granted_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU features the running kernel enabled (the ``flags`` line of ``/proc/cpuinfo``)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def best_variant(available: list[str], flags: frozenset[str], *, allow_amx: bool = False) -> str | None:
    """The fastest of ``available`` whose every feature is in ``flags`` (None: none of them fits)."""
    fits = [
        name
        for name in available
        if name in X86_VARIANTS
        and set(X86_VARIANTS[name]) <= flags
        and (allow_amx or not any(f.startswith("amx") for f in X86_VARIANTS[name]))
    ]
    return max(fits, key=lambda n: sum(_SCORE.get(f, 0) for f in X86_VARIANTS[n]), default=None)


def _loaded_ggml() -> Path | None:
    """The libggml that llama_cpp's libllama is linked to, as mapped in this process.

    A wheel holds several copies of it (``libggml.so``, ``.so.0``, ``.so.0.x.y`` are files, not links):
    a backend registered in another copy is one llama.cpp never sees.
    """
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if Path(path).name.startswith("libggml.so"):
            return Path(path)
    return None


def ensure_cpu_backend(*, verbose: bool = False) -> str | None:
    """Register the CPU variant that fits this host before llama.cpp picks one; returns its name.

    Call it before the first ``llama_cpp.Llama``. None: the build links its CPU backend in (no choice
    to make). Idempotent. ``verbose``: let llama.cpp say which library it loaded.

    Raises:
        ModelError: a dispatch build with no variant this CPU can run, or one that does not load.
    """
    global _loaded
    if _loaded is not None:
        return _loaded
    import llama_cpp

    package = Path(llama_cpp.__file__).parent
    lib_dir = package / "lib"
    found = {
        p.name[len("libggml-cpu-") : -len(".so")]: p
        for d in _VARIANT_DIRS
        for p in (package / d).glob("libggml-cpu-*.so")
    }
    if not found:
        return None
    variants = sorted(found)
    ggml = ctypes.CDLL(str(_loaded_ggml() or lib_dir / "libggml.so"))
    ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    ggml.ggml_backend_load.restype = ctypes.c_void_p
    ggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
    if ggml.ggml_backend_reg_count() > 0:  # something registered a backend already (another loader)
        _loaded = "preloaded"
        return _loaded
    choice = best_variant(variants, granted_flags(), allow_amx=os.environ.get("KAIROS_LLAMA_AMX") == "1")
    if choice is None:
        raise ModelError(
            f"llama.cpp has no CPU kernels for this {platform.machine()} CPU (variants built: {', '.join(variants)})"
        )
    log = logging.getLogger("llama-cpp-python")  # llama_cpp prints ggml's log lines at this logger's level
    level = log.level
    if not verbose:
        log.setLevel(logging.ERROR)
    try:
        registered = ggml.ggml_backend_load(str(found[choice]).encode())
    finally:
        log.setLevel(level)
    if not registered:
        raise ModelError(f"llama.cpp's CPU backend {found[choice]} did not load")
    _loaded = choice
    return _loaded
