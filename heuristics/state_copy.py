"""Lever L6 — Tokamax kernels (`tokamax`): state buffers copied whole every
step, found in the program (its own module: it reads the program's
anti-patterns, evidence a capture without HLO does not have)."""

from __future__ import annotations

from profanalyzer.findings.rules import rule
from profanalyzer.model.findings import Claim

from ._util import ms, pct

#: Whole copies of state buffers worth removing: share of the step.
STATE_COPY_MIN_FRACTION = 0.02


@rule("TK006", "tokamax", "State buffers copied whole every step: update them in place",
      fixtures=("real-tpu/decode_gqa_scan_cache", "real-tpu/decode_gqa_per_layer"))
def state_copies(self, analysis, facts):
    """
    What it detects: copies of a state buffer (an array of an entry
    parameter: a KV cache, the parameters, optimizer state) made every step,
    found in the program (anti-pattern `state_copy`: a copy of the array, or
    a slice update whose measured time is that of moving the whole array;
    `page_gather`: a paged cache's pages gathered into a contiguous buffer and
    relaid out for an einsum), together above 2% of the step.

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
    buffer. A paged cache is read where its pages lie by a paged-attention
    kernel (measured on a TPU v5e decode: 3.99 ms with the gather, 2.00 ms
    with JAX's Pallas paged-attention kernel).
    """
    copies = [a for a in analysis.antipatterns or () if a.kind in ("state_copy", "page_gather") and a.ps > 0]
    paged = any(a.kind == "page_gather" for a in copies)
    total = sum(a.ps for a in copies)
    step = facts.step_ps
    if total / step < STATE_COPY_MIN_FRACTION:
        return []
    bucket_of = {op.name: op.bucket for op in analysis.top_ops}
    claims: dict[str, float] = {}
    for a in copies:
        key = bucket_of.get(a.op, "other_compute")
        claims[key] = claims.get(key, 0.0) + a.ps
    evidence = [f"{len(copies)} whole copies of state buffers take {ms(total)} per step ({pct(total / step)})"
                + (" (pages of a paged cache gathered and relaid out among them)" if paged else "")]
    evidence += [f"{a.op}: {ms(a.ps)} per step ({pct(a.fraction)}): {a.detail}" for a in
                 sorted(copies, key=lambda a: (-a.ps, a.op))[:4]]
    action = []
    if paged:
        action += ["# paged cache: read the pages where they lie with a paged-attention kernel (page pools + page "
                   "table in, no gather): jax.experimental.pallas.ops.tpu.paged_attention / ragged_paged_attention",
                   "# the kernel still reads each sequence's pages once: only the gather and the relayout go"]
    if any(a.kind == "state_copy" for a in copies):
        action += ["# donate the state and write only the new slot in place: jax.jit(step, donate_argnums=...) and "
                   "lax.dynamic_update_slice into the buffer the parameter arrives in",
                   "# one buffer per layer (not a stacked array sliced inside the loop, nor a scan's xs/ys), or a "
                   "kernel that writes the slot with input_output_aliases",
                   "# check: the dump's buffer assignment shows the output sharing the parameter's buffer"]
    return [self.finding(
        analysis, total, evidence, action,
        ["an in-place update moves the updated slot only: the copies' time goes, the slot write stays (negligible "
         "against the array)", "the copies' measured time is what they take in this step",
         *(["a paged kernel reads the pages once, as the attention over the gathered copy does now: that read "
            "stays"] if paged else [])],
        claims=Claim.buckets(claims))]
