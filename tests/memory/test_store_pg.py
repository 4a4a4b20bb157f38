"""With ``[storage] store = "postgresql://…"`` every workspace and command of a deployment shares one user memory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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


def test_an_ingest_in_progress_is_held_by_its_process_until_it_ends_or_dies(postgres_url: str) -> None:
    a, b = PgMemoryStore(postgres_url, 8), PgMemoryStore(postgres_url, 8)
    try:
        a.expect_ingest("alice", "s1", "d1", 2, 1.0)
        assert a.begin_ingest("alice", "s1", "d1") == 0
        assert a.begin_ingest("alice", "s1", "d1") == 0  # the holder resumes its own attempt
        with pytest.raises(MemoryStoreError, match="being saved by another process"):
            b.begin_ingest("alice", "s1", "d1")  # it would undo a's rows while a writes them
        b.expect_ingest("alice", "s2", "d2", 2, 1.0)
        b.begin_ingest("alice", "s2", "d2")  # another session is free
        a.end_ingest("alice", "s1", "d1")
        assert b.expect_ingest("alice", "s1", "d1", 2, 1.0) is False
        code = (
            "import sys, time\nfrom kairos.memory.store_pg import PgMemoryStore\n"
            f"s = PgMemoryStore({postgres_url!r}, 8)\ns.begin_ingest('alice', 's3', 'd3')\n"
            "print('held', flush=True)\ntime.sleep(60)\n"
        )
        a.expect_ingest("alice", "s3", "d3", 2, 1.0)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "held"
            with pytest.raises(MemoryStoreError):
                a.begin_ingest("alice", "s3", "d3")
            os.kill(child.pid, signal.SIGKILL)
            child.wait(15)
            deadline = time.monotonic() + 15
            while True:  # the server drops a dead holder's lock when the kernel closes its connection
                try:
                    a.begin_ingest("alice", "s3", "d3")
                    break
                except MemoryStoreError:
                    assert time.monotonic() < deadline, "the dead holder's ingest was never given up"
                    time.sleep(0.05)
        finally:
            child.kill()
            child.wait(15)
            if child.stdout is not None:
                child.stdout.close()
    finally:
        a.close()
        b.close()
