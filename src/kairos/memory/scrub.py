"""The adapter to the PII scrubber (:mod:`kairos.memory.pii`), imported lazily.

No fallback: without that module there is no scrubber, and callers pass their own or None.
"""

from __future__ import annotations

import importlib
import logging

from kairos.memory.core import Scrubber
from kairos.models.base import Model

log = logging.getLogger("kairos.memory")


def pii_scrubber(model: Model | None) -> Scrubber | None:
    """``PiiScrubber(model).scrub`` from :mod:`kairos.memory.pii`, or None when that module is not installed."""
    try:
        module = importlib.import_module("kairos.memory.pii")
    except ModuleNotFoundError as e:
        if e.name != "kairos.memory.pii":
            raise
        log.warning("kairos.memory.pii is not available: memories are stored without PII scrubbing")
        return None
    scrub: Scrubber = module.PiiScrubber(model).scrub
    return scrub


__all__ = ["pii_scrubber"]
