"""One agent session's browser: Debian's Chromium through Playwright, its own profile, only the allowed hosts.

- The profile (cookies, storage) lives in kairos's state, ``<state>/browser/<session>/profile``: never the
  user's own browser profile, and the same session finds its logins again after a restart.
- Downloads land in ``<workspace>/downloads``.
- Every request is checked against the network rule: loopback-free by default, the hosts the user named
  (``[browser] allow_hosts`` and the start URL they gave), ``*`` for any. A blocked request fails in the page
  and is reported to the model with what to do.
- Dialogs are answered at once (the page would hang otherwise): alerts accepted, confirm/prompt dismissed
  unless the next action was approved as irreversible; the next observation says what was asked.
- After every observation the numbered screenshot and the page record are written for the web UI
  (:mod:`.paths`).

Actions and their re-checks are in :mod:`.act`; this module owns the browser's life.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kairos.browser.config import BrowserConfig
from kairos.browser.page import BrowserError, Observation, observe, raw_html
from kairos.browser.paths import browser_dir, page_path, screen_path
from kairos.tools.base import Resource, ToolContext


@dataclass(slots=True)
class BrowserStats:
    """What the session did: the bench reads it."""

    actions: int = 0
    reverify_catches: int = 0
    """Actions whose expected effect did not happen (then retried another way, or reported)."""
    retries: int = 0
    blocked_requests: int = 0


class BrowserSession:
    """A Chromium for one session; started on first use, closed with the session.

    Args:
        config: ``[browser]``.
        workspace: where downloads land.
        state_dir: kairos's state (the profile, the screenshot).
        session_id: names the profile folder.
        start_url: a URL the user gave; its host is allowed.
    """

    def __init__(
        self,
        config: BrowserConfig,
        *,
        workspace: Path,
        state_dir: Path,
        session_id: str = "default",
        start_url: str = "",
    ) -> None:
        self.config = config
        self.workspace = workspace
        self.state_dir = state_dir
        self.session_id = session_id
        self.stats = BrowserStats()
        self.last: Observation | None = None
        hosts = set(config.allow_hosts)
        if start_url:
            hosts.add(host_of(start_url))
        self.allowed_hosts = frozenset(h.lower() for h in hosts if h)
        self.start_url = start_url
        self._pw: Any = None
        self._context: Any = None
        self._page: Any = None
        self._dialogs: list[str] = []
        self._accept_dialog = False
        self._blocked: list[str] = []
        self._lock = asyncio.Lock()

    # ---- life ---------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether Chromium is running for this session."""
        return self._context is not None

    @property
    def page(self) -> Any:
        """The Playwright page the agent acts on (the newest tab)."""
        if self._page is None:
            raise BrowserError("the browser is not started: open a page first (open_url)")
        return self._page

    async def start(self) -> None:
        """Launch Chromium with the session's profile (idempotent).

        Raises:
            BrowserError: Playwright or Chromium is missing, or Chromium does not start; says how to install.
        """
        if self._context is not None:
            return
        if not await asyncio.to_thread(Path(self.config.executable).exists):
            raise BrowserError(
                f"no browser at {self.config.executable}: install Debian's chromium (make browser-deps, or "
                "sudo apt-get install chromium) or set [browser] executable"
            )
        try:
            from playwright.async_api import async_playwright
        except ImportError as e:
            raise BrowserError("Playwright is not installed: pip install 'kairos[browser]'") from e
        folder = browser_dir(self.state_dir, self.session_id)
        folder.mkdir(parents=True, exist_ok=True)
        self._pw = await async_playwright().start()
        width, height = self.config.viewport
        try:
            self._context = await self._pw.chromium.launch_persistent_context(
                str(folder / "profile"),
                executable_path=self.config.executable,
                headless=self.config.headless,
                viewport={"width": width, "height": height},
                accept_downloads=True,
                args=_ARGS,
            )
        except Exception as e:
            await self._pw.stop()
            self._pw = None
            raise BrowserError(f"Chromium did not start: {str(e).splitlines()[0][:300]}") from e
        self._context.set_default_timeout(self.config.action_timeout_s * 1000)
        self._context.set_default_navigation_timeout(self.config.navigation_timeout_s * 1000)
        await self._context.route("**/*", self._route)
        self._context.on("page", self._adopt)
        pages = self._context.pages
        self._adopt(pages[0] if pages else await self._context.new_page())

    async def aclose(self) -> None:
        """Close Chromium (the profile stays for the next start)."""
        context, pw = self._context, self._pw
        self._context = self._pw = self._page = None
        if context is not None:
            try:
                await context.close()
            except Exception:
                pass
        if pw is not None:
            await pw.stop()

    close = aclose

    def _adopt(self, page: Any) -> None:
        """A new tab (a link with target=_blank, a popup) becomes the page the agent acts on."""
        self._page = page
        page.on("dialog", self._on_dialog)
        page.on("download", self._on_download)

    @asynccontextmanager
    async def turn(self, news: Callable[[], bool] | None = None) -> AsyncIterator[str]:
        """Hold the page for one action (the calls of one reply take turns); yields why it must not run, or "".

        A call that waited for another was planned on the page before that one acted: it does not run when
        ``news()`` says the user interrupted or wrote meanwhile, or when the other action opened a new document
        (its element numbers were from the old one).
        """
        queued = self._lock.locked()
        seen = self.last.document if self.last is not None else ""
        async with self._lock:
            await self.start()
            if queued and news is not None and news():
                yield "Not done: the user stopped the turn or wrote something new before this action; read it first."
            elif queued and self.last is not None and self.last.document != seen:
                yield (
                    "Not done: the previous action opened another page, so the numbers this call used are from "
                    "the old one. Read the new page above and act again."
                )
            else:
                yield ""

    # ---- the network rule, dialogs, downloads --------------------------------------------------

    def allows(self, url: str) -> bool:
        """Whether the browser may load ``url`` (data:, about: and blob: are always allowed)."""
        parts = urlsplit(url)
        if parts.scheme in ("data", "about", "blob"):
            return True
        if parts.scheme not in ("http", "https", "ws", "wss"):
            return False
        if "*" in self.allowed_hosts:
            return True
        host = (parts.hostname or "").lower()
        for allowed in self.allowed_hosts:
            if host == allowed or (allowed.startswith("*.") and host.endswith(allowed[1:])):
                return True
        return False

    async def _route(self, route: Any) -> None:
        url = route.request.url
        if self.allows(url):
            await route.continue_()
            return
        self.stats.blocked_requests += 1
        if len(self._blocked) < 20:
            self._blocked.append(url[:200])
        await route.abort("blockedbyclient")

    def blocked_note(self) -> str:
        """The requests blocked since the last call (and how to allow them), or ``""``."""
        if not self._blocked:
            return ""
        hosts = sorted({host_of(u) or u.split(":", 1)[0] for u in self._blocked})
        self._blocked.clear()
        return f"Blocked (not an allowed host): {', '.join(hosts)}. {ALLOW_HINT}"

    async def _on_dialog(self, dialog: Any) -> None:
        kind, message = dialog.type, re.sub(r"\s+", " ", dialog.message or "")[:300]
        accept = kind == "alert" or self._accept_dialog
        self._accept_dialog = False
        try:
            await (dialog.accept() if accept else dialog.dismiss())
        except Exception:
            pass
        answer = "accepted" if accept else "dismissed (if the user wants it: confirm_click on the same element)"
        self._dialogs.append(f'{kind} "{message}" — {answer}')

    def take_dialogs(self) -> str:
        """The dialogs answered and downloads saved since the last call, joined by "; " (``""``: none)."""
        out = "; ".join(self._dialogs)
        self._dialogs.clear()
        return out

    def accept_next_dialog(self) -> None:
        """The next confirm() is accepted (an approved irreversible click)."""
        self._accept_dialog = True

    async def _on_download(self, download: Any) -> None:
        folder = self.workspace / "downloads"
        folder.mkdir(exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9._ -]", "_", download.suggested_filename or "download").strip(" .") or "download"
        target = folder / name
        n = 1
        while target.exists():
            target = folder / f"{target.stem}-{n}{target.suffix}"
            n += 1
        try:
            await download.save_as(target)
            self._dialogs.append(f"downloaded {target.relative_to(self.workspace)}")
        except Exception as e:
            self._dialogs.append(f"a download failed: {str(e).splitlines()[0][:200]}")

    # ---- looking -------------------------------------------------------------------------------

    async def look(self, *, record: bool = True) -> Observation:
        """Number and read the page now.

        ``record``: a look the model is shown: it takes the dialogs and downloads to report, and writes the
        screenshot and page record for the web UI (a look before an action does neither).
        """
        await self.start()
        dialog = self.take_dialogs() if record else ""
        obs = await observe(self.page, dialog=dialog)
        if record and self.config.screenshots:
            await self._record(obs)
        return obs

    async def observe_text(self) -> str:
        """What the model is shown of the page now (the numbered list, or the HTML in ``raw_html`` mode)."""
        obs = await self.look()
        self.last = obs
        if self.config.mode == "raw_html":
            return await raw_html(self.page)
        return obs.render()

    async def _record(self, obs: Observation) -> None:
        """The numbered screenshot and ``page.json`` (best effort: a failure never stops the agent)."""
        shot, record = screen_path(self.state_dir, self.session_id), page_path(self.state_dir, self.session_id)
        boxes = [[e.index, *e.box] for e in obs.elements if e.in_view]
        try:
            await self.page.evaluate(_DRAW_MARKS, boxes)
            await self.page.screenshot(path=str(shot.with_suffix(".tmp.png")), timeout=5000)
            shot.with_suffix(".tmp.png").replace(shot)
        except Exception:
            pass
        finally:
            try:
                await self.page.evaluate(_REMOVE_MARKS)
            except Exception:
                pass
        data = {
            "url": obs.url,
            "title": obs.title,
            "at": time.time(),
            "elements": [{"index": e.index, "role": e.role, "name": e.name, "box": list(e.box)} for e in obs.elements],
        }
        tmp = record.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        tmp.replace(record)


ALLOW_HINT = "The user can allow a host with [browser] allow_hosts or --allow-host."
"""How a blocked host is allowed (said wherever the browser refuses one)."""
_ARGS = [
    "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync",
    "--disable-default-apps", "--metrics-recording-only", "--disable-dev-shm-usage",
]  # fmt: skip
"""Nothing of Chromium's own reaches the network (updates, sync, metrics)."""
_DRAW_MARKS = """(boxes) => {
  const layer = document.createElement('div');
  layer.id = '__kairos_marks';
  layer.style.cssText = 'position:fixed;inset:0;pointer-events:none;z-index:2147483647';
  const colours = ['#e6194b', '#3cb44b', '#4363d8', '#f58231', '#911eb4', '#008080', '#9a6324', '#800000'];
  for (const [i, x, y, w, h] of boxes) {
    const c = colours[i % colours.length];
    const box = document.createElement('div');
    box.style.cssText = `position:fixed;left:${x}px;top:${y}px;width:${w}px;height:${h}px;` +
      `outline:2px solid ${c};box-sizing:border-box`;
    const tag = document.createElement('div');
    tag.textContent = String(i);
    tag.style.cssText = `position:fixed;left:${Math.max(0, x - 2)}px;top:${Math.max(0, y - 14)}px;` +
      `background:${c};color:#fff;font:bold 11px/13px monospace;padding:0 3px;border-radius:2px`;
    layer.append(box, tag);
  }
  document.documentElement.append(layer);
}"""
_REMOVE_MARKS = "() => document.getElementById('__kairos_marks')?.remove()"


def host_of(url: str) -> str:
    """The host of ``url`` in lower case (a bare ``example.com/x`` too), or ``""``."""
    return (urlsplit(url if "//" in url else "//" + url).hostname or "").lower()


SESSION_RESOURCE: Resource[BrowserSession] = Resource("kairos.browser")
"""The agent session's browser (closed with the session's tool context)."""
Provider = Callable[[ToolContext], BrowserSession]
"""How a browser tool finds the browser of the session it is called in."""


def session_provider(source: BrowserSession | BrowserConfig | Provider, start_url: str = "") -> Provider:
    """``source`` itself (a session, or a provider), or a browser per agent session made from a config.

    ``start_url``: a URL the user gave (its host is allowed).
    """
    if isinstance(source, BrowserSession):
        bound = source
        return lambda ctx: bound
    if not isinstance(source, BrowserConfig):
        return source
    config = source

    def provide(ctx: ToolContext) -> BrowserSession:
        return ctx.get_or_put(
            SESSION_RESOURCE,
            lambda: BrowserSession(
                config,
                workspace=ctx.workspace,
                state_dir=ctx.home or ctx.workspace,
                session_id=ctx.session_id or "default",
                start_url=start_url,
            ),
        )

    return provide


__all__ = [
    "ALLOW_HINT",
    "SESSION_RESOURCE",
    "BrowserConfig",
    "BrowserSession",
    "BrowserStats",
    "Provider",
    "host_of",
    "session_provider",
]
