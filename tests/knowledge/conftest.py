from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kairos.knowledge import HashEmbedder, KnowledgeBase


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    base = KnowledgeBase.open(tmp_path / ".kairos", HashEmbedder())
    yield base
    base.close()
