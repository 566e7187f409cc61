"""Lever L2 — sharding and parallelism (`sharding`): the batch a step runs, when
the optimizer update takes a large share of a training step (its own module: it
reads the optimizer phase, which only a training step's program structure gives)."""

from __future__ import annotations

from profanalyzer.findings.rules import rule
from profanalyzer.model.findings import Claim

from ._util import ms, pct

#: The update's share of a training step above which amortising it is worth it.
OPTIMIZER_MIN_FRACTION = 0.15
#: Microbatches accumulated per update in the estimate (the update then runs once per that many).
ACCUMULATE = 4


@rule("OP001", "sharding", "The optimizer update is a large share of the step: amortise it over more tokens",
      fixtures=("real-tpu/train_small_batch", "real-tpu/train_remat_none"))
def optimizer_update(self, analysis, facts):
    """
    What it detects: a training step whose optimizer phase (its compute
    outside the forward and the backward, the work that writes the updated
    parameters and optimizer states) takes 15% of the step or more.

    Why it costs time: the update reads and writes every parameter and its
    optimizer states once per step, whatever the batch: its time does not
    shrink with fewer tokens. Measured on a TPU v5e: the Adam update took
    3.7 ms at 256 tokens per step (43% of the step) and 3.6 ms at 8,192.

    What to change: more tokens per update: a larger per-device batch where
    HBM allows, or gradient accumulation (MaxText
    `gradient_accumulation_steps`, optax.MultiSteps), so that one update
    serves several microbatches; fused or lower-precision (bf16) optimizer
    states halve the bytes an HBM-bound update moves.
    """
    phase = analysis.phases.get("optimizer")
    step = facts.step_ps
    if phase is None or phase.ps <= 0 or phase.ps / step < OPTIMIZER_MIN_FRACTION:
        return []
    saving = phase.ps * (1 - 1 / ACCUMULATE)
    other = analysis.breakdown.get("other_compute")
    claims = {"other_compute": min(saving, other.ps if other is not None else 0.0)}
    evidence = [f"the optimizer update: {ms(phase.ps)} per step ({pct(phase.ps / step)}), the training step's compute "
                "outside the forward and the backward",
                f"accumulating {ACCUMULATE} microbatches per update runs it once per {ACCUMULATE} steps' tokens: "
                f"{ms(saving)} per step of today's tokens"]
    return [self.finding(
        analysis, min(saving, sum(claims.values())), evidence,
        [f"gradient_accumulation_steps={ACCUMULATE}  # MaxText; JAX: optax.MultiSteps(opt, every_k_schedule="
         f"{ACCUMULATE})",
         "# or a larger per-device batch where HBM allows (the same effect without the accumulation buffer)",
         "# the update is HBM-bound: bf16 optimizer states (or a fused update) halve the bytes it moves"],
        [f"the update's time does not depend on the batch (measured: 3.6-3.7 ms for Adam at 256 and 8,192 tokens on a "
         f"TPU v5e); the forward and backward scale with the tokens: per token, only {1 - 1 / ACCUMULATE:.0%} of "
         "the update's time goes", "the accumulation buffer fits in HBM (one more copy of the gradients)"],
        claims=Claim.buckets(claims))]


RULES = (optimizer_update,)
