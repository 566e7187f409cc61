"""A systematically late TensorCore (`LC001`): one core arrives last at most
collectives, and every other core waits for it there.

Filed under lever L2 (sharding and parallelism): an uneven share of work
(input imbalance, expert routing, uneven sequence packing) or a slow chip
makes one core the step's pace-setter. Reads `Analysis.collective_diagnosis`
(profanalyzer.analyze.collectives) and the per-core buckets.
"""

from __future__ import annotations

from profanalyzer.core.vocab import COLLECTIVE_BUCKETS
from profanalyzer.findings.rules import rule

from ._util import ms, pct

#: Cores needed to call one of them late (two cores: either is "the other").
LATE_MIN_CORES = 3
#: Instances with a distinct last arrival needed (fewer is anecdote).
LATE_MIN_INSTANCES = 10
#: Share of those instances the same core must be last at.
LATE_MIN_SHARE = 0.5
#: Its median lateness (its arrival minus the others' median) as a share of the step.
LATE_MIN_LATENESS_FRACTION = 0.005


def _waiting(core) -> float:
    """Time a core spends waiting per step: idle + exposed collectives."""
    return core.buckets.get("idle", 0.0) + sum(v for b, v in core.buckets.items() if b in COLLECTIVE_BUCKETS)


@rule("LC001", "sharding", "One TensorCore arrives late at the collectives: the others wait for it",
      fixtures=("straggler_core", "dense_short_fsdp"))
def late_core(self, analysis, facts):
    """
    What it detects: one TensorCore arriving last at most collective
    instances (at least half of at least 10 instances with a distinct last
    arrival, among 3 or more cores), by a median of at least 0.5% of the
    step over the other cores' arrival.

    Why it costs time: a collective completes only when every participant
    has arrived, so each core that arrives on time waits inside the
    collective for the late one; the whole step runs at the pace of the
    slowest core, and communication levers (offload, overlap) cannot hide
    a wait that is really the other core's compute.

    What to change: find why that core has more work or runs slower: compare
    its busy time with the others' (the per-core table), check input
    imbalance (uneven sequence lengths or packing per data shard, MoE expert
    routing skew: a capacity factor or load-balancing loss), the host that
    feeds it (a busy host thread delays its dispatch), and the chip itself
    (the same device late across runs points at hardware: report or swap
    the slice).
    """
    d = analysis.collective_diagnosis
    if d is None or d.cores < LATE_MIN_CORES or d.last_core is None or d.last_core_share is None:
        return []
    step = facts.step_ps
    if (d.distinct_last < LATE_MIN_INSTANCES or d.last_core_share < LATE_MIN_SHARE
            or d.last_core_lateness_ps < LATE_MIN_LATENESS_FRACTION * step):
        return []
    late = next((c for c in analysis.per_core if c.core == d.last_core), None)
    others = [c for c in analysis.per_core if c.core != d.last_core]
    saving = 0.0
    evidence = [
        f"{d.last_core} arrives last at {d.last_counts.get(d.last_core, 0)} of {d.distinct_last} collective "
        f"instances with a distinct last arrival ({pct(d.last_core_share)}; {d.instances} instances over {d.cores} cores)",
        f"median lateness when last: {ms(d.last_core_lateness_ps)} ({pct(d.last_core_lateness_ps / step)} of the step) "
        f"after the other cores' median arrival",
    ]
    if late is not None and others:
        mean_wait = sum(_waiting(c) for c in others) / len(others)
        saving = max(0.0, mean_wait - _waiting(late))
        evidence.append(f"the other cores wait (idle + exposed collectives) {ms(mean_wait)} per step, "
                        f"{d.last_core} {ms(_waiting(late))}: {ms(saving)} of waiting for it")
        evidence.append(f"{d.last_core} busy {ms(late.busy_ps)} per step vs the others' mean "
                        f"{ms(sum(c.busy_ps for c in others) / len(others))}")
    for t, x in d.types.items():
        if x.last_core == d.last_core and x.last_core_share is not None:
            evidence.append(f"{t}: last at {pct(x.last_core_share)} of its instances, arrival spread {ms(x.arrival_spread_ps)}")
    return [
        self.finding(
            analysis,
            saving,
            evidence[:8],
            [
                f"# compare {d.last_core}'s busy time with the other cores' (per-core table): more work or a slower core",
                "# input imbalance: even out sequence lengths / packing per data shard; MoE: capacity factor, load-balancing loss",
                "# the same device late across runs points at the chip or its host: report it or swap the slice",
            ],
            ["bringing the late core to the others' pace removes the others' extra wait (idle + exposed collectives)"],
        )
    ]


RULES = (late_core,)
