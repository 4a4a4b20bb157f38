"""Shared fixtures. Real-model calls are refused unless a test is marked ``model``."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kairos.context.session import Session, SessionStore


@pytest.fixture(autouse=True)
def _refuse_real_models(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unmarked test that loads the bundled model fails fast instead of running for minutes."""
    if request.node.get_closest_marker("model") is not None:
        return
    try:
        import llama_cpp
    except ImportError:
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("this test loads a real model: mark it @pytest.mark.model")

    monkeypatch.setattr(llama_cpp.Llama, "__init__", refuse)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def store(workspace: Path) -> Iterator[SessionStore]:
    s = SessionStore(workspace)
    yield s
    s.close()


@pytest.fixture
async def session(store: SessionStore) -> AsyncIterator[Session]:
    s = store.new()
    yield s
    await s.aclose()


def pytest_unconfigure(config: pytest.Config) -> None:
    """llama_cpp opens two /dev/null handles at import and never closes them; close them so the
    interpreter exit does not print ResourceWarnings that look like test failures."""
    utils = sys.modules.get("llama_cpp._utils")
    for name in ("outnull_file", "errnull_file"):
        handle = getattr(utils, name, None)
        if handle is not None and not handle.closed:
            handle.close()
