"""Read and rename operations on a runtime's sessions that front ends need beside :class:`Runtime`'s own.

Kept apart from the runtime's event machinery: nothing here touches a running session's worker. The
server calls these instead of reaching into the stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kairos.errors import SessionNotFoundError

if TYPE_CHECKING:
    from kairos.runtime.runtime import Runtime

_COMPRESSION = "kairos.compression/"
_LAYERS = ("spill", "noise", "compressed", "round")


def rename_session(runtime: Runtime, session_id: str, title: str) -> None:
    """Give a session a new title.

    Raises:
        SessionNotFoundError: no such session.
    """
    if not runtime.store.trajectories.set_title(session_id, title):
        raise SessionNotFoundError(session_id)


def compression(runtime: Runtime, session_id: str) -> list[dict[str, Any]]:
    """What compression replaced in the session's view, each with the stored original (never changed).

    ``{"seq", "layer", "text", "original"}`` per replaced message, oldest first: ``spill`` (a long result
    moved to a file, a preview left), ``noise`` (a stale result shrunk to a pointer), ``compressed`` (a
    summary), and ``round`` entries (an archived round: ``seq`` is the round number, no single original).

    Raises:
        SessionNotFoundError: no such session.
    """
    if not runtime.has_session(session_id):
        raise SessionNotFoundError(session_id)
    frozen = runtime.store.trajectories.frozen_items(session_id, _COMPRESSION)
    messages = runtime.history(session_id) if frozen else []
    out: list[dict[str, Any]] = []
    for key, text in frozen.items():
        layer, _, number = key.removeprefix(_COMPRESSION).partition("/")
        if layer not in _LAYERS or not number.isdigit():
            continue
        seq = int(number)
        original = messages[seq].content if layer != "round" and seq < len(messages) else None
        out.append({"seq": seq, "layer": layer, "text": text, "original": original})
    out.sort(key=lambda r: (r["seq"], _LAYERS.index(r["layer"])))
    return out


__all__ = ["compression", "rename_session"]
