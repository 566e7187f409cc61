"""Lever L6 — Tokamax kernels (`tokamax`): state buffers copied whole every
step, found in the program (its own module: it reads the program's
anti-patterns, evidence a capture without HLO does not have)."""

from __future__ import annotations

from heuristics._util import ms, pct
from profanalyzer.rules import rule

#: Whole copies of state buffers worth removing: share of the step.
STATE_COPY_MIN_FRACTION = 0.02


@rule("TK006", "tokamax", "State buffers copied whole every step: update them in place",
      fixtures=("real-tpu/decode_gqa_scan_cache", "real-tpu/train_remat_none"))
def state_copies(self, analysis):
    """
    What it detects: copies of a state buffer (an array of an entry
    parameter: a KV cache, the parameters, optimizer state) made every step,
    found in the program (anti-pattern `state_copy`: a copy of the array, or
    a slice update whose measured time is that of moving the whole array),
    together above 2% of the step.

    Why it costs time: a donated buffer that cannot be aliased to its output
    is copied whole each step: a KV cache of gigabytes moves twice through
    HBM to change one position. Measured on a TPU v5e decode step: the
    copies took 45-52% of the step.

    What to change: donate the state (jit donate_argnums) and write only the
    new slot with dynamic_update_slice into the buffer it arrives in; do not
    slice one layer out of a stacked array inside the loop (a scan's xs/ys or
    a carry sliced per layer copies the whole array): keep one buffer per
    layer, or write the slot from a kernel with input_output_aliases. The
    dump's buffer assignment tells whether the output shares the parameter's
    buffer.
    """
    copies = [a for a in analysis.antipatterns or () if a.kind == "state_copy" and a.ps > 0]
    total = sum(a.ps for a in copies)
    step = analysis.steps.step_time_ps["mean"] or 1
    if total / step < STATE_COPY_MIN_FRACTION:
        return []
    bucket_of = {op.name: op.bucket for op in analysis.top_ops}
    claims: dict[str, float] = {}
    for a in copies:
        key = f"bucket:{bucket_of.get(a.op, 'other_compute')}"
        claims[key] = claims.get(key, 0.0) + a.ps
    evidence = [f"{len(copies)} whole copies of state buffers take {ms(total)} per step ({pct(total / step)})"]
    evidence += [f"{a.op}: {ms(a.ps)} per step ({pct(a.fraction)}): {a.detail}" for a in
                 sorted(copies, key=lambda a: (-a.ps, a.op))[:4]]
    return [self.finding(
        analysis, total, evidence,
        ["# donate the state and write only the new slot in place: jax.jit(step, donate_argnums=...) and "
         "lax.dynamic_update_slice into the buffer the parameter arrives in",
         "# one buffer per layer (not a stacked array sliced inside the loop, nor a scan's xs/ys), or a kernel that "
         "writes the slot with input_output_aliases",
         "# check: the dump's buffer assignment shows the output sharing the parameter's buffer"],
        ["an in-place update moves the updated slot only: the copies' time goes, the slot write stays (negligible "
         "against the array)", "the copies' measured time is what they take in this step"],
        claims=claims)]
