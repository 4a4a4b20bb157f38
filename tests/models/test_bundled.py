"""Assembly of bundled GGUFs from part packages, with fake parts (no real model needed)."""

from __future__ import annotations

import hashlib
import os
import sys
import types
from pathlib import Path

import pytest

from kairos.errors import BundledModelError, ConfigError
from kairos.models import bundled
from kairos.models.bundled import BundledModel

PARTS = [b"GGUF" + b"a" * 1000, b"b" * 2048, b"c" * 17]


def _entry(data: bytes, sha: str | None = None) -> BundledModel:
    return BundledModel(
        name="fake",
        description="a fake bundled model",
        filename="fake.gguf",
        module_prefix="kairos_fake_part",
        package_prefix="kairos-fake-part",
        version="1.0.0",
        parts=len(PARTS),
        size=len(data),
        sha256=sha or hashlib.sha256(data).hexdigest(),
        extra="fake",
    )


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BundledModel:
    """A registry entry whose parts are tiny temp files served by fake importable modules."""
    data = b"".join(PARTS)
    for i, chunk in enumerate(PARTS, start=1):
        part = tmp_path / "parts" / f"part{i}.bin"
        part.parent.mkdir(exist_ok=True)
        part.write_bytes(chunk)
        mod = types.ModuleType(f"kairos_fake_part{i}")
        mod.get_part_path = lambda p=part: str(p)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
    entry = _entry(data)
    monkeypatch.setitem(bundled.REGISTRY, "fake", entry)
    return entry


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_assemble_happy_path(fake: BundledModel, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    calls: list[tuple[int, int]] = []
    path = bundled.assemble("fake", cache_dir=cache, progress=lambda d, t: calls.append((d, t)))
    assert path == cache / "fake.gguf"
    assert path.read_bytes() == b"".join(PARTS)
    assert _leftovers(cache) == ["fake.gguf", "fake.gguf.verified"]
    assert calls and calls[-1] == (fake.size, fake.size)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_sidecar_fast_path_skips_parts(fake: BundledModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    path = bundled.assemble("fake", cache_dir=cache)
    monkeypatch.delitem(sys.modules, "kairos_fake_part2")  # parts are gone: only the sidecar can answer
    calls: list[tuple[int, int]] = []
    assert bundled.assemble("fake", cache_dir=cache, progress=lambda d, t: calls.append((d, t))) == path
    assert calls == []  # nothing re-read or re-hashed
    assert bundled.verify("fake", cache_dir=cache)


def test_file_without_sidecar_is_rehashed_not_rebuilt(fake: BundledModel, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = bundled.assemble("fake", cache_dir=cache)
    (cache / "fake.gguf.verified").unlink()
    assert bundled.assemble("fake", cache_dir=cache) == path
    assert (cache / "fake.gguf.verified").exists()


def test_modified_file_invalidates_sidecar(fake: BundledModel, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = bundled.assemble("fake", cache_dir=cache)
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(1, 1))
    assert not bundled.verify("fake", cache_dir=cache)
    assert not (cache / "fake.gguf.verified").exists()
    assert bundled.assemble("fake", cache_dir=cache).read_bytes() == b"".join(PARTS)  # rebuilt


def test_missing_part_names_package(fake: BundledModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kairos_fake_part2", None)  # makes import raise ImportError
    cache = tmp_path / "cache"
    with pytest.raises(BundledModelError) as err:
        bundled.assemble("fake", cache_dir=cache)
    assert "pip install kairos-fake-part2==1.0.0" in str(err.value)
    assert "pip install 'kairos-harness[fake]'" in str(err.value)
    assert err.value.package == "kairos-fake-part2==1.0.0"
    assert not (cache / "fake.gguf").exists()
    assert _leftovers(cache) == []


def test_checksum_mismatch_leaves_nothing(fake: BundledModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(bundled.REGISTRY, "fake", _entry(b"".join(PARTS), sha="0" * 64))
    cache = tmp_path / "cache"
    with pytest.raises(BundledModelError, match="sha256") as err:
        bundled.assemble("fake", cache_dir=cache)
    assert "kairos-harness[fake]" in str(err.value)
    assert _leftovers(cache) == []  # neither the final file nor the temporary one


def test_io_error_mid_write_leaves_nothing(fake: BundledModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(done: int, total: int) -> None:
        raise OSError(28, "No space left on device")

    cache = tmp_path / "cache"
    with pytest.raises(BundledModelError, match="No space left"):
        bundled.assemble("fake", cache_dir=cache, progress=boom)
    assert _leftovers(cache) == []


def test_env_overrides_cache_dir(fake: BundledModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAIROS_MODEL_CACHE", str(tmp_path / "envcache"))
    assert bundled.default_cache_dir() == tmp_path / "envcache"
    assert bundled.assemble("fake") == tmp_path / "envcache" / "fake.gguf"


def test_resolve_model_path(fake: BundledModel, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert bundled.resolve_model_path("fake", cache_dir=cache) == cache / "fake.gguf"
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF")
    assert bundled.resolve_model_path(str(gguf)) == gguf
    with pytest.raises(ConfigError, match="neither a bundled model"):
        bundled.resolve_model_path(str(tmp_path / "nope.gguf"))
    other = tmp_path / "model.bin"
    other.write_bytes(b"x")
    with pytest.raises(ConfigError, match="not a .gguf"):
        bundled.resolve_model_path(str(other))


def test_list_bundled(fake: BundledModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    row = next(r for r in bundled.list_bundled(cache) if r.name == "fake")
    assert row.installed and row.path is None and row.size == fake.size
    bundled.assemble("fake", cache_dir=cache)
    monkeypatch.delitem(sys.modules, "kairos_fake_part3")
    row = next(r for r in bundled.list_bundled(cache) if r.name == "fake")
    assert row.path == cache / "fake.gguf"
    assert row.parts_installed == 2 and row.missing == ("kairos-fake-part3==1.0.0",)
    assert {"local", "local-small"} <= {r.name for r in bundled.list_bundled(cache)}
