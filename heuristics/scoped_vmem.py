"""Lever L5 — scoped VMEM tuning (`scoped_vmem`)."""

from __future__ import annotations

import re

from profanalyzer.core.hardware import CHIPS
from profanalyzer.findings.rules import rule
from profanalyzer.model.findings import Claim

from ._util import op_line

#: Kernels with tiles at or under this size and below the roofline share are
#: memory-stalled by a small scoped-VMEM budget.
SMALL_TILE = 256
LOW_ROOFLINE = 0.40
TARGET_ROOFLINE = 0.62
MIN_FRACTION = 0.03
#: The share of a TensorCore's VMEM to give scoped VMEM, leaving room for weight prefetch: on TPU7x,
#: 48 MiB of its 64 MiB per TensorCore (the chip table's figure, `vmem_mib_per_core`).
SUGGESTED_SHARE = 0.75


def suggested_kib(vmem_mib_per_core: float) -> int:
    return int(vmem_mib_per_core * 1024 * SUGGESTED_SHARE)


#: Every value the rule may advise: one per chip of the hardware table (TPU7x 49152, v6e 98304, ...).
FLAGS = tuple(sorted({f"--xla_tpu_scoped_vmem_limit_kib={suggested_kib(c.vmem_mib_per_core)}" for c in CHIPS.values()}))

_BLOCK = re.compile(r"block_[a-z_]*?(\d{2,5})", re.I)


def tile_size(name: str) -> int | None:
    sizes = [int(m) for m in _BLOCK.findall(name)]
    return min(sizes) if sizes else None


def stalled_small_tile_kernels(analysis):
    """Kernels with small tiles running below LOW_ROOFLINE: (op, tile) pairs."""
    hits = []
    for op in analysis.kernel_ops:
        t = tile_size(op.name)
        if t is not None and t <= SMALL_TILE and op.roofline_fraction is not None and op.roofline_fraction < LOW_ROOFLINE:
            hits.append((op, t))
    return hits


@rule("VM001", "scoped_vmem", "Memory-stalled kernels with small tiles: raise scoped VMEM", fixtures=("small_tiles", "tuned_vmem"),
      flags=FLAGS)
def raise_scoped_vmem(self, analysis, facts):
    """
    What it detects: Pallas kernels whose block sizes are small (<= 256) and
    that run below 40% of their roofline, over 3% of the step.

    Why it costs time: tile sizes are bounded by scoped VMEM (64 MiB per
    TensorCore on TPU7x, 128 MiB on v6e, shared with weight prefetch); small
    tiles re-read operands from HBM and stall on memory.

    What to change: raise `--xla_tpu_scoped_vmem_limit_kib` (it also widens
    the tile search space of Pallas kernels) and re-tune block sizes.
    """
    step = facts.step_ps
    hits = stalled_small_tile_kernels(analysis)
    total = sum(op.self_ps for op, _ in hits)
    if total / step < MIN_FRACTION:
        return []
    vmem = analysis.hardware.vmem_mib_per_core
    kib = suggested_kib(vmem)
    flags = (f"--xla_tpu_scoped_vmem_limit_kib={kib}",)
    claims: dict[str, float] = {}
    saving = 0.0
    for op, _ in hits:
        s = op.self_ps * (1 - op.roofline_fraction / TARGET_ROOFLINE)
        saving += s
        claims[op.bucket] = claims.get(op.bucket, 0.0) + s
    return [
        self.finding(
            analysis,
            saving,
            [f"{op_line(op)}, tile {t}" for op, t in hits[:6]],
            ["# then re-tune kernel block sizes (e.g. 512-1024) with tune-jax"],
            [f"with larger tiles the kernels reach {TARGET_ROOFLINE:.0%} of their roofline (a tuned splash kernel)",
             f"{kib // 1024} MiB of the {vmem:g} MiB VMEM per TensorCore of {analysis.hardware.name} (the chip "
             "table's figure) leaves room for weight prefetch"],
            claims=Claim.buckets(claims),
            flags=flags,
        )
    ]


RULES = (raise_scoped_vmem,)
