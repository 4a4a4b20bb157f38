"""Layer 3: provider-side context editing (e.g. Anthropic's ``clear_tool_uses``), near overflow only.

The provider drops old tool results server-side while the local trajectory stays unchanged,
so there is nothing to implement locally, but it still invalidates the provider's cache after
the first cleared result. It is therefore only tried from the builder's overflow hook: when a
request would not fit even after local compression, a cache rebuild is due anyway.

The contract has two sides:

- a backend that can do it implements :class:`ContextEditingBackend`: given a request and a
  :class:`ClearToolUses` edit, it returns a request it will send with the edit attached, and
  its ``count_tokens`` on that request must estimate the prompt *after* the edit (the builder
  checks the budget with it). No bundled backend advertises this yet.
- the harness side is a :class:`ContextEditor`; :class:`ProviderContextEditing`, the default,
  asks the backend if it advertises support and does nothing otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kairos.context.session import SessionView
from kairos.models.base import Model
from kairos.models.types import ModelRequest


@dataclass(frozen=True, slots=True)
class ClearToolUses:
    """Clear old tool results on the provider side (mirrors Anthropic's ``clear_tool_uses`` edit)."""

    keep_last: int = 3
    """The most recent tool results the provider keeps."""
    exclude_tools: tuple[str, ...] = ()
    """Tools whose results are never cleared."""
    clear_at_least_tokens: int = 0
    """Skip the edit unless it frees at least this many tokens (it breaks the cache anyway)."""


@runtime_checkable
class ContextEditingBackend(Protocol):
    """A model backend that can apply a provider-side edit to one request."""

    def with_context_edit(self, request: ModelRequest, edit: ClearToolUses) -> ModelRequest | None:
        """The request to send with ``edit`` attached, or None when this request cannot use it."""
        ...


class ContextEditor(Protocol):
    """Harness side of layer 3: called only when a request is over the window."""

    async def edit(
        self, model: Model, session: SessionView, request: ModelRequest, tokens: int, limit: int
    ) -> ModelRequest | None:
        """A request that fits, or None when this editor cannot help.

        Args:
            model: the model the request is for.
            session: the session being run.
            request: the request that is over the window.
            tokens: its prompt tokens.
            limit: the most prompt tokens the window allows.
        """
        ...


class ProviderContextEditing:
    """The default editor: uses the backend's context editing if it advertises it, else nothing."""

    def __init__(self, edit: ClearToolUses | None = None) -> None:
        self.clear = edit or ClearToolUses()

    async def edit(
        self, model: Model, session: SessionView, request: ModelRequest, tokens: int, limit: int
    ) -> ModelRequest | None:
        """The backend's request with tool uses cleared, or None if the backend cannot do it."""
        if not isinstance(model, ContextEditingBackend):
            return None
        return model.with_context_edit(request, self.clear)
