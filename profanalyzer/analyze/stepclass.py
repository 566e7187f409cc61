"""Step classes: periodic heavy steps reported as a class with their period.

The steady-state rule (analysis.select_steps) drops steps far from the median.
Some of those are not noise but a schedule: gradient-accumulation boundaries,
evaluation, checkpointing every N steps. `step_classes` finds them among the
dropped slower steps (the first step, warm-up and compilation, aside): when
at least MIN_MEMBERS of them fall on one residue class modulo a period P >= 2
and every step of that class in the captured range is one of them, they form
a class `every P steps (from step K)` with their mean time, the extra time
over the median kept step, that extra amortised over the period (what it
costs the average step), and the bucket that grew most.

Imports: model, vocab (the analysis stage).
"""

from __future__ import annotations

import math
from functools import reduce
from itertools import pairwise

from profanalyzer.core.stats import median_of
from profanalyzer.core.vocab import BUCKETS
from profanalyzer.model.analysis import StepClass, StepRow

__all__ = ["step_classes", "MIN_MEMBERS"]

#: Fewest heavy steps that make a period.
MIN_MEMBERS = 2


def step_classes(table: tuple[StepRow, ...]) -> tuple[StepClass, ...]:
    """Periodic classes among the dropped slower steps (empty when none)."""
    rows = sorted(table, key=lambda r: r.number)
    kept = [r for r in rows if r.kept]
    if len(rows) < 3 or not kept:
        return ()
    med = median_of([r.step_ps for r in kept])
    heavy = [r for r in rows[1:] if not r.kept and r.step_ps > med]
    if len(heavy) < MIN_MEMBERS:
        return ()
    nums = [r.number for r in heavy]
    period = reduce(math.gcd, [b - a for a, b in pairwise(nums)])
    if period < 2:
        return ()
    expected = list(range(nums[0], rows[-1].number + 1, period))
    present = {r.number for r in rows}
    if [n for n in expected if n in present] != nums:  # a step of the class that is not heavy: not a schedule
        return ()
    mean = sum(r.step_ps for r in heavy) / len(heavy)
    extra = mean - med
    grew = {b: sum(r.buckets.get(b, 0.0) for r in heavy) / len(heavy) - sum(r.buckets.get(b, 0.0) for r in kept) / len(kept)
            for b in BUCKETS}
    main = max(BUCKETS, key=lambda b: (grew[b], -BUCKETS.index(b)))
    return (StepClass(
        kind="periodic",
        period=period,
        first=nums[0],
        steps=tuple(nums),
        step_ps=mean,
        extra_ps=extra,
        amortized_fraction=extra / period / med if med > 0 else 0.0,
        main_bucket=main,
        main_bucket_extra_ps=grew[main],
    ),)
