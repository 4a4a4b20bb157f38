"""A damaged database: every command that opens it says which file and what to do, exit 1, no traceback.

Issue 24 §5: a corrupt ``.kairos/knowledge.db`` gave a full traceback on ``kb search``, ``kb stats``
and ``kb add``; damage often shows only when a query reaches a broken page, long after the file
opened. Each database kairos keeps in a workspace (sessions, runtime, knowledge base and memory,
the knowledge base's model cache) is damaged in each way a disk or a person damages files, and
every command that opens it is run: the error is one line naming the file (with the ``mv`` that
moves it away), the exit code 1, and the file is neither replaced nor removed. A zero-byte file is
an empty database, which works.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kairos.models
from kairos.cli import app
from kairos.context.session import SessionStore
from kairos.knowledge.base import KnowledgeBase
from kairos.knowledge.contextual import ContextCache
from kairos.retrieval.embeddings import make_embedder
from kairos.runtime.bus import SqliteBus
from kairos.runtime.db import RuntimeDB
from kairos.testing import ScriptedModel, reply
from tests.support.kairos_cli import WAIT_S, kairos_argv, kairos_env

runner = CliRunner()


def _garbage(path: Path) -> None:
    path.write_bytes(random.Random(1).randbytes(20_000))


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _tail_overwritten(path: Path) -> None:
    """The last third of the pages overwritten: the header and schema read fine, a query reaches the damage."""
    data = path.read_bytes()
    keep = len(data) * 2 // 3 // 4096 * 4096
    path.write_bytes(data[:keep] + random.Random(2).randbytes(len(data) - keep))


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _zero_bytes(path: Path) -> None:
    path.write_bytes(b"")


DAMAGE: dict[str, Callable[[Path], None]] = {
    "garbage": _garbage,
    "truncated": _truncated,
    "tail overwritten": _tail_overwritten,
    "a folder": _folder,
    "zero bytes": _zero_bytes,
}

KB = ["--embedder", "hash"]
COMMANDS: dict[str, list[str]] = {
    "sessions": ["sessions"],
    "run": ["run", "hello"],
    "chat": ["chat"],
    "kb search": ["kb", "search", "otters", *KB],
    "kb stats": ["kb", "stats", *KB],
    "kb add": ["kb", "add", "doc.md", *KB],
    "kb remove": ["kb", "remove", "note1.md", *KB],
    "kb add --tree": ["kb", "add", "doc.md", "--tree", "--model", "scripted", *KB],
    "memory show": ["memory", "show"],
    "memory search": ["memory", "search", "otters"],
    "memory forget --all": ["memory", "forget", "--all"],
    "memory export": ["memory", "export"],
}
OPENED_BY = {
    "kairos.db": ["sessions", "run", "chat"],
    "runtime.db": ["chat"],
    "knowledge.db": ["run", "chat", "kb search", "kb stats", "kb add", "kb remove", "memory show", "memory search",
                     "memory forget --all", "memory export"],
    "knowledge-cache.db": ["kb add --tree"],
}  # fmt: skip
"""Which commands open each database (run and chat open the knowledge base when it has documents)."""


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with every database: sessions, runtime, a knowledge base of 40 notes, memory, the model cache."""
    ws = tmp_path_factory.mktemp("healthy")
    state = ws / ".kairos"
    (ws / "doc.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n")
    store = SessionStore(ws)
    asyncio.run(store.new("first").aclose())
    store.close()
    runtime_db = RuntimeDB(state / "runtime.db")
    bus = SqliteBus(runtime_db)  # the published event stream: many pages of it
    for i in range(300):
        bus.publish("s", "turn.text", {"text": f"event {i} " * 20})
    runtime_db.close()
    kb = KnowledgeBase.open(state, make_embedder("hash"))
    for i in range(40):
        kb.add_text(f"note{i}.md", f"# Note {i}\n\n" + f"Otters {i} swim in rivers and eat fish. " * 200)
    kb.close()
    from kairos.memory import UserMemory

    UserMemory.open(state, make_embedder("hash"), None).close()
    cache = ContextCache(state / "knowledge-cache.db")
    cache.put("m", "d", "c", "a context")
    cache.close()
    return ws


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch, user_config_dir: Path) -> None:
    """A scripted model for run, chat and kb --tree; the hash embedder for the knowledge base and memory."""
    model = ScriptedModel([reply("fine")] * 20)
    monkeypatch.setattr(kairos.models, "load_model", lambda spec, config=None, **kw: model)
    (user_config_dir / "config.toml").write_text('[memory]\nenabled = true\n[knowledge]\nembedder = "hash"\n')


CASES = [(db, how, command) for db, commands in OPENED_BY.items() for how in DAMAGE for command in commands]


@pytest.mark.usefixtures("scripted")
@pytest.mark.parametrize(("db", "how", "command"), CASES, ids=[" - ".join(c) for c in CASES])
def test_a_damaged_database_is_one_clear_line(healthy: Path, tmp_path: Path, db: str, how: str, command: str) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(healthy, ws)
    path = ws / ".kairos" / db
    DAMAGE[how](path)
    was_file = path.is_file()
    args = [str(ws / a) if a == "doc.md" else a for a in COMMANDS[command]]
    result = runner.invoke(app, [*args, "-w", str(ws)], input="")
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.output
    if how == "zero bytes":  # an empty database: it works (kb remove of a note it no longer has says so)
        assert result.exit_code == (1 if command == "kb remove" else 0), result.output
        return
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    if how == "tail overwritten" and result.exit_code == 0:
        assert db != "knowledge.db", "every command of the knowledge base reads the damaged pages"
        return  # this command did not reach the damaged pages
    assert result.exit_code == 1, result.output
    assert len(errors) == 1 and str(path) in errors[0], result.stderr
    assert f"mv {path} {path}.broken" in errors[0]
    assert path.is_file() == was_file and path.exists(), "the damaged file is the user's: never replaced or removed"


@pytest.mark.parametrize(
    "args",
    [
        ["kb", "search", "otters", *KB],
        ["serve", "--port", "0", "--model", "openai:x", "--base-url", "http://127.0.0.1:9"],
    ],
    ids=["kb search", "serve"],
)
def test_the_kairos_command_prints_no_traceback(healthy: Path, tmp_path: Path, user_config_dir: Path,
                                                args: list[str]) -> None:  # fmt: skip
    """The real entry point in a subprocess (serve starts its runtime, which reads the sessions, before it binds)."""
    ws = tmp_path / "ws"
    shutil.copytree(healthy, ws)
    (user_config_dir / "config.toml").write_text('[knowledge]\nembedder = "hash"\n')
    damaged = ws / ".kairos" / ("knowledge.db" if args[0] == "kb" else "kairos.db")
    _tail_overwritten(damaged)
    done = subprocess.run(
        [*kairos_argv(*args)], cwd=ws, env=kairos_env(user_config_dir), capture_output=True, text=True,
        timeout=WAIT_S, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(damaged) in errors[0] and errors[0].endswith("or restore it from a backup")


@pytest.mark.usefixtures("scripted")
@pytest.mark.parametrize(("command", "code"), [("run", 1), ("chat", 0)])  # the chat says so and goes on
def test_a_file_where_the_session_locks_belong_is_one_clear_line(
    healthy: Path, tmp_path: Path, command: str, code: int
) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(healthy, ws)
    locks = ws / ".kairos" / "locks"
    shutil.rmtree(locks, ignore_errors=True)
    locks.write_text("not a folder")
    result = runner.invoke(app, [*COMMANDS[command], "-w", str(ws)], input="hello\n")
    assert isinstance(result.exception, SystemExit | None), result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.exit_code == code and len(errors) == 1 and f"mv {locks} {locks}.broken" in errors[0], result.output
