"""Starting ``kairos``: each command loads only what it uses, and Ctrl-C at any moment exits 130 quietly.

Issue 24 §5: every command imported the HTTP server, so ``kairos --help`` took seconds and a
Ctrl-C in its first second printed a KeyboardInterrupt traceback from inside FastAPI. These tests
run the real entry point (``kairos.__main__:main``) in a subprocess. Which modules a command
loaded is read from ``sys.modules`` at exit (no timing); a Ctrl-C at a chosen moment is made
deterministic by sending SIGINT from an import hook when the process starts importing a given module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kairos_cli import WAIT_S, kairos_env

HEAVY = ("fastapi", "uvicorn", "mcp", "numpy", "usearch", "tantivy", "llama_cpp", "openai", "httpx",
         "kairos.agent.agent", "kairos.server.app", "kairos.knowledge.base", "kairos.config")  # fmt: skip
"""What no command that does not use it may load: the server, MCP, the knowledge stack, the models, the agent."""

_REPORT_MODULES = """
import atexit, json, os, sys
atexit.register(lambda: open(os.environ["MODULES_OUT"], "w").write(json.dumps(sorted(sys.modules))))
from kairos.__main__ import main
main()
"""

_INTERRUPT_AT = """
import os, signal, sys

class CtrlC:
    '''Presses Ctrl-C (SIGINT to this process) the moment the module named in argv[1] starts to import.'''

    def __init__(self, module):
        self.module = module

    def find_spec(self, name, path=None, target=None):
        if name == self.module:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC(sys.argv.pop(1)))
from kairos.__main__ import main
main()
"""


def _run(code: str, *args: str, cwd: Path, config_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=kairos_env(config_dir, **env),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "allowed", "code"),
    [
        (["--help"], (), 0),
        (["kb", "--help"], (), 0),
        (["memory", "--help"], (), 0),
        (["mcp", "--help"], (), 0),
        (["serve", "--help"], (), 0),
        (["sessions"], ("kairos.config", "kairos.agent.agent", "httpx"), 0),  # [storage] says where they are
        (["config"], ("kairos.config", "kairos.agent.agent", "httpx"), 0),  # the settings' types come with them
        # a mistyped workspace is refused before anything loads (it took 8.4 s)
        (["run", "-w", "/nonexistent/ws", "hi"], (), 1),
        (["serve", "-w", "/nonexistent/ws"], (), 1),
        (["kb", "stats", "-w", "/nonexistent/ws"], (), 1),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_a_command_loads_only_what_it_uses(
    args: list[str], allowed: tuple[str, ...], code: int, workspace: Path, user_config_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "modules.json"
    done = _run(_REPORT_MODULES, *args, cwd=workspace, config_dir=user_config_dir, MODULES_OUT=str(out))
    assert done.returncode == code, done.stderr
    loaded = set(json.loads(out.read_text()))
    assert not {m for m in HEAVY if m in loaded and m not in allowed}, f"kairos {' '.join(args)} loaded them"


@pytest.mark.parametrize(
    ("args", "module"),
    [
        (["--help"], "typer"),  # the first thing the command line imports
        (["--help"], "rich.console"),
        (["sessions"], "kairos.context.session"),
        (["sessions"], "sqlite3"),
        (["config"], "pydantic"),
        (["kb", "stats", "--embedder", "hash"], "numpy"),
        (["serve", "--model", "openai:x", "--base-url", "http://127.0.0.1:9/v1"], "fastapi"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else f"at {v}",
)
def test_ctrl_c_while_loading_exits_130_without_a_traceback(
    args: list[str], module: str, workspace: Path, user_config_dir: Path
) -> None:
    done = _run(_INTERRUPT_AT, module, *args, cwd=workspace, config_dir=user_config_dir)
    assert done.returncode == 130, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
    assert "Aborted" not in done.stderr and not done.stdout.strip()
