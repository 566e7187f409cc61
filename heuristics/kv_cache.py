"""Lever L1 — low precision (`fp8`): a decode step's KV cache read at 16 bits
every step, to store in 8 (its own module: it reads the program's decode-cache
summary, evidence a capture without HLO lacks)."""

from __future__ import annotations

from profanalyzer.findings.rules import rule
from profanalyzer.model.findings import Claim

from ._util import ms, pct

#: Attention over the KV cache: share of the step worth halving.
MIN_FRACTION = 0.10
#: Element types a cache can halve by going to 8 bits.
WIDE = ("bf16", "f16")


@rule("FP005", "fp8", "The KV cache is read at 16 bits every decode step: store it in 8",
      fixtures=("real-tpu/decode_mha_bf16", "real-tpu/train_remat_none"))
def kv_cache_8bit(self, analysis, facts):
    """
    What it detects: a decode step whose attention over its KV cache (the
    contractions of a buffer the step updates one position at a time) takes
    10% of the step or more, on a 16-bit cache.

    Why it costs time: each decode step reads the whole cache from HBM to
    attend one new token: its time is the cache's bytes over the bandwidth
    it reaches. An 8-bit cache (int8 on v5e, v5p and v6e; FP8 on TPU7x) moves
    half the bytes.

    What to change: store K and V in 8 bits with per-head (or per-token)
    scales and dequantize in the attention (vLLM `kv_cache_dtype`, MaxText
    `quantize_kvcache=True` with `kv_quant_dtype`); a ragged / paged decode
    attention kernel reads the cache nearer to the HBM peak than the
    compiler's fusions.
    """
    kv = analysis.decode_cache
    step = facts.step_ps
    if kv is None or kv.ps / step < MIN_FRACTION or not set(kv.dtypes) <= set(WIDE):
        return []
    lever = analysis.hardware.low_precision_lever or "int8"
    dtype = "float8_e4m3fn" if lever == "fp8" else "int8"
    peak = analysis.hardware.per_core.hbm_gbps
    saving = 0.5 * kv.ps
    evidence = [
        f"attention over the KV cache: {ms(kv.ps)} per step ({pct(kv.ps / step)}) over {kv.contractions} "
        f"contraction ops",
        f"the cache ({', '.join(kv.dtypes)}) read per step: {kv.bytes_per_step / 1e9:.2f} GB"
        + (f", faster than HBM delivers it ({kv.gbps:.0f} GB/s over the contractions' time, above the HBM peak "
           f"{peak:.0f} GB/s): they read copies other ops staged in VMEM, overlapped"
           if kv.staged else f", at {kv.gbps:.0f} GB/s ({kv.gbps / peak:.0%} of the HBM peak {peak:.0f} GB/s)"),
    ]
    kernel = any(op.bucket == "attention" for op in analysis.kernel_ops)
    att_ps = analysis.bucket_ops["attention"].ps if "attention" in analysis.bucket_ops else 0.0
    claims = {"attention": min(saving, att_ps)}
    if saving > att_ps:
        claims["other_compute"] = saving - att_ps
    return [self.finding(
        analysis, saving, evidence,
        [f"quantize_kvcache=True kv_quant_dtype={lever}",
         f"# K and V stored as {dtype} with per-head scales, dequantized in the attention; check quality on an "
         "eval set", *([] if kernel else ["# a ragged / paged decode attention kernel reads the cache nearer the "
                                          "HBM peak"])],
        ["the attention over the cache stays HBM-bound at the bandwidth it reaches today: half the bytes, half "
         "its time", "no credit for a faster decode kernel (it would add to the saving)"],
        claims=Claim.buckets(claims))]


RULES = (kv_cache_8bit,)
