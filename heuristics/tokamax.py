"""Lever L6 — Tokamax kernels (`tokamax`): splash attention, Megablox GMM,
tune-jax block sizes, max-logit estimate, state buffers updated in place."""

from __future__ import annotations

from profanalyzer.findings.rules import rule
from profanalyzer.model.findings import Claim

from ._util import ms, op_line, pct
from .attention_blocks import attention_block_sizes
from .state_copy import state_copies

#: Unfused attention share of the step worth replacing by splash attention.
UNFUSED_MIN_FRACTION = 0.03
#: Splash kernel efficiency (share of BF16 peak) assumed when the trace has no
#: splash kernel to measure.
DEFAULT_SPLASH_EFFICIENCY = 0.60
#: Padded dense expert matmuls: share of the step worth converting.
MOE_DENSE_MIN_FRACTION = 0.05
#: Waste assumed when the trace carries no model_flops to measure padding
#: (capacity factor 1.25 -> 20% of expert FLOPs are padding).
DEFAULT_PADDING_WASTE = 0.20
#: Kernels below this share of their roofline are worth a block-size search...
KERNEL_LOW_ROOFLINE = 0.35
#: ...and so are kernels below KERNEL_TUNED_ROOFLINE when together they
#: dominate the step (>= KERNEL_DOMINANT_FRACTION): a few points there pay.
KERNEL_TUNED_ROOFLINE = 0.60
KERNEL_DOMINANT_FRACTION = 0.30
#: Roofline share a tuned kernel reaches (tuned splash / GMM kernels).
KERNEL_TARGET_ROOFLINE = 0.66
KERNEL_MIN_FRACTION = 0.02
#: Softmax max-reduction share of splash forward time removed by a max-logit estimate.
MAX_LOGIT_SAVING = 0.04
MAX_LOGIT_MIN_FRACTION = 0.05

_EXPERT_SCOPES = ("moe", "expert", "mlp_block/wi", "/wi_", "/wo")


def splash_efficiency(analysis) -> tuple[float, str]:
    k = analysis.bucket_ops.get("attention_kernel")
    if k is not None and k.ps > 0 and k.flops > 0:
        eff = k.flops / (k.ps * 1e-12) / (analysis.hardware.per_core.peak_bf16_tflops * 1e12)
        if 0.05 < eff <= 1.0:
            return eff, f"measured efficiency of this trace's attention kernels: {eff:.0%} of BF16 peak"
    return DEFAULT_SPLASH_EFFICIENCY, f"assumed splash attention efficiency {DEFAULT_SPLASH_EFFICIENCY:.0%} of BF16 peak"


@rule("TK001", "tokamax", "Unfused attention: use splash attention", fixtures=("attention_unfused", "attention_splash"))
def use_splash(self, analysis, facts):
    """
    What it detects: attention computed as plain dots and softmax fusions
    above 3% of the step, in a step that runs no fused attention kernel (any
    family: splash, flash, ragged / paged attention, ...).

    Why it costs time: standard attention writes the score matrix to HBM and
    reads it back for softmax and the second dot: HBM-bound and quadratic in
    sequence length. Splash attention keeps tiles in VMEM and skips masked
    blocks.

    What to change: use the splash attention kernel (MaxText
    `attention=flash`, which selects splash on TPU).

    Quiet on a decode step (attention over a KV cache, analyze.kvcache):
    splash is a prefill and training kernel; the softmax beside a decode
    step's cache contractions is not the lever there.
    """
    un = analysis.bucket_ops.get("attention_unfused")
    fused = analysis.bucket_ops.get("attention_kernel")
    decode = analysis.bucket_ops.get("attention_decode")
    if un is None or un.fraction < UNFUSED_MIN_FRACTION or (fused is not None and fused.ps > 0) or (
            decode is not None and decode.ps > 0):
        return []
    eff, how = splash_efficiency(analysis)
    peak = analysis.hardware.per_core.peak_bf16_tflops * 1e12
    new_ps = un.flops / (peak * eff) * 1e12 if un.flops > 0 else un.ps * 0.5
    saving = max(0.0, un.ps - new_ps)
    evidence = [
        f"unfused attention ops: {ms(un.ps)} per step ({pct(un.fraction)}), {un.ops} distinct ops, "
        f"HBM-bound {ms(un.hbm_bound_ps)}",
        f"their FLOPs would take {ms(new_ps)} in a kernel",
    ]
    evidence += [op_line(op) for op in analysis.top_ops if op.bucket == "attention" and not any(t.startswith("kernel:") for t in op.tags)][:4]
    return [
        self.finding(
            analysis,
            saving,
            evidence,
            ["attention=flash  # MaxText: splash attention kernel on TPU", "# tune block sizes with tune-jax afterwards"],
            [how, "the kernel performs the same FLOPs as the unfused dots (no extra mask skipping credited)"],
            claims=[Claim.bucket("attention", saving)],
        )
    ]


@rule("TK002", "tokamax", "MoE experts as padded dense matmuls: use Megablox GMM", fixtures=("moe_dense_padded", "moe_short_fsdp_ep"))
def use_megablox(self, analysis, facts):
    """
    What it detects: a MoE workload whose expert matmuls run as dense dots
    (no Megablox grouped-matmul kernel), with the padding measured from
    model FLOPs vs executed FLOPs.

    Why it costs time: padding every expert's token group to a fixed capacity
    spends MXU time on zeros and moves padded activations through HBM.

    What to change: use Megablox grouped matmul (MaxText `sparse_matmul=true`,
    `megablox=true`), which computes ragged token groups without padding.
    """
    wl = facts.workload
    if wl.kind != "moe" or any("kernel:megablox_gmm" in op.tags for op in analysis.kernel_ops):
        return []
    expert = [
        op for op in analysis.top_ops
        if op.bucket.startswith("matmul") and any(s in op.tf_op.lower() for s in _EXPERT_SCOPES)
    ]
    t = sum(op.self_ps for op in expert)
    if t / (facts.step_ps) < MOE_DENSE_MIN_FRACTION:
        return []
    saving = 0.0
    measured = False
    for op in expert:
        if op.model_flops_ratio is not None and 0 < op.model_flops_ratio <= 1:
            saving += op.self_ps * (1 - op.model_flops_ratio)
            measured = True
        else:
            saving += op.self_ps * DEFAULT_PADDING_WASTE
    evidence = [f"dense expert matmuls: {ms(t)} per step over {len(expert)} ops; no Megablox kernel in the trace"]
    evidence += [op_line(op) + (f", model/executed FLOPs {op.model_flops_ratio:.2f}" if op.model_flops_ratio else "") for op in expert[:4]]
    how = ("padding measured per op as 1 - model_flops / flops" if measured
           else f"no model_flops in the trace: assumed {DEFAULT_PADDING_WASTE:.0%} padding (capacity factor 1.25)")
    return [
        self.finding(
            analysis,
            saving,
            evidence,
            ["sparse_matmul=true", "megablox=true"],
            [how, "the grouped matmul runs at the dense dots' efficiency on the useful tokens"],
            claims=Claim.buckets(_claims_by_bucket(expert, saving)),
        )
    ]


#: Layout ops feeding a fused attention kernel: share of the step worth acting on.
LAYOUT_MIN_FRACTION = 0.02


@rule("TK005", "tokamax", "Layout ops feed the fused attention kernel: give it its native layout", fixtures=("serving_tp2_w4", "attention_splash"))
def attention_native_layout(self, analysis, facts):
    """
    What it detects: transposes, reshapes and copies that run under a fused
    attention kernel's own scope (they exist to put Q/K/V or the KV cache
    into the kernel's layout) above 2% of the step.

    Why it costs time: each is a pass through HBM that does no attention
    math; the kernel itself is already fused, so this time is pure data
    movement in front of it.

    What to change: produce Q/K/V (and the KV cache pages) in the layout the
    kernel reads, so XLA needs no transpose: fold the permutation into the
    projection's output layout, or pick the kernel variant / block sizes
    (tune-jax) for the layout the model already has.
    """
    lay = analysis.bucket_ops.get("attention_layout")
    if lay is None or lay.fraction < LAYOUT_MIN_FRACTION:
        return []
    kern = analysis.bucket_ops.get("attention_kernel")
    ops = [op for op in analysis.top_ops if "attention:layout" in op.tags]
    evidence = [f"layout ops under the attention kernel's scope: {ms(lay.ps)} per step ({pct(lay.fraction)}) over "
                f"{lay.ops} distinct ops" + (f"; the kernel itself {ms(kern.ps)}" if kern is not None and kern.ps > 0 else "")]
    evidence += [op_line(op) for op in ops[:4]]
    actions = [
        "# emit Q/K/V and the KV cache in the kernel's native layout (fold the transpose into the projection output), "
        "or choose the kernel variant / block sizes for the layout the model has (tune-jax)",
    ]
    assumptions = ["the permutation folds into the producers' output layout: the separate layout passes disappear "
                   "(assumed; no guide figure)"]
    return [self.finding(analysis, lay.ps, evidence, actions, assumptions, claims=[Claim.bucket("attention", lay.ps)])]


def _claims_by_bucket(ops, saving: float) -> dict[str, float]:
    total = sum(op.self_ps for op in ops) or 1.0
    out: dict[str, float] = {}
    for op in ops:
        out[op.bucket] = out.get(op.bucket, 0.0) + saving * op.self_ps / total
    return out


@rule("TK003", "tokamax", "Kernels below their roofline: tune block sizes", fixtures=("dense_long_fsdp_cp", "tuned_vmem"))
def tune_block_sizes(self, analysis, facts):
    """
    What it detects: Pallas kernels (attention, grouped matmul, custom) below
    35% of their roofline, or below 60% while together taking 30% of the step
    or more (a matmul kernel the capture states no bytes for: its operands and
    outputs from the program). Small-tile, memory-stalled kernels are left to
    the scoped-VMEM rule. Measured on a TPU v5e prefill: a Pallas matmul at
    128 blocks ran at 7% of its roofline, 115 ms a step against 18.6 ms at
    512 blocks.

    Why it costs time: default kernel block sizes are often not optimal for
    the shapes and chip; poor tiles stall on memory or under-fill the MXU.
    When kernels dominate the step, a few points of efficiency are a large
    saving.

    What to change: run tune-jax's block-size search for these kernels and
    pin the winning block sizes; raise scoped VMEM first if the best tiles do
    not fit (see scoped_vmem).
    """
    from .scoped_vmem import stalled_small_tile_kernels

    step = facts.step_ps
    small = {op.name for op, _ in stalled_small_tile_kernels(analysis)}
    cand = [op for op in analysis.kernel_ops if op.name not in small and op.roofline_fraction is not None]
    far = [op for op in cand if op.roofline_fraction < KERNEL_LOW_ROOFLINE]
    below = [op for op in cand if op.roofline_fraction < KERNEL_TUNED_ROOFLINE]
    low = below if sum(op.self_ps for op in below) / step >= KERNEL_DOMINANT_FRACTION else far
    total = sum(op.self_ps for op in low)
    if total / step < KERNEL_MIN_FRACTION:
        return []
    claims: dict[str, float] = {}
    for op in low:
        gain = op.self_ps * max(0.0, 1 - op.roofline_fraction / KERNEL_TARGET_ROOFLINE)
        claims[op.bucket] = claims.get(op.bucket, 0.0) + gain
    saving = sum(claims.values())
    return [
        self.finding(
            analysis,
            saving,
            [f"kernels below their roofline take {ms(total)} per step ({pct(total / step)})", *(op_line(op) for op in low[:6])],
            ["# tune-jax: search block sizes for these kernels, e.g. block_q / block_kv / block_kv_compute for splash",
             *(f"#   {op.name}" for op in low[:6])],
            [f"tuned kernels reach {KERNEL_TARGET_ROOFLINE:.0%} of their roofline (as the tuned splash kernels measured "
             "on TPU7x-like shapes do); the rest of the step is unchanged"],
            claims=Claim.buckets(claims),
        )
    ]


@rule("TK004", "tokamax", "Splash attention: estimate the max logit", fixtures=("dense_long_fsdp_cp", "attention_unfused"))
def max_logit_estimate(self, analysis, facts):
    """
    What it detects: splash attention forward kernels above 5% of the step.

    Why it costs time: the kernel computes a running max of the logits for a
    numerically safe softmax: extra reductions and synchronisation per block.

    What to change: set a constant max-logit estimate (MaxText
    `use_max_logits_estimate=<float>`), after checking the model's logit range
    (risk of overflow) and running a convergence test.
    """
    fwd = [op for op in analysis.kernel_ops if "kernel:splash" in op.tags and "fwd" in op.name.lower()]
    t = sum(op.self_ps for op in fwd)
    step = facts.step_ps
    if t / step < MAX_LOGIT_MIN_FRACTION:
        return []
    saving = t * MAX_LOGIT_SAVING
    return [
        self.finding(
            analysis,
            saving,
            [f"splash forward kernels: {ms(t)} per step ({pct(t / step)})", *(op_line(op) for op in fwd[:3])],
            ["use_max_logits_estimate=<max logit of your model, e.g. 30.0>  # check the logit range first"],
            [f"the max reduction is ~{MAX_LOGIT_SAVING:.0%} of splash forward time", "overflow risk: run a convergence test"],
            claims=[Claim.bucket("attention", saving)],
        )
    ]


RULES = (use_splash, use_megablox, tune_block_sizes, max_logit_estimate, attention_native_layout, state_copies,
         attention_block_sizes)
