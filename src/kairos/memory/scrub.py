"""The PII scrubber user memory applies before anything is stored (:mod:`kairos.memory.pii`)."""

from __future__ import annotations

from kairos.memory.core import Scrubber
from kairos.memory.pii import PiiScrubber
from kairos.models.base import Model


def pii_scrubber(model: Model | None) -> Scrubber:
    """The default policy's scrubber: regexes, then ``model`` (when given) for what they cannot see."""
    scrubber: Scrubber = PiiScrubber(model)
    return scrubber


__all__ = ["pii_scrubber"]
