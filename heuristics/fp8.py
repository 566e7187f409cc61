"""Lever L1 — FP8 low-precision training (`fp8`), and its analogue on chips
whose MXU has no faster FP8: INT8 (v5e, v5p, v6e; MaxText's own guidance).

Each rule fires only on a chip that has its lever (`hardware.low_precision_lever`):
FP8 where the MXU runs FP8 faster than BF16 (TPU7x), INT8 where it runs INT8
faster (v5e, v5p, v6e); neither on v4."""

from __future__ import annotations

from profanalyzer.core.hardware import (
    FP8_GUIDE_TYPICAL_SPEEDUP,
    FP8_MEASURED_SPEEDUPS,
    FP8_RECIPES_SOURCE,
    fp8_measured_range,
)
from profanalyzer.findings.rules import rule
from profanalyzer.model.findings import Claim

from ._util import ms, op_line, pct
from .kv_cache import kv_cache_8bit

#: BF16 matmul share of the step worth converting.
BF16_MIN_FRACTION = 0.08
#: FP8 runs at 2x BF16 peak FLOPs and moves half the bytes; achieved MXU
#: efficiency at FP8 is assumed this fraction of the BF16 efficiency.
FP8_EFFICIENCY_RATIO = 0.92
#: Quantise/scale fusions FP8 adds, as a fraction of the converted matmul time.
QUANTISATION_OVERHEAD = 0.06


def fp8_saving(bf16_ps: float, flops: float = 0.0, fp8_peak_flops: float = 0.0, speedup: float = 2.0) -> float:
    """Time FP8 (or INT8) saves on `bf16_ps` of BF16 matmuls: `speedup` times
    the peak at FP8_EFFICIENCY_RATIO of today's efficiency, but never faster
    than their FLOPs at the low-precision peak (matmuls already above the BF16
    peak, e.g. quantized kernels, gain less), minus the quantisation fusions."""
    new = bf16_ps / (speedup * FP8_EFFICIENCY_RATIO)
    if flops > 0 and fp8_peak_flops > 0:
        new = max(new, flops / fp8_peak_flops * 1e12)
    return max(0.0, bf16_ps - new - QUANTISATION_OVERHEAD * bf16_ps)


def _fp8_peak(analysis) -> float:
    return analysis.hardware.per_core.peak_fp8_tflops * 1e12


def _has(analysis, lever: str) -> bool:
    """The chip's MXU has this low-precision lever (fp8 or int8)."""
    return analysis.hardware.low_precision_lever == lever


def _int8_peak(analysis) -> float:
    hw = analysis.hardware
    return hw.peak_int8_tops_per_chip * 1e12 / max(hw.planes_per_chip, 1)


def bounded_saving(facts, raw_ps: float, share: float) -> tuple[float, list[str]]:
    """The FP8 estimate and the assumptions that state its bound.

    The model (`fp8_saving`) speeds up only the BF16 matmuls, `share` of the
    step (Amdahl: the rest of the step is unchanged); the estimate is the
    model's, bounded by the fastest published Ironwood recipe. Both published
    figures are cited: the guide's typical gain and the recipes' measured
    range, and where this estimate falls against that range."""
    step = facts.step_ps
    cap = facts.fp8_cap_ps
    saving = min(raw_ps, cap)
    lo, hi = fp8_measured_range()

    def e2e(s: float) -> float:
        return step / max(step - s, 1e-9 * step)

    x = e2e(saving)
    where = "within" if lo - 5e-3 <= x <= hi + 5e-3 else ("below" if x < lo else "above")
    runs = ", ".join(f"{m.model} {m.speedup:.2f}x" for m in sorted(FP8_MEASURED_SPEEDUPS, key=lambda m: -m.speedup))
    out = [
        f"end to end {x:.2f}x: only the BF16 matmuls ({pct(share)} of the step) get faster, the rest of the step is "
        "unchanged (Amdahl)",
        f"published figures: the guide's typical FP8 vs BF16 gain on dense matmul-heavy work is 'up to "
        f"{FP8_GUIDE_TYPICAL_SPEEDUP}x'; Ironwood MaxText recipes measured {lo:.2f}x-{hi:.2f}x end to end, bf16 vs fp8_full "
        f"({runs}; {FP8_RECIPES_SOURCE}); this estimate is {where} that range"
        + (f" (only {pct(share)} of this step is BF16 matmul)" if where == "below" else ""),
    ]
    if raw_ps > cap:
        out.append(f"bounded by the fastest measured recipe, {hi:.2f}x end to end (at most {1 - 1 / hi:.0%} of the step; "
                   f"the matmul model alone says {ms(raw_ps)}, {e2e(raw_ps):.2f}x)")
    return saving, out


@rule("FP001", "fp8", "BF16 matmuls that FP8 would run at twice the peak", fixtures=("bf16_dense", "fp8_dense"))
def bf16_to_fp8(self, analysis, facts):
    """
    What it detects: matmul (convolution fusion) time in BF16 above 8% of the
    step, split into compute-bound and HBM-bound time.

    Why it costs time: TPU7x peaks at 4,614 FP8 TFLOP/s per chip, twice BF16;
    FP8 also halves the bytes a memory-bound matmul moves. Compute-bound
    matmuls gain from the FLOPs, memory-bound ones from the bytes; the rest
    of the step does not change (typical end-to-end gain on dense
    matmul-heavy work: up to 1.3x by the guide; published Ironwood recipes
    measured 1.12x-1.54x).

    What to change: train in FP8 with the guide's recipe: per-tensor scaling
    first (per-axis on quality/performance problems), dynamic scaling, E4M3
    for weights and activations in the forward pass, E5M2 for gradients,
    round-to-nearest-even; in MaxText `use_qwix_quantization=true
    quantization=fp8_full` (the first alone quantizes nothing).

    Quiet on chips whose MXU has no faster FP8 (v4, v5e, v5p, v6e).
    """
    mm = analysis.bucket_ops.get("matmul_bf16")
    if mm is None or mm.fraction < BF16_MIN_FRACTION or facts.serving or not _has(analysis, "fp8"):
        return []
    raw = fp8_saving(mm.ps, mm.flops, _fp8_peak(analysis))
    saving, bound = bounded_saving(facts, raw, mm.fraction)
    evidence = [
        f"BF16 matmuls: {ms(mm.ps)} per step ({pct(mm.fraction)} of the step) over {mm.ops} distinct ops",
        f"compute-bound {ms(mm.compute_bound_ps)}, HBM-bound {ms(mm.hbm_bound_ps)} "
        f"(against the BF16 ridge point {analysis.hardware.ridge_points_flop_per_byte.hbm_bf16:.0f} FLOP/byte)",
    ]
    if analysis.utilisation.mxu_matmul is not None:
        evidence.append(f"matmul MXU utilisation now {pct(analysis.utilisation.mxu_matmul)} of the precision's peak")
    evidence += [op_line(op) for op in analysis.top_ops if op.bucket == "matmul_bf16"][:4]
    actions = [
        "use_qwix_quantization=true quantization=fp8_full",
        "# recipe: per-tensor scaling (per-axis if quality/perf suffers), dynamic scaling, E4M3 (float8_e4m3fn) "
        "weights/activations forward, E5M2 (float8_e5m2) gradients, round-to-nearest-even",
    ]
    assumptions = [
        f"FP8 matmuls reach {FP8_EFFICIENCY_RATIO:.0%} of the BF16 matmuls' efficiency at twice the peak "
        "(compute-bound) or move half the bytes (HBM-bound): their time falls to ~54%",
        f"quantise/scale fusions add {QUANTISATION_OVERHEAD:.0%} of the converted time",
        *bound,
        "model quality holds with the recipe (check convergence)",
    ]
    return [self.finding(analysis, saving, evidence, actions, assumptions, claims=[Claim.bucket("matmul_bf16", saving)])]


def above_bf16_peak(analysis, mm) -> bool:
    """The bucket's measured FLOP rate is above the BF16 peak (2% for rounding): its ops do not run at BF16 on
    the MXU (narrower already), or their FLOP count or the chip is off: either way a BF16 -> narrower estimate
    from them has no footing."""
    if not (mm.flops > 0 and mm.ps > 0):
        return False
    return mm.flops / (mm.ps * 1e-12) > 1.02 * analysis.hardware.per_core.peak_bf16_tflops * 1e12


@rule("FP002", "fp8", "Serving matmuls on the BF16 MXU: quantize the activations to FP8", fixtures=("serving_tp2_w4", "dense_short_fsdp"))
def serve_fp8_activations(self, analysis, facts):
    """
    What it detects: in a serving (inference) step, matmuls that run on the
    MXU at BF16 (BF16 activations, including weight-only quantized kernels such
    as w4a16 / w8a16) above 8% of the step.

    Why it costs time: quantized weights shrink HBM traffic, but with BF16
    activations the MXU still runs at the BF16 peak; TPU7x runs FP8 at twice
    that (4,614 TFLOP/s per chip). FP8 also halves the bytes of activations
    and of a KV cache, which is what bounds batch size in serving.

    Quiet where the matmuls' measured rate is above the BF16 peak: its own
    evidence then says they do not run at BF16.

    What to change: serve with FP8 activations (w8a8 / w4a8 FP8 kernels, E4M3,
    per-tensor dynamic scaling to start, per-axis on quality problems), and
    keep the KV cache in FP8 where quality allows; verify accuracy on the
    serving eval set.
    """
    mm = analysis.bucket_ops.get("matmul_bf16")
    if mm is None or mm.fraction < BF16_MIN_FRACTION or not facts.serving or not _has(analysis, "fp8"):
        return []
    if above_bf16_peak(analysis, mm):
        # the premise (these run on the BF16 MXU) is contradicted by their own measured rate: no estimate to rank
        return []
    raw = fp8_saving(mm.ps, mm.flops, _fp8_peak(analysis))
    saving, bound = bounded_saving(facts, raw, mm.fraction)
    quant = [op for op in analysis.top_ops if op.bucket == "matmul_bf16" and any(t.startswith("precision:w") for t in op.tags)]
    evidence = [f"BF16-MXU matmuls: {ms(mm.ps)} per step ({pct(mm.fraction)} of the step) over {mm.ops} distinct ops"]
    if mm.flops > 0 and mm.ps > 0:
        rate = mm.flops / (mm.ps * 1e-12)
        bf16_peak = analysis.hardware.per_core.peak_bf16_tflops * 1e12
        above = (" -- above the physical peak: they run narrower than BF16 on the MXU, or the FLOP count or the "
                 "assumed chip is off; see the assumptions") if rate > bf16_peak else ""
        evidence.append(f"they run at {rate / 1e12:.0f} TFLOP/s per core ({rate / bf16_peak:.0%} of the BF16 peak{above}): "
                        "FP8 can at most reach the FP8 peak, which bounds the estimate")
    if quant:
        precs = sorted({t.split(":", 1)[1] for op in quant for t in op.tags if t.startswith("precision:w")})
        evidence.append(f"weight-only quantized kernels ({', '.join(precs)}): weights are narrow, activations BF16")
    evidence += [op_line(op) for op in analysis.top_ops if op.bucket == "matmul_bf16"][:3]
    actions = [
        "# serve the linear layers with FP8 activations: w8a8 / w4a8 FP8 kernels (E4M3), per-tensor dynamic scaling "
        "first (per-axis if quality suffers); KV cache in FP8 where quality allows",
    ]
    assumptions = [
        f"FP8 matmuls reach {FP8_EFFICIENCY_RATIO:.0%} of today's efficiency at twice the peak; quantising the "
        f"activations adds {QUANTISATION_OVERHEAD:.0%} of the converted time",
        *bound,
        "the recipes' figures are training steps; a serving step with the same matmul share gains alike",
        "serving accuracy holds with FP8 activations (check on an eval set)",
    ]
    return [self.finding(analysis, saving, evidence, actions, assumptions, claims=[Claim.bucket("matmul_bf16", saving)])]


@rule("FP003", "fp8", "BF16 matmuls that the INT8 MXU would run at twice the peak", fixtures=("bf16_dense@v6e", "bf16_dense"))
def bf16_to_int8(self, analysis, facts):
    """
    What it detects: on a chip whose MXU runs INT8 faster than BF16 and FP8
    no faster (v5e, v5p, v6e: published INT8 peaks twice the BF16 ones),
    BF16 matmul time above 8% of the step, training or serving.

    Why it costs time: the MXU runs int8 x int8 at twice the BF16 rate and
    int8 operands move half the bytes; FP8 gives nothing on these chips (its
    rate is BF16's, or the MXU has none), so INT8 is the low-precision lever
    (MaxText's own guidance: int8 on v6e and earlier, fp8_full on v7x).

    What to change: training: MaxText `use_qwix_quantization=true
    quantization=int8` (int8 weights and activations in the forward matmuls);
    serving: w8a8 int8 matmuls (per-channel weight scales, dynamic per-token
    activation scales), int8 KV cache where quality allows.
    """
    mm = analysis.bucket_ops.get("matmul_bf16")
    if mm is None or mm.fraction < BF16_MIN_FRACTION or not _has(analysis, "int8"):
        return []
    speedup = analysis.hardware.peak_int8_tops_per_chip / max(analysis.hardware.peak_bf16_tflops_per_chip, 1e-9)
    raw = fp8_saving(mm.ps, mm.flops, _int8_peak(analysis), speedup=speedup)
    saving, bound = bounded_saving(facts, raw, mm.fraction)
    hw = analysis.hardware
    evidence = [
        f"BF16 matmuls: {ms(mm.ps)} per step ({pct(mm.fraction)} of the step) over {mm.ops} distinct ops",
        f"{hw.name}: INT8 {hw.peak_int8_tops_per_chip:g} TOPS vs BF16 {hw.peak_bf16_tflops_per_chip:g} TFLOP/s per chip "
        f"({speedup:.1f}x); FP8 {'none on the MXU' if not hw.peak_fp8_tflops_per_chip else 'at the BF16 rate'} "
        f"({hw.source or 'the chip table'})",
        f"compute-bound {ms(mm.compute_bound_ps)}, HBM-bound {ms(mm.hbm_bound_ps)}",
    ]
    evidence += [op_line(op) for op in analysis.top_ops if op.bucket == "matmul_bf16"][:3]
    if facts.serving:
        actions = ["# serve the linear layers as w8a8 int8 matmuls: per-channel int8 weights, dynamic per-token "
                   "int8 activations (int32 accumulation); int8 KV cache where quality allows"]
    else:
        actions = ["use_qwix_quantization=true quantization=int8",
                   "# int8 weights and activations in the forward matmuls (MaxText's guidance on v6e and earlier; "
                   "fp8_full is TPU7x's)"]
    assumptions = [
        f"INT8 matmuls reach {FP8_EFFICIENCY_RATIO:.0%} of today's efficiency at {speedup:.1f}x the peak "
        f"(compute-bound) or move half the bytes (HBM-bound); quantising adds {QUANTISATION_OVERHEAD:.0%} of the "
        "converted time",
        *bound,
        "no published end-to-end INT8 step figure is in the tables: the bound is the fastest measured low-precision "
        "recipe (Ironwood fp8_full)",
        "model quality holds in int8 (check convergence / an eval set)",
    ]
    return [self.finding(analysis, saving, evidence, actions, assumptions, claims=[Claim.bucket("matmul_bf16", saving)])]


#: MXU passes of an f32 matmul at precision HIGHEST (bf16 x 6; HIGH is 3): ASSUMED, the trace does not
#: say which precision a dot asked for.
F32_PASSES = 6


@rule("FP004", "fp8", "F32 matmuls on the MXU: compute in BF16", fixtures=("real-tpu/train_f32", "real-tpu/train_remat_none"))
def f32_to_bf16(self, analysis, facts):
    """
    What it detects: matmuls (and attention contractions) whose operands are
    f32 above 8% of the step.

    Why it costs time: the MXU multiplies bf16; an f32 matmul at full
    precision runs as several bf16 passes (6 at HIGHEST, 3 at HIGH) and
    moves twice the bytes of bf16 operands. Measured on a TPU v5e training
    step: f32 matmuls made the step 3.5x slower than the same step in bf16.

    What to change: compute in bf16 (activations and the matmuls' operands;
    keep fp32 master weights and optimizer states, accumulate in f32 with
    preferred_element_type); in MaxText `dtype=bfloat16` with
    `weight_dtype=float32` and `matmul_precision=default`.
    """
    f32 = [op for op in analysis.top_ops if op.bucket in ("matmul_other", "attention")
           and "precision:f32" in op.tags]
    ps = sum(op.self_ps for op in f32)
    step = facts.step_ps
    if ps / step < BF16_MIN_FRACTION:
        return []
    compute = sum(op.self_ps for op in f32 if op.bound_by == "compute")
    saving = compute * (1 - 1 / F32_PASSES) + (ps - compute) * 0.5
    claims: dict[str, float] = {}
    for op in f32:
        part = op.self_ps * ((1 - 1 / F32_PASSES) if op.bound_by == "compute" else 0.5)
        claims[op.bucket] = claims.get(op.bucket, 0.0) + part
    evidence = [f"f32 matmuls and attention contractions: {ms(ps)} per step ({pct(ps / step)}), compute-bound "
                f"{ms(compute)}", *(op_line(op) for op in f32[:4])]
    return [self.finding(
        analysis, saving, evidence,
        ["dtype=bfloat16 weight_dtype=float32 matmul_precision=default",
         "# JAX: cast the matmul operands to bfloat16 (jnp.einsum(..., preferred_element_type=jnp.float32)); keep "
         "fp32 master weights and optimizer states"],
        [f"an f32 matmul at precision HIGHEST takes {F32_PASSES} bf16 MXU passes (ASSUMED: HIGH takes 3, and the "
         "trace does not say which): compute-bound ones fall to 1/6 of their time, HBM-bound ones to half (half the "
         "bytes)", "only the top ops' f32 contractions are counted; the rest of the step is unchanged",
         "model quality holds in bf16 compute with fp32 weights (the usual mixed-precision recipe)"],
        claims=Claim.buckets(claims))]


RULES = (bf16_to_fp8, serve_fp8_activations, bf16_to_int8, f32_to_bf16, kv_cache_8bit)
