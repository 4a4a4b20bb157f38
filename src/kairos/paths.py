"""Where kairos keeps things: per-workspace state, and per-user config that no workspace can write.

A workspace (a cloned repository, say) is untrusted input, so anything that grants trust, such as
approvals of third-party skills and the list of trusted workspaces, lives in the user's config
dir (``$KAIROS_CONFIG_DIR``, else the platform's, e.g. ``~/.config/kairos``), never inside a
workspace where a file tool or a repository could put it.
"""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_config_path

STATE_DIR_NAME = ".kairos"


def default_state_dir(workspace: Path) -> Path:
    """``$KAIROS_HOME`` if set, else ``<workspace>/.kairos``."""
    home = os.environ.get("KAIROS_HOME")
    return Path(home).expanduser() if home else workspace / STATE_DIR_NAME


def user_config_dir() -> Path:
    """The user's kairos config dir (``$KAIROS_CONFIG_DIR`` overrides it, e.g. for tests)."""
    override = os.environ.get("KAIROS_CONFIG_DIR")
    return Path(override).expanduser() if override else user_config_path("kairos", appauthor=False)
