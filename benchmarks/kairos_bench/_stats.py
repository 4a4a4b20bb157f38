"""Small statistics the benches share (no imports of the product: any bench may use them)."""

from __future__ import annotations


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
