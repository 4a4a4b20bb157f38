"""``[browser]``: the settings of computer use (a module of its own: the config loads it without Playwright)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class BrowserConfig(BaseModel):
    """``[browser]``: computer use through Chromium (issue 28)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    executable: str = "/usr/bin/chromium"
    """Debian's Chromium (``make browser-deps``); Playwright's own download is never used."""
    headless: bool = True
    mode: Literal["indexed", "raw_html"] = "indexed"
    """What the model reads: numbered elements (and acts by number), or the page's HTML (acts by CSS
    selector; the baseline ``kairos bench miniwob`` compares against)."""
    allow_hosts: tuple[str, ...] = ()
    """Hosts the browser may reach besides the start URL's (``*``: any; ``*.example.com``: its subdomains).
    Everything else is blocked, loopback included: a page must not reach the services on this machine."""
    confirm_irreversible: bool = True
    """Clicks that look irreversible (pay, order, delete, send…) go through ``confirm_click``, which asks the user."""
    screenshots: bool = True
    """Write the numbered screenshot after each look (for the web UI and models that see)."""
    vision: bool = False
    """For a model that sees (``[remote] vision``): the ``computer`` tool is offered too (screenshot, clicks and
    drags at pixel coordinates, typing, keys: :mod:`kairos.browser.computer`), and the numbered tools' results
    carry the numbered screenshot besides their text."""
    viewport: tuple[int, int] = (1280, 800)
    action_timeout_s: float = Field(5.0, gt=0, le=120)
    """How long an action waits for its element to be ready before it is reported as not done."""
    navigation_timeout_s: float = Field(20.0, gt=0, le=300)


__all__ = ["BrowserConfig"]
