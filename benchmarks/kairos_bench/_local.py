"""The model a bench runs on: a bundled model loaded once per bench, or a model passed in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

from kairos.models.base import Model


@contextmanager
def bench_model(model: str | Model, n_ctx: int, console: Console) -> Iterator[Model]:
    """Load ``model`` by name (with a spinner) and close it afterwards; a ``Model`` is used as is."""
    if not isinstance(model, str):
        yield model
        return
    from kairos.models.local import LocalModel

    owned = LocalModel(model, n_ctx=n_ctx)
    with console.status(f"loading {model} ..."):
        owned.load()
    try:
        yield owned
    finally:
        owned.close()


def model_name(model: str | Model) -> str:
    return model if isinstance(model, str) else getattr(model, "name", "custom")
