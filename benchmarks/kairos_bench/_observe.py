"""Plugins the benches use to watch requests without wrapping the model (the ``on_request`` hook)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kairos.agent import Plugin, RunContext
from kairos.context.builder import TrajectoryView
from kairos.models.types import ModelRequest


class RequestLog(Plugin):
    """Keeps every request the agent sends while ``armed`` (and calls ``measure`` on each, if given)."""

    def __init__(self, measure: Callable[[ModelRequest], int] | None = None, *, armed: bool = True) -> None:
        self.armed = armed
        self.requests: list[ModelRequest] = []
        self.measure = measure
        self.measured: list[int] = []

    async def on_request(self, ctx: RunContext, request: ModelRequest) -> None:
        """Record the request (and its measurement) when armed."""
        if self.armed:
            self.requests.append(request)
            if self.measure is not None:
                self.measured.append(self.measure(request))

    @property
    def first(self) -> ModelRequest | None:
        """The first request recorded."""
        return self.requests[0] if self.requests else None


class ViewPlugin(Plugin):
    """A trajectory view as a plugin (for layouts a bench compares against kairos's own)."""

    def __init__(self, view: TrajectoryView) -> None:
        self.view = view

    def views(self) -> Sequence[TrajectoryView]:
        """The one view."""
        return (self.view,)
