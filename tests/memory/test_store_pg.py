"""With ``[storage] store = "postgresql://…"`` every workspace and command of a deployment shares one user memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kairos.app import open_user_memory
from kairos.cli import app
from kairos.config import load_config
from kairos.errors import StoreError
from kairos.knowledge import HashEmbedder
from kairos.memory.records import MemoryIn, MemoryStoreError
from kairos.memory.store_pg import PgMemoryStore

runner = CliRunner()


def _config(user_config_dir: Path, url: str) -> None:
    (user_config_dir / "config.toml").write_text(
        f'[storage]\nstore = "{url}"\n[memory]\nenabled = true\nuser = "alice"\n[knowledge]\nembedder = "hash"\n'
    )


def test_two_workspaces_share_memory_in_postgresql(tmp_path: Path, user_config_dir: Path, postgres_url: str) -> None:
    _config(user_config_dir, postgres_url)
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    emb = HashEmbedder()
    memory = open_user_memory(first, load_config(first), None, emb)
    try:
        assert isinstance(memory.store, PgMemoryStore)
        memory.store.add("alice", MemoryIn("semantic", "note", "fact", "alice plays the cello"), emb.embed_passages(
            ["alice plays the cello"])[0])  # fmt: skip
    finally:
        memory.close()
    shown = runner.invoke(app, ["memory", "show", "--json", "-w", str(second)])  # no knowledge.db there yet
    assert shown.exit_code == 0, shown.output
    assert [c["content"] for c in json.loads(shown.output)] == ["alice plays the cello"]
    user_config_dir.joinpath("config.toml").write_text('[memory]\nuser = "alice"\n[knowledge]\nembedder = "hash"\n')
    embedded = runner.invoke(app, ["memory", "show", "--json", "-w", str(second)])
    assert json.loads(embedded.output) == []  # the embedded default is the workspace's own knowledge.db


def test_another_embedder_is_refused(postgres_url: str) -> None:
    PgMemoryStore(postgres_url, 8, "hash").close()
    with pytest.raises(MemoryStoreError, match="same \\[knowledge\\] embedder"):
        PgMemoryStore(postgres_url, 8, "minilm")
    with pytest.raises(MemoryStoreError, match="8 dimensions"):
        PgMemoryStore(postgres_url, 16, "hash")


def test_an_unreachable_server_is_named_without_its_password() -> None:
    with pytest.raises(StoreError, match="the memory database at postgresql://kairos:\\*\\*\\*@127.0.0.1:1/") as info:
        PgMemoryStore("postgresql://kairos:hunter2@127.0.0.1:1/kairos", 8)
    assert "hunter2" not in str(info.value)
