"""Robust statistics shared by the single-trace and fleet analyses."""

from __future__ import annotations

import statistics
from typing import Sequence

#: Modified z-score above which a core or host is a straggler.
STRAGGLER_Z = 3.5
#: Scale floor, as a share of the median step time: near-identical cores or
#: hosts must not turn noise into stragglers.
STRAGGLER_MIN_REL_SCALE = 0.005
#: Fewest members a straggler test needs.
STRAGGLER_MIN_MEMBERS = 3


def modified_z(values: Sequence[float], floor: float = 0.0) -> list[float]:
    """0.6745 (x - median) / max(MAD, floor)."""
    values = [float(v) for v in values]
    if not values:
        return []
    med = statistics.median(values)
    mad = statistics.median([abs(v - med) for v in values])
    scale = max(mad, floor)
    if scale <= 0:
        return [0.0] * len(values)
    return [0.6745 * (v - med) / scale for v in values]
