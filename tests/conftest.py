"""Shared fixtures. Real-model calls are refused unless a test is marked ``model``."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kairos.context.session import Session, SessionStore
from kairos.models.local import LocalModel
from kairos.testing import ScriptedModel
from tests.support.servers import (  # noqa: F401  (pytest fixtures: real PostgreSQL and NATS on loopback)
    nats_server_fixture,
    nats_stream_fixture,
    nats_url_fixture,
    postgres_server_fixture,
    postgres_url_fixture,
)


@pytest.fixture(autouse=True, scope="session")
def _own_prefix_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests keep their KV states in a folder of their own (shared by the run's model tests): a test
    run must not push the user's prewarmed states out of the size-bounded cache in ~/.cache/kairos."""
    before = os.environ.get("KAIROS_PREFIX_CACHE_DIR")
    os.environ["KAIROS_PREFIX_CACHE_DIR"] = str(tmp_path_factory.mktemp("prefix-states"))
    yield
    if before is None:
        os.environ.pop("KAIROS_PREFIX_CACHE_DIR", None)
    else:
        os.environ["KAIROS_PREFIX_CACHE_DIR"] = before


@pytest.fixture(autouse=True)
def _isolated_user_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets an empty user config dir: no test may read or write the real one (trust,
    approvals, config.toml), and settings from the developer's environment must not leak in."""
    config_dir = tmp_path_factory.mktemp("user-config")
    monkeypatch.setenv("KAIROS_CONFIG_DIR", str(config_dir))
    for var in ("KAIROS_MODEL", "KAIROS_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    return config_dir


@pytest.fixture(autouse=True)
def _wide_cli_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's consoles wrap at 80 columns under CliRunner (no terminal), so a message holding a
    tmp path broke at a place that depends on the path's length: a test's substring check passed
    or failed with the number of pytest's tmp dir. Wide consoles never wrap a message."""
    import kairos.cli
    import kairos.cli.skills

    for module in (kairos.cli, kairos.cli.skills):
        for console in (module.console, module.err_console):
            monkeypatch.setattr(console, "_width", 10_000)


@pytest.fixture
def user_config_dir(_isolated_user_config: Path) -> Path:
    """The test's user config dir (where trust, approvals and config.toml live)."""
    return _isolated_user_config


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


@pytest.fixture(scope="module")
def bundled_model() -> Iterator[LocalModel]:
    """The bundled model, loaded once per module of ``model`` tests (loading it costs seconds)."""
    model = LocalModel("local", n_ctx=8192)
    model.load()
    yield model
    model.close()


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


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> ScriptedModel:
    """A scripted model that every ``load_model`` call returns (the command line's tests)."""
    import kairos.models

    model = ScriptedModel()
    monkeypatch.setattr(kairos.models, "load_model", lambda spec, config=None, **kw: model)
    return model
