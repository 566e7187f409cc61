"""The one list of an analysis's invariants (`check_analysis`) and of its
findings' (`check_findings`): what a self-consistent analysis and its
recommendations satisfy, one line per violation. `Analysis.self_check` and
`Findings.self_check` raise on them; reading a saved document checks them.

Imports: vocab (and the records' types for annotations only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from profanalyzer.core.vocab import (
    BUCKETS,
    CLAIM_BUCKET,
    CLAIM_REMAT,
    COLLECTIVE_BUCKETS,
    COLLECTIVE_KIND_BUCKET,
)

if TYPE_CHECKING:
    from profanalyzer.model.analysis import Analysis
    from profanalyzer.model.findings import Findings

#: Tolerances of `check_analysis`. Per-core buckets are means of integer
#: picoseconds per step: their sum can miss the step by rounding only.
FRACTION_TOLERANCE = 1e-3
PS_TOLERANCE = 1.0  # ps per step
REL_TOLERANCE = 1e-6  # of the step, for values that went through JSON rounding


def _close(a: float, b: float, step: float) -> bool:
    return abs(a - b) <= max(PS_TOLERANCE, REL_TOLERANCE * abs(step))


def check_analysis(a: Analysis) -> list[str]:
    """What is wrong with `a`, one line each ([] when nothing):

    * the breakdown's fractions sum to 1;
    * each core's buckets sum to that core's step time;
    * per collective bucket, the exposed time of the collective types that
      map to it (`vocab.COLLECTIVE_KIND_BUCKET`) equals the bucket's share of
      the breakdown, and the communication total equals all collective
      buckets together.

    The last two hold by definition only when every core kept the same
    number of steps: the overlap analysis divides totals by core-steps, the
    breakdown averages each core's mean. When the cores' kept counts differ
    the two are different (both correct) means and are not compared.
    """
    problems: list[str] = []
    total = sum(b.fraction for b in a.breakdown.values())
    if a.breakdown and abs(total - 1.0) > FRACTION_TOLERANCE:
        problems.append(f"breakdown fractions sum to {total}, not 1")
    step = a.steps.step_time_ps.get("mean", 0.0) or 0.0
    for c in a.per_core:
        s = sum(c.buckets.values())
        if not _close(s, c.step_ps, c.step_ps):
            problems.append(f"core {c.core}: buckets sum to {s:.0f} ps, its step to {c.step_ps:.0f} ps")
    same_counts = len({c.steps_kept for c in a.per_core}) <= 1
    if a.collectives and same_counts:
        by_bucket: dict[str, float] = {}
        for t, cs in a.collectives.items():
            b = COLLECTIVE_KIND_BUCKET.get(t, "other_collective")
            if cs.bucket != b:
                problems.append(f"collective type {t}: bucket {cs.bucket}, the vocabulary says {b}")
            by_bucket[b] = by_bucket.get(b, 0.0) + cs.exposed_ps
        for b in (x for x in BUCKETS if x in COLLECTIVE_BUCKETS):
            share = a.breakdown[b].ps if b in a.breakdown else 0.0
            if not _close(by_bucket.get(b, 0.0), share, step):
                problems.append(f"bucket {b}: {share:.0f} ps per step, its collective types' exposed time {by_bucket.get(b, 0.0):.0f} ps")
    comm = sum(a.breakdown[b].ps for b in a.breakdown if b in COLLECTIVE_BUCKETS)
    if a.breakdown and same_counts and not _close(a.communication.exposed_total_ps, comm, step):
        problems.append(f"exposed communication {a.communication.exposed_total_ps:.0f} ps, the collective buckets {comm:.0f} ps")
    return problems


def check_findings(f: Findings, a: Analysis) -> list[str]:
    """A finding never claims more than the time it names, nor more than the step."""
    problems: list[str] = []
    step = a.steps.step_time_ps.get("mean", 0.0) or 0.0
    for x in f.recommendations:
        if x.estimated_saving_ps > step + max(PS_TOLERANCE, REL_TOLERANCE * step):
            problems.append(f"{x.code}: saving {x.estimated_saving_ps:.0f} ps exceeds the step ({step:.0f} ps)")
        for key, ps in x.claims:
            try:
                cap = claim_capacity(a, key)
            except ValueError as e:
                problems.append(f"{x.code}: {e}")
                continue
            if ps > cap + max(PS_TOLERANCE, REL_TOLERANCE * step):
                problems.append(f"{x.code}: claims {ps:.0f} ps of {key}, which holds {cap:.0f} ps")
    return problems


def claim_capacity(a: Analysis, key: str) -> float:
    """How much time a claim's pool stands for: `bucket:<name>` or `remat` (model.findings.Claim)."""
    if key == CLAIM_REMAT:
        return a.remat.ps
    if key.startswith(CLAIM_BUCKET):
        b = a.breakdown.get(key[len(CLAIM_BUCKET):])
        return b.ps if b is not None else 0.0
    raise ValueError(f"unknown claim key {key!r}")
