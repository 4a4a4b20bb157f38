"""``[discovery]`` in kairos.toml: the ``discover_tools`` plugin over the bundled tool catalog."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kairos.tools.discovery.index import DEFAULT_MIN_GAP, DEFAULT_MIN_SIMILARITY


class DiscoveryConfig(BaseModel):
    """Tool discovery (book ch4 §3.29): off by default; the catalog's tools are demo backends."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    limit: int = Field(5, ge=3, le=5, description="candidates per discover_tools call")
    top_servers: int = Field(4, ge=1, le=15, description="servers (domains) searched in the second stage")
    min_similarity: float = Field(DEFAULT_MIN_SIMILARITY, ge=0, le=1, description="found at this cosine or above")
    min_gap: float = Field(DEFAULT_MIN_GAP, ge=0, le=1, description="or this far above the median cosine")
    call_after_found: bool = Field(
        True,
        description="after a search that found tools, the next reply must call one of them (or search again); "
        "measured: without it the 1.5B model answered in text after the search",
    )
