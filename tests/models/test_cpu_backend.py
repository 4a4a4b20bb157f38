"""Which of llama.cpp's CPU variants kairos loads: the fastest the kernel grants, never one it only lists."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kairos.models._cpu_backend import X86_VARIANTS, best_variant, granted_flags

ALL = sorted(X86_VARIANTS)
HASWELL = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi1 bmi2"
AVX512 = "avx512f avx512cd avx512vl avx512dq avx512bw"
ZEN4 = f"{HASWELL} {AVX512} avx512vbmi avx512_vnni avx512_bf16 avx512_vbmi2 gfni"
SAPPHIRE = f"{ZEN4} avx_vnni amx_tile amx_int8 amx_bf16"


def flags(text: str) -> frozenset[str]:
    return granted_flags(f"processor\t: 0\nflags\t\t: {text}\nbugs\t\t: none\n")


def test_the_fastest_variant_the_flags_allow() -> None:
    assert best_variant(ALL, flags(ZEN4)) == "zen4"
    assert best_variant(ALL, flags(HASWELL)) == "haswell"
    assert best_variant(ALL, flags(f"{HASWELL} {AVX512}")) == "skylakex"
    assert best_variant(ALL, flags(f"{HASWELL} avx_vnni")) == "alderlake"
    assert best_variant(ALL, flags("fpu sse sse2")) == "x64"


def test_amx_is_used_only_when_asked_for() -> None:
    assert best_variant(ALL, flags(SAPPHIRE)) == "zen4"  # a VM may list AMX and still fault on it
    assert best_variant(ALL, flags(SAPPHIRE), allow_amx=True) == "sapphirerapids"


def test_a_feature_the_kernel_did_not_grant_is_never_used() -> None:
    # Linux drops avx512* from /proc/cpuinfo when it does not enable their XSAVE state: the CPU lists them, the
    # kernel does not grant them, and the variant must not need them.
    assert best_variant(ALL, flags(HASWELL)) == "haswell"
    assert best_variant(["zen4", "skylakex"], flags(HASWELL)) is None  # nothing that fits was built


def test_unknown_variants_and_missing_cpuinfo() -> None:
    assert best_variant(["x64", "riscv-magic"], flags(ZEN4)) == "x64"
    assert granted_flags("no flags line here") == frozenset()


def _dispatch_build() -> bool:
    try:
        import llama_cpp
    except ImportError:
        return False
    package = Path(llama_cpp.__file__).parent
    return any(p for d in ("lib", "../bin") for p in (package / d).glob("libggml-cpu-*.so"))


@pytest.mark.model
@pytest.mark.skipif(not _dispatch_build(), reason="llama-cpp-python is not the dispatch build")
def test_a_library_planted_in_the_workspace_is_never_loaded(tmp_path: Path) -> None:
    """llama.cpp's own loader scans the current directory for libggml-*.so; kairos registers its variant first."""
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler to build the planted library")
    marker = tmp_path / "planted-code-ran"
    source = tmp_path / "evil.c"
    source.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void run(void) {\n"
        f'  FILE *f = fopen("{marker}", "w"); if (f) fclose(f);\n}}\n'
    )
    workspace = tmp_path / "cloned-repo"
    workspace.mkdir()
    for name in ("libggml-cpu-x64.so", "libggml-cuda.so", "libggml-cpu-zen9.so"):
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(workspace / name), str(source)], check=True)
    code = (
        "from kairos.models.local import LocalModel; m = LocalModel('local', n_ctx=512); m.load(); print(m.cpu_variant)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=workspace, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() in X86_VARIANTS
    assert not marker.exists()
