"""Where kairos keeps things: per-workspace state, and per-user config that no workspace can write.

A workspace (a cloned repository, say) is untrusted input, so anything that grants trust, such as
approvals of third-party skills and the list of trusted workspaces, lives in the user's config
dir (``$KAIROS_CONFIG_DIR``, else the platform's, e.g. ``~/.config/kairos``), never inside a
workspace where a file tool or a repository could put it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from platformdirs import user_config_path

from kairos.errors import ConfigError

STATE_DIR_NAME = ".kairos"
STATE_GITIGNORE = "# created by kairos: its state (sessions, indexes, caches) is not part of the repository\n*\n"
"""The ``.gitignore`` kairos writes into a state dir, so ``git status`` does not list ``.kairos/``."""
USER_CONFIG_FILE = "config.toml"
"""The user's own settings file in :func:`user_config_dir` (optional; same keys as ``kairos.toml``)."""


def default_state_dir(workspace: Path) -> Path:
    """``$KAIROS_HOME`` if set, else ``<workspace>/.kairos``."""
    home = os.environ.get("KAIROS_HOME")
    return Path(home).expanduser() if home else workspace / STATE_DIR_NAME


def workspace_dir(path: Path) -> Path:
    """``path`` resolved, if it is an existing folder: kairos never creates a workspace.

    A mistyped ``--workspace`` must not leave an empty folder with a ``.kairos/`` in it behind.

    Raises:
        ConfigError: ``path`` does not exist or is not a folder; the message says what to do.
    """
    try:
        resolved = path.expanduser().resolve()
    except OSError as e:  # e.g. the current directory was deleted
        raise ConfigError(f"cannot use the workspace {path}: {e.strerror or e}") from e
    if resolved.is_dir():
        return resolved
    if resolved.exists():
        raise ConfigError(f"the workspace {resolved} is a file, not a folder: pass a folder with --workspace")
    raise ConfigError(f"the workspace {resolved} does not exist: create it first, or pass another --workspace")


def user_config_dir() -> Path:
    """The user's kairos config dir (``$KAIROS_CONFIG_DIR`` overrides it, e.g. for tests)."""
    override = os.environ.get("KAIROS_CONFIG_DIR")
    return Path(override).expanduser() if override else user_config_path("kairos", appauthor=False)


def user_config_file() -> Path:
    """``<user config dir>/config.toml``: settings of this user for every workspace."""
    return user_config_dir() / USER_CONFIG_FILE


def ensure_state_dir(path: Path) -> Path:
    """Create the state dir ``path`` (and its parents) if needed, and return it.

    Args:
        path: the state dir, e.g. ``default_state_dir(workspace)``.

    Returns:
        ``path``, which now exists and is a directory. A folder kairos creates, and any folder
        named ``.kairos``, gets a ``.gitignore`` (:data:`STATE_GITIGNORE`) if it has none.

    Raises:
        ConfigError: ``path`` or one of its parents is a file (or a broken link), or it cannot be
            created; the message says what to do.
    """
    if path.is_dir():
        if path.name == STATE_DIR_NAME:  # also one from before the .gitignore, or made by a plain mkdir
            _ignored_by_git(path)
        return path
    fix = "move or delete it, or set KAIROS_HOME to another folder for kairos' state"
    if path.is_symlink() and not path.exists():
        raise ConfigError(f"{path} is a broken link (to {os.readlink(path)}); kairos keeps its state there: {fix}")
    if path.exists():
        raise ConfigError(
            f"{path} is a file, not a folder; kairos keeps this workspace's sessions in a folder of that name: {fix}"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError as e:  # created as a file between the check and mkdir
        raise ConfigError(f"{path} exists but is not a folder: {fix}") from e
    except NotADirectoryError as e:
        parent = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
        raise ConfigError(f"cannot create {path}: {parent} is a file, not a folder; {fix}") from e
    except OSError as e:
        raise ConfigError(f"cannot create the state folder {path}: {e.strerror or e}; {fix}") from e
    _ignored_by_git(path)
    return path


def _ignored_by_git(folder: Path) -> None:
    """Write :data:`STATE_GITIGNORE` into ``folder`` unless it has a ``.gitignore`` (only ever kairos's own folders).

    Not into any existing folder: ``$KAIROS_HOME`` could name a repository's root, and ``*`` there
    would hide the whole repository from git.
    """
    marker = folder / ".gitignore"
    if marker.exists() or marker.is_symlink():
        return
    with contextlib.suppress(OSError):  # a read-only state folder still works, it only shows in git status
        marker.write_text(STATE_GITIGNORE, encoding="utf-8")


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step: a reader sees the old file or the new one, never half.

    The parent folder is created if needed; the file is private to the user (mode 0600).

    Raises:
        OSError: the folder or file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def is_inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or below it, compared as given (resolve both first)."""
    return path == folder or folder in path.parents
