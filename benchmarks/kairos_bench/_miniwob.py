"""MiniWoB++ as ``kairos bench miniwob`` serves and scores it: the wheel's HTML, a loopback server, episodes.

The task pages come from the ``miniwob==1.1.0`` wheel, installed data-only (``pip install
--no-deps miniwob==1.1.0``: its Python side wants gymnasium and Selenium, which are not needed
here). The folder is found without importing the package. A stdlib HTTP server serves it on
127.0.0.1 (port chosen by the OS) from a daemon thread.

An episode follows the wheel's own protocol (``miniwob/selenium_instance.py``), driven with
Playwright's async API on a page the caller owns: load the task, ``Math.seedrandom(seed)``, raise
``core.EPISODE_MAX_TIME`` (10 s by default: far too short for a 1.5B model on two cores), call
``core.startEpisodeReal()``, wait for ``WOB_TASK_READY`` and read ``core.getUtterance()``. The
reward is read from ``WOB_DONE_GLOBAL`` / ``WOB_RAW_REWARD_GLOBAL`` / ``WOB_REWARD_REASON``;
success is a raw reward above 0.

Two changes to the page, the same for every agent and observation: the first ``core.endEpisode``
is kept (``core.startEpisodeReal`` is disarmed once the episode runs: the "START" cover still comes
back at the end, but a click on it cannot start a second episode that would overwrite the reward), and the
reward display beside the task (last reward, 10-episode average, time left, episodes done) and the
click-visualising canvas are moved from the body into the head (not rendered, not in the body's HTML,
still found by core.js): they are the harness's read-out, not part of the task.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import threading
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

CHROMIUM = Path("/usr/bin/chromium")
"""Debian's Chromium: Playwright launches it (``executable_path``); ``playwright install`` is never run."""

EPISODE_MAX_TIME_MS = 3_600_000
"""An hour per episode: the task's own timeout must not be what fails a slow local model."""

TASKS: tuple[str, ...] = (
    "click-button",
    "click-button-sequence",
    "click-checkboxes",
    "click-checkboxes-soft",
    "click-collapsible",
    "click-collapsible-2",
    "click-dialog",
    "click-dialog-2",
    "click-link",
    "click-option",
    "click-tab",
    "click-tab-2",
    "click-test",
    "click-test-2",
    "click-widget",
    "enter-password",
    "enter-text",
    "enter-text-2",
    "enter-text-dynamic",
    "focus-text",
    "focus-text-2",
    "login-user",
    "login-user-popup",
    "navigate-tree",
    "choose-list",
    "use-autocomplete",
    "search-engine",
    "email-inbox-forward-nl",
    "multi-layouts",
    "simple-arithmetic",
)
"""Task types solved by DOM actions alone (click, type, select, check, key): no canvas, drag or pixels.

Order matters: ``--limit N`` runs the first N, so the easiest single-action tasks come first."""


def html_root() -> Path:
    """The wheel's ``html`` folder (``miniwob/<task>.html``, ``core/``, ``common/``), found without importing it.

    Raises:
        FileNotFoundError: the wheel is not installed.
    """
    spec = importlib.util.find_spec("miniwob")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations or not (Path(locations[0]) / "html" / "miniwob").is_dir():
        raise FileNotFoundError("the MiniWoB++ pages are missing: pip install --no-deps miniwob==1.1.0 (make setup)")
    return Path(locations[0]) / "html"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class MiniWoBServer:
    """The task pages on ``http://127.0.0.1:<port>/``, served from a daemon thread while the context is open."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or html_root()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        handler = functools.partial(_Quiet, directory=str(self.root))
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="miniwob-http", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the MiniWoB server is not running (use it as a context manager)")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/"

    def url(self, task: str) -> str:
        """The page of ``task`` (``click-button`` ...).

        Raises:
            FileNotFoundError: the wheel has no such task.
        """
        if not (self.root / "miniwob" / f"{task}.html").is_file():
            raise FileNotFoundError(f"MiniWoB++ has no task {task!r}")
        return f"{self.base_url}miniwob/{task}.html"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an episode ended so far: ``done`` once the task judged it; ``raw_reward`` in [-1, 1]."""

    done: bool
    reward: float
    raw_reward: float
    reason: str | None

    @property
    def success(self) -> bool:
        return self.done and self.raw_reward > 0

    def to_record(self) -> dict[str, Any]:
        return {"done": self.done, "reward": self.raw_reward, "reason": self.reason}


_ARM = """(maxTime) => {
  core.EPISODE_MAX_TIME = maxTime;
  // out of the body, still in the document: core.js keeps updating them, nothing renders or reads them
  for (const id of ['reward-display', 'click-canvas']) {
    const el = document.getElementById(id);
    if (el) document.head.appendChild(el);
  }
}"""

_START = """() => {
  core.startEpisodeReal();
  // the START cover comes back at the end (a visible change, as in MiniWoB) but no longer starts an episode
  core.startEpisodeReal = function () {};
}"""

_OUTCOME = """() => ({
  done: !!WOB_DONE_GLOBAL,
  reward: Number(WOB_REWARD_GLOBAL),
  raw: Number(WOB_RAW_REWARD_GLOBAL),
  reason: WOB_REWARD_REASON === null || WOB_REWARD_REASON === undefined ? null : String(WOB_REWARD_REASON),
})"""


async def start_episode(page: Any, url: str, seed: int | str, *, timeout_s: float = 30.0) -> str:
    """Load ``url`` on the Playwright ``page``, start a seeded episode and return its utterance (the instruction).

    Raises:
        TimeoutError: the task did not load or did not become ready within ``timeout_s``.
    """
    async with asyncio.timeout(timeout_s):
        await page.goto(url, wait_until="load")
        await page.wait_for_function("() => typeof core !== 'undefined' && core.cover_div !== null")
        await page.evaluate(_ARM, EPISODE_MAX_TIME_MS)
        await page.evaluate(f"Math.seedrandom({json.dumps(seed)})")
        await page.evaluate(_START)
        await page.wait_for_function("() => WOB_TASK_READY === true")
        response = await page.evaluate("() => core.getUtterance()")
    if isinstance(response, dict):
        return str(response.get("utterance", ""))
    return str(response)


async def outcome(page: Any) -> Outcome:
    """The episode's state now (``done`` False while the task has not judged it)."""
    got = await page.evaluate(_OUTCOME)
    return Outcome(bool(got["done"]), float(got["reward"]), float(got["raw"]), got["reason"])


__all__ = [
    "CHROMIUM",
    "EPISODE_MAX_TIME_MS",
    "TASKS",
    "MiniWoBServer",
    "Outcome",
    "html_root",
    "outcome",
    "start_episode",
]
