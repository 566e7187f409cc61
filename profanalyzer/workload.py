"""Workload classification into the guide's table (L2), with its reasons:
an analysis fact (the findings stage and the rules both read it).

Signals, all from the Analysis:
  * MoE: Megablox grouped-matmul kernels, or ops / all-to-alls under
    expert/MoE name scopes (an all-to-all alone is not enough: embedding
    gradients also use one).
  * very large (pipeline): collective-permute / send-recv traffic between
    stages.
  * long sequence: attention is a large share of the step's model FLOPs
    (LONG_SEQ_ATTENTION_SHARE; FLOPs, not time, so a slow unfused attention
    does not look like a long sequence), or K/V all-gathers inside attention
    scopes (context parallelism).
"""

from __future__ import annotations

from profanalyzer.model import Analysis, WorkloadClass
from profanalyzer.vocab import COMPUTE_ORDER

LONG_SEQ_ATTENTION_SHARE = 0.40  # attention FLOPs / all compute FLOPs

TABLE = {
    ("dense", "short"): ("dense, short sequence", "FSDP", "—", "remat, FF matmuls"),
    ("dense", "long"): ("dense, long sequence", "FSDP", "CP", "flash attention, activation memory"),
    ("moe", "short"): ("MoE, short sequence", "FSDP + EP", "—", "all-to-all (expert routing), remat"),
    ("moe", "large"): ("MoE, very large", "FSDP + EP + PP", "model parallelism", "all of the above plus pipeline bubbles"),
}

_MOE_SCOPES = ("moe", "expert", "jit(gmm)", "jit(tgmm)", "megablox", "router")


def compute_ps(analysis: Analysis) -> float:
    b = analysis.breakdown
    return sum(b[k].ps for k in COMPUTE_ORDER)


def attention_share(analysis: Analysis) -> tuple[float, str]:
    """Attention's share of compute: by model FLOPs when the trace has FLOPs, else by time."""
    bo = analysis.bucket_ops
    flops = sum(bo[b].model_flops for b in COMPUTE_ORDER if b in bo)
    if flops > 0 and "attention" in bo:
        return bo["attention"].model_flops / flops, "model FLOPs"
    c = compute_ps(analysis)
    return (analysis.breakdown["attention"].ps / c if c > 0 else 0.0), "TensorCore compute time"


def cp_evidence(analysis: Analysis) -> bool:
    """Explicit context-parallel scopes in the name stacks of top ops or collectives.

    (All-gathers under attention scopes are not evidence: FSDP gathers the
    attention projection weights there too.)"""
    scopes = [op.tf_op.lower() for op in analysis.top_ops]
    scopes += [s.lower() for c in analysis.collectives.values() for s in c.tf_ops]
    return any("context_parallel" in s or "/cp/" in s for s in scopes)


def classify_workload(analysis: Analysis) -> WorkloadClass:
    reasons = []
    colls = analysis.collectives
    a2a = colls.get("all_to_all")
    moe = False
    if any("kernel:megablox_gmm" in op.tags for op in analysis.kernel_ops):
        moe = True
        reasons.append("Megablox grouped-matmul kernels present")
    if a2a is not None and a2a.count > 0 and any(any(s in x.lower() for s in _MOE_SCOPES) for x in a2a.tf_ops):
        moe = True
        reasons.append(f"all-to-all under expert/MoE scopes ({a2a.count:.0f} per step): expert routing")
    if not moe and any(any(s in op.tf_op.lower() for s in _MOE_SCOPES) for op in analysis.top_ops):
        moe = True
        reasons.append("top ops under expert / MoE name scopes")
    pipeline = any(t in colls and colls[t].count > 0 for t in ("collective_permute", "send_recv"))
    share, basis = attention_share(analysis)
    long_seq = share >= LONG_SEQ_ATTENTION_SHARE or cp_evidence(analysis)
    if share >= LONG_SEQ_ATTENTION_SHARE:
        reasons.append(f"attention is {share * 100:.0f}% of {basis} (>= {LONG_SEQ_ATTENTION_SHARE * 100:.0f}%): long sequence")
    elif cp_evidence(analysis):
        reasons.append("all-gathers inside attention scopes: context parallelism, long sequence")
    else:
        reasons.append(f"attention is {share * 100:.0f}% of {basis}: short sequence")
    if moe and pipeline:
        key = ("moe", "large")
        reasons.append("collective-permute / send-recv between pipeline stages: pipeline parallelism")
    elif moe:
        key = ("moe", "short")
    else:
        key = ("dense", "long" if long_seq else "short")
    if not moe:
        reasons.insert(0, "no expert kernels, expert-scoped ops or expert all-to-alls: dense model")
    row, primary, secondary, bottleneck = TABLE[key]
    return WorkloadClass(
        kind=key[0],
        sequence=("long" if long_seq else "short"),
        row=row,
        primary_sharding=primary,
        secondary_sharding=secondary,
        main_bottleneck=bottleneck,
        reasons=tuple(reasons),
    )
