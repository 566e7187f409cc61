"""Lever L6 — Tokamax kernels (`tokamax`): fused attention kernels far below
the MXU peak, their block sizes to tune (its own module: it reads the
program's attention-kernel work, evidence a capture without HLO lacks)."""

from __future__ import annotations

from profanalyzer.findings.rules import rule
from profanalyzer.model.findings import Claim

from ._util import ms, pct

#: A kernel whose rate is surely under this share of the BF16 peak runs far below its roofline.
FAR_BELOW_PEAK = 0.35
#: The share of the BF16 peak tuned attention kernels are assumed to reach (as TK003's target).
TUNED_PEAK_FRACTION = 0.66
#: Kernels far below the peak worth a block-size search: share of the step.
MIN_FRACTION = 0.03


@rule("TK007", "tokamax", "Attention kernels far below the MXU peak: tune their block sizes",
      fixtures=("real-tpu/long_splash_b128", "real-tpu/long_splash_b512"))
def attention_block_sizes(self, analysis, facts):
    """
    What it detects: fused attention kernels (splash / flash, forward and
    backward) whose FLOP rate is surely under 35% of the BF16 peak: their
    FLOPs come from their q/k/v shapes and the block pairs their mask
    computes (every pair, an upper bound, when the program does not carry
    the mask's values), over their measured time.

    Why it costs time: small blocks (128 x 128) keep the MXU idle between
    tiles and re-read K/V for every q block; the block sizes decide most of
    a splash kernel's speed. Measured on a TPU v5e: causal splash at seq 4096
    ran 2.1x faster end to end with 512 blocks than with 128.

    What to change: larger blocks: splash `BlockSizes(block_q, block_kv,
    block_kv_compute, and the _dkv / _dq blocks)` of 512 or more, as far as
    VMEM holds them (MaxText `sa_block_q`, `sa_block_kv`,
    `sa_block_kv_compute`, `sa_block_q_dkv`, `sa_block_kv_dkv`,
    `sa_block_kv_dkv_compute`, `sa_block_q_dq`, `sa_block_kv_dq`); search
    them with tune-jax.
    """
    kernels = analysis.attention_kernels or ()
    peak = analysis.hardware.per_core.peak_bf16_tflops * 1e12
    step = facts.step_ps
    slow = []
    for k in kernels:
        if k.ps <= 0:
            continue
        runs = _runs(analysis, k.op)
        rate = k.flops_upper * runs / (k.ps * 1e-12)
        if rate < FAR_BELOW_PEAK * peak:
            slow.append((k, runs, rate))
    total = sum(k.ps for k, _, _ in slow)
    if total / step < MIN_FRACTION:
        return []
    saving = sum(max(0.0, k.ps - k.flops_upper * runs / (TUNED_PEAK_FRACTION * peak) * 1e12) for k, runs, _ in slow)
    blocks = sorted({f"{k.block_q}x{k.block_kv}" for k, _, _ in slow if k.block_q and k.block_kv})
    evidence = [f"{len(slow)} attention kernels run surely under {FAR_BELOW_PEAK:.0%} of the BF16 peak: {ms(total)} per "
                f"step ({pct(total / step)}); blocks {', '.join(blocks) or 'unknown'}"]
    for k, _runs_per_step, rate in sorted(slow, key=lambda x: -x[0].ps)[:4]:
        bound = "" if k.computed_fraction is not None else " at most (every pair counted: the mask's values are unknown)"
        evidence.append(f"{k.op} ({k.half}, Sq {k.seq_q}, Skv {k.seq_kv}, D {k.head_dim}): {ms(k.ps)} per step, "
                        f"{rate / 1e12:.1f} TFLOP/s{bound}, {rate / peak:.0%} of the peak")
    return [self.finding(
        analysis, saving, evidence,
        ["sa_block_q=512 sa_block_kv=512 sa_block_kv_compute=512 sa_block_q_dkv=512 sa_block_kv_dkv=512 "
         "sa_block_kv_dkv_compute=512 sa_block_q_dq=512 sa_block_kv_dq=512",
         "# JAX: splash_attention.BlockSizes(...) with 512 (or larger, as VMEM allows); search them with tune-jax"],
        [f"tuned kernels reach {TUNED_PEAK_FRACTION:.0%} of the BF16 peak on the FLOPs counted (every pair when the mask's "
         "values are unknown: the estimate then understates the saving)", "the rest of the step is unchanged"],
        claims=[Claim.bucket("attention", saving)])]


def _runs(analysis, name: str) -> float:
    """Runs per step of a kernel op (its top-op row's count), 1 when not listed."""
    for op in (*analysis.kernel_ops, *analysis.top_ops):
        if op.name == name:
            return max(1.0, float(op.count))
    return 1.0


RULES = (attention_block_sizes,)
