"""Robust statistics shared by the single-trace and fleet analyses."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: Modified z-score above which a core or host is a straggler.
STRAGGLER_Z = 3.5
#: Scale floor, as a share of the median step time: near-identical cores or
#: hosts must not turn noise into stragglers.
STRAGGLER_MIN_REL_SCALE = 0.005
#: Fewest members a straggler test needs.
STRAGGLER_MIN_MEMBERS = 3
#: A change between two runs is significant when |delta| > NOISE_K sigma ...
NOISE_K = 3.0
#: ... and more than this fraction of the base step time (profanalyzer.compare.comparison).
MIN_EFFECT = 0.005
#: A pulled lever that delivered less than this share of its prediction is
#: called out (profanalyzer.findings.verify).
SHORTFALL_RATIO = 0.5


def modified_z(values: Sequence[float], floor: float = 0.0) -> list[float]:
    """0.6745 (x - median) / max(MAD, floor)."""
    values = [float(v) for v in values]
    if not values:
        return []
    med = median_of(values)
    mad = median_of([abs(v - med) for v in values])
    scale = max(mad, floor)
    if scale <= 0:
        return [0.0] * len(values)
    return [0.6745 * (v - med) / scale for v in values]


def median_of(values: Sequence[float]) -> float:
    """statistics.median of a non-empty sequence (the middle value, or the
    mean of the two middle ones), without importing `statistics` (which
    imports decimal, fractions and random: 5 ms of start-up)."""
    data = sorted(values)
    n = len(data)
    if n == 0:
        raise ValueError("no median for empty data")
    i = n // 2
    return data[i] if n % 2 else (data[i - 1] + data[i]) / 2


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """float(np.percentile(values, q)) of a non-empty 1-d real sequence without NaN (the linear method,
    numpy's arithmetic step for step, in the values' own dtype), without the numpy.ma import that
    np.percentile makes through np.unique (numpy 2.4)."""
    a = np.sort(np.asarray(values).ravel())
    n = len(a)
    if n == 0:
        raise ValueError("no percentile of empty data")
    f = q / 100.0
    virtual = (n - 1) * f  # numpy's virtual index for the linear method
    prev = math.floor(virtual)
    gamma = virtual - prev
    if virtual >= n - 1:
        i = j = n - 1
    elif virtual < 0:
        i = j = 0
    else:
        i, j = prev, prev + 1
    lo, hi = a[i], a[j]
    diff = hi - lo
    return float(hi - diff * (1 - gamma)) if gamma >= 0.5 else float(lo + diff * gamma)


def nanmedian_rows(a: np.ndarray) -> np.ndarray:
    """np.nanmedian(a, axis=1) of a 2-d float array, without numpy.ma (which np.nanmedian imports for small
    arrays): per row, the middle of its non-NaN values, or the two middles' sum halved (numpy's arithmetic,
    so the same bits); NaN for a row of NaNs only (no warning)."""
    a = np.asarray(a, dtype=np.float64)
    if not a.shape[1]:
        return np.full(a.shape[0], math.nan)
    srt = np.sort(a, axis=1)  # NaNs sort last
    n = (~np.isnan(a)).sum(axis=1)
    rows = np.arange(a.shape[0])
    hi = n // 2
    lo = np.where(n % 2 == 1, hi, np.maximum(hi - 1, 0))
    with np.errstate(invalid="ignore", over="ignore"):
        out = (srt[rows, lo] + srt[rows, hi]) / 2.0
    out[n == 0] = math.nan
    return out


def median(values: Sequence[float] | np.ndarray) -> float:
    """float(np.median(values)) of a 1-d real sequence, without the import of
    numpy.ma that np.median does on its first call (10 ms of start-up): the
    middle value, or the mean of the two middle values; nan when empty or
    when any value is nan."""
    a = np.asarray(values, dtype=np.float64).ravel()
    n = len(a)
    if n == 0 or bool(np.isnan(a).any()):
        return math.nan
    k = n // 2
    if n % 2:
        return float(np.partition(a, k)[k])
    part = np.partition(a, (k - 1, k))
    return float((part[k - 1] + part[k]) / 2.0)
