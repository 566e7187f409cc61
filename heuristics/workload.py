"""Workload classification into the guide's table (L2), with its reasons.

Signals, all from the Analysis:
  * MoE: all-to-all collectives present, Megablox grouped-matmul kernels, or
    ops under expert/MoE name scopes among the top ops.
  * very large (pipeline): collective-permute / send-recv traffic between
    stages.
  * long sequence: attention is a large share of TensorCore compute
    (LONG_SEQ_ATTENTION_SHARE), or K/V all-gathers inside attention scopes
    (context parallelism).
"""

from __future__ import annotations

from profanalyzer.findings import WorkloadClass

LONG_SEQ_ATTENTION_SHARE = 0.30  # attention / (matmul + attention + other compute)

TABLE = {
    ("dense", "short"): ("dense, short sequence", "FSDP", "—", "remat, FF matmuls"),
    ("dense", "long"): ("dense, long sequence", "FSDP", "CP", "flash attention, activation memory"),
    ("moe", "short"): ("MoE, short sequence", "FSDP + EP", "—", "all-to-all (expert routing), remat"),
    ("moe", "large"): ("MoE, very large", "FSDP + EP + PP", "model parallelism", "all of the above plus pipeline bubbles"),
}

_MOE_SCOPES = ("moe", "expert", "jit(gmm)", "jit(tgmm)", "megablox")


def compute_ps(analysis) -> float:
    b = analysis.breakdown
    return sum(b[k].ps for k in ("matmul_bf16", "matmul_fp8", "matmul_other", "attention", "other_compute"))


def attention_share(analysis) -> float:
    c = compute_ps(analysis)
    return analysis.breakdown["attention"].ps / c if c > 0 else 0.0


def cp_evidence(analysis) -> bool:
    """All-gathers issued from attention scopes: K/V gathered across a CP group."""
    for w in analysis.communication.top_exposed:
        if w.type == "all_gather" and "attention" in w.tf_op.lower():
            return True
    return any("context_parallel" in op.tf_op.lower() or "/cp/" in op.tf_op.lower() for op in analysis.top_ops)


def classify_workload(analysis) -> WorkloadClass:
    reasons = []
    colls = analysis.collectives
    a2a = colls.get("all_to_all")
    moe = False
    if a2a is not None and a2a.count > 0:
        moe = True
        reasons.append(f"all-to-all collectives present ({a2a.count:.0f} per step): expert routing")
    if any("kernel:megablox_gmm" in op.tags for op in analysis.kernel_ops):
        moe = True
        reasons.append("Megablox grouped-matmul kernels present")
    elif any(any(s in op.tf_op.lower() for s in _MOE_SCOPES) for op in analysis.top_ops):
        moe = True
        reasons.append("top ops under expert / MoE name scopes")
    pipeline = any(t in colls and colls[t].count > 0 for t in ("collective_permute", "send_recv"))
    share = attention_share(analysis)
    long_seq = share >= LONG_SEQ_ATTENTION_SHARE or cp_evidence(analysis)
    if share >= LONG_SEQ_ATTENTION_SHARE:
        reasons.append(f"attention is {share * 100:.0f}% of TensorCore compute (>= {LONG_SEQ_ATTENTION_SHARE * 100:.0f}%): long sequence")
    elif cp_evidence(analysis):
        reasons.append("all-gathers inside attention scopes: context parallelism, long sequence")
    else:
        reasons.append(f"attention is {share * 100:.0f}% of TensorCore compute: short sequence")
    if moe and pipeline:
        key = ("moe", "large")
        reasons.append("collective-permute / send-recv between pipeline stages: pipeline parallelism")
    elif moe:
        key = ("moe", "short")
    else:
        key = ("dense", "long" if long_seq else "short")
    if not moe:
        reasons.insert(0, "no all-to-all and no expert kernels: dense model")
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
