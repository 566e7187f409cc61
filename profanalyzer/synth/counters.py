"""Hardware counters and Pallas pipeline phases of the synthesized Pallas
kernels (Scenario.counters): what the `_counters_` and `XLA TraceMe` lines
of a capture taken with the kernel-profiling flags hold, with their truth.

Per kernel kind, a fixed profile: each unit's utilisation (0..1, written as
`% util` samples over windows of 1.2-14 us covering every run of the
kernel) and the share of each run spent in `ep_wait_in` (the rest
`ep_run_kernel`). The samples are exact (no jitter), so the time-weighted
utilisation over the kernel's span and the median sample both equal the
profile, and the wait share equals its `ep_wait` figure."""

from __future__ import annotations

import numpy as np

from .builder import OpT
from .layers import CUSTOM_MATMUL_KERNEL, OPAQUE_MATMUL_KERNEL

__all__ = ["PROFILES", "profile_of", "windows", "UNITS"]

UNITS = ("MXU", "Vector ALU", "Vector Load", "Vector Store", "Vector EUP")

#: kind -> (unit utilisations, ep_wait share, the verdict a good analysis gives)
PROFILES: dict[str, tuple[dict[str, float], float, str]] = {
    "custom_matmul": ({"MXU": 0.72, "Vector ALU": 0.18, "Vector Load": 0.30}, 0.10, "mxu_bound"),
    "attention_dkv": ({"MXU": 0.30, "Vector ALU": 0.40, "Vector EUP": 0.45}, 0.40, "waiting_on_dma"),
    "attention": ({"MXU": 0.35, "Vector ALU": 0.50, "Vector EUP": 0.66}, 0.12, "vector_bound"),
}


def profile_of(op: OpT) -> str | None:
    """The profile kind of a kernel op, None for ops without counters."""
    if op.category != "custom-call":
        return None
    if op.name.startswith((CUSTOM_MATMUL_KERNEL, OPAQUE_MATMUL_KERNEL)):
        return "custom_matmul"
    if op.bucket == "attention":
        return "attention_dkv" if "_mha_dkv" in op.name else "attention"
    return None


def windows(start: int, dur: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sample windows tiling [start, start + dur): lengths 1.2-14 us, the last cut at the end."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1_200_000, 14_000_000, size=max(1, dur // 1_200_000 + 1))
    edges = np.concatenate([[0], np.cumsum(lens)])
    edges = edges[edges < dur]
    s = start + edges
    e = np.append(s[1:], start + dur)
    return s.astype(np.int64), e.astype(np.int64)
