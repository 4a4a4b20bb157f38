"""The PII scrubber user memory applies before anything is stored (:mod:`kairos.memory.pii`)."""

from __future__ import annotations

from kairos.memory.core import Scrubber
from kairos.memory.pii import PiiScrubber
from kairos.models.base import Model


def pii_scrubber(model: Model | None, timeout_s: float = 30.0) -> Scrubber:
    """The default policy's scrubber: regexes, then ``model`` (when given) for what they cannot see.

    ``timeout_s``: the model's budget per session; 0: regexes only.
    """
    scrubber: Scrubber = PiiScrubber(model if timeout_s > 0 else None, timeout_s=timeout_s)
    return scrubber


__all__ = ["pii_scrubber"]
