"""Lever L6 — Tokamax kernels (`tokamax`): splash attention, Megablox GMM,
tune-jax block sizes, max-logit estimate."""

from __future__ import annotations

from heuristics._util import ms, op_line, pct
from heuristics.workload import classify_workload
from profanalyzer.findings import rule

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
#: Kernels below this share of their roofline are worth a block-size search.
KERNEL_LOW_ROOFLINE = 0.35
KERNEL_TARGET_ROOFLINE = 0.60
KERNEL_MIN_FRACTION = 0.02
#: Softmax max-reduction share of splash forward time removed by a max-logit estimate.
MAX_LOGIT_SAVING = 0.04
MAX_LOGIT_MIN_FRACTION = 0.05

_EXPERT_SCOPES = ("moe", "expert", "mlp_block/wi", "/wi_", "/wo")


def splash_efficiency(analysis) -> tuple[float, str]:
    k = analysis.bucket_ops.get("attention_kernel")
    if k is not None and k.ps > 0 and k.flops > 0:
        eff = k.flops / (k.ps * 1e-12) / (analysis.chip["per_core"]["peak_bf16_tflops"] * 1e12)
        if 0.05 < eff <= 1.0:
            return eff, f"measured efficiency of this trace's attention kernels: {eff:.0%} of BF16 peak"
    return DEFAULT_SPLASH_EFFICIENCY, f"assumed splash attention efficiency {DEFAULT_SPLASH_EFFICIENCY:.0%} of BF16 peak"


@rule("TK001", "tokamax", "Unfused attention: use splash attention", fixtures=("attention_unfused", "attention_splash"))
def use_splash(self, analysis):
    """
    What it detects: attention computed as plain dots and softmax fusions
    (no attention kernel) above 3% of the step.

    Why it costs time: standard attention writes the score matrix to HBM and
    reads it back for softmax and the second dot: HBM-bound and quadratic in
    sequence length. Splash attention keeps tiles in VMEM and skips masked
    blocks.

    What to change: use the splash attention kernel (MaxText
    `attention=flash`, which selects splash on TPU).
    """
    un = analysis.bucket_ops.get("attention_unfused")
    if un is None or un.fraction < UNFUSED_MIN_FRACTION:
        return []
    eff, how = splash_efficiency(analysis)
    peak = analysis.chip["per_core"]["peak_bf16_tflops"] * 1e12
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
            claims={"bucket:attention": saving},
        )
    ]


@rule("TK002", "tokamax", "MoE experts as padded dense matmuls: use Megablox GMM", fixtures=("moe_dense_padded", "moe_short_fsdp_ep"))
def use_megablox(self, analysis):
    """
    What it detects: a MoE workload whose expert matmuls run as dense dots
    (no Megablox grouped-matmul kernel), with the padding measured from
    model FLOPs vs executed FLOPs.

    Why it costs time: padding every expert's token group to a fixed capacity
    spends MXU time on zeros and moves padded activations through HBM.

    What to change: use Megablox grouped matmul (MaxText `sparse_matmul=true`,
    `megablox=true`), which computes ragged token groups without padding.
    """
    wl = classify_workload(analysis)
    if wl.kind != "moe" or any("kernel:megablox_gmm" in op.tags for op in analysis.kernel_ops):
        return []
    expert = [
        op for op in analysis.top_ops
        if op.bucket.startswith("matmul") and any(s in op.tf_op.lower() for s in _EXPERT_SCOPES)
    ]
    t = sum(op.self_ps for op in expert)
    if t / (analysis.steps.step_time_ps["mean"] or 1) < MOE_DENSE_MIN_FRACTION:
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
            claims={"bucket:matmul_bf16": saving},
        )
    ]


@rule("TK003", "tokamax", "Kernels far below their roofline: tune block sizes", fixtures=("small_tiles", "tuned_vmem"))
def tune_block_sizes(self, analysis):
    """
    What it detects: Pallas kernels (attention, grouped matmul, custom) that
    reach less than 35% of their roofline while taking over 2% of the step.

    Why it costs time: default kernel block sizes are often not optimal for
    the shapes and chip; poor tiles stall on memory or under-fill the MXU.

    What to change: run tune-jax's block-size search for these kernels and
    pin the winning block sizes; raise scoped VMEM first if the best tiles do
    not fit (see scoped_vmem).
    """
    step = analysis.steps.step_time_ps["mean"] or 1
    low = [op for op in analysis.kernel_ops if op.roofline_fraction is not None and op.roofline_fraction < KERNEL_LOW_ROOFLINE and op.self_ps / step >= KERNEL_MIN_FRACTION / 4]
    total = sum(op.self_ps for op in low)
    if total / step < KERNEL_MIN_FRACTION:
        return []
    saving = sum(op.self_ps * (1 - op.roofline_fraction / KERNEL_TARGET_ROOFLINE) for op in low)
    claims = {}
    for op in low:
        key = f"bucket:{op.bucket}"
        claims[key] = claims.get(key, 0.0) + op.self_ps * (1 - op.roofline_fraction / KERNEL_TARGET_ROOFLINE)
    return [
        self.finding(
            analysis,
            saving,
            [op_line(op) for op in low[:6]],
            ["# tune-jax: search block sizes for these kernels, e.g. block_q / block_kv / block_kv_compute for splash",
             *(f"#   {op.name}" for op in low[:6])],
            [f"tuned kernels reach {KERNEL_TARGET_ROOFLINE:.0%} of their roofline"],
            claims=claims,
        )
    ]


@rule("TK004", "tokamax", "Splash attention: estimate the max logit", fixtures=("dense_long_fsdp_cp", "attention_unfused"))
def max_logit_estimate(self, analysis):
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
    step = analysis.steps.step_time_ps["mean"] or 1
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
            claims={"bucket:attention": saving},
        )
    ]


RULES = (use_splash, use_megablox, tune_block_sizes, max_logit_estimate)
