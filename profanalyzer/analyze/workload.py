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

from profanalyzer.core.vocab import COMPUTE_ORDER, MATMUL_BUCKETS
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.findings import WorkloadClass

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


#: Below this share of compute time with known FLOPs, shares are measured in time.
FLOPS_COVERAGE_MIN = 0.9


def attention_share(analysis: Analysis) -> tuple[float, str]:
    """Attention's share of compute: by model FLOPs when the trace has the
    FLOPs of (nearly) all compute, else by time (an attention kernel without
    a FLOPs stat would otherwise read as no attention at all)."""
    bo = analysis.bucket_ops
    flops = sum(bo[b].model_flops for b in COMPUTE_ORDER if b in bo)
    coverage = analysis.utilisation.flops_coverage
    if flops > 0 and "attention" in bo and (coverage is None or coverage >= FLOPS_COVERAGE_MIN):
        return bo["attention"].model_flops / flops, "model FLOPs"
    c = compute_ps(analysis)
    basis = "TensorCore compute time" + (" (FLOPs missing for part of the compute)" if flops > 0 else "")
    return (analysis.breakdown["attention"].ps / c if c > 0 else 0.0), basis


def cp_evidence(analysis: Analysis) -> bool:
    """Explicit context-parallel scopes in the name stacks of top ops or collectives.

    (All-gathers under attention scopes are not evidence: FSDP gathers the
    attention projection weights there too.)"""
    scopes = [op.tf_op.lower() for op in analysis.top_ops]
    scopes += [s.lower() for c in analysis.collectives.values() for s in c.tf_ops]
    return any("context_parallel" in s or "/cp/" in s for s in scopes)


def run_kind(analysis: Analysis) -> tuple[str, tuple[str, ...]]:
    rk = analysis.run_kind
    if rk is None:  # a document saved before run kinds existed
        return "unknown", ("the analysis carries no run kind",)
    return rk.kind, tuple(rk.reasons)


#: Shares of the step a serving verdict names (largest first).
SERVING_TOP = 3


def tensor_parallel(analysis: Analysis) -> str:
    """Why the all-reduces look like tensor parallelism, or ''."""
    ar = analysis.collectives.get("all_reduce")
    if ar is None or ar.count <= 0:
        return ""
    scopes = " ".join(ar.tf_ops).lower()
    if "rowparallel" in scopes.replace("_", "") or "psum" in scopes:
        return f"{ar.count:.0f} all-reduces per step under row-parallel / psum scopes"
    if ar.critical_path_ps >= 0.5 * ar.exposed_ps > 0:
        return f"{ar.count:.0f} all-reduces per step, each consuming the op right before it"
    return ""


def _serving_class(analysis: Analysis, kind: str, reasons: list[str], rk_reasons: tuple[str, ...]) -> WorkloadClass:
    """The serving verdict: what dominates the step and which parallelism it uses."""
    b = analysis.breakdown
    top = sorted((k for k in b if k != "idle"), key=lambda k: -b[k].fraction)[:SERVING_TOP]
    dominant = ", ".join(f"{k} {b[k].fraction:.0%}" for k in top if b[k].fraction > 0)
    tp = tensor_parallel(analysis)
    a2a = analysis.collectives.get("all_to_all")
    if tp:
        primary = "tensor parallelism (TP)"
        reasons.append(f"tensor parallelism: {tp}")
    elif kind == "moe" and a2a is not None and a2a.count > 0:
        primary = "expert parallelism (EP)"
    elif any(c.count > 0 for c in analysis.collectives.values()):
        primary = "data / other parallelism (collectives present, kind not evident)"
    else:
        primary = "none visible (no collectives in the step)"
    secondary = "expert parallelism (EP)" if tp and kind == "moe" else "—"
    return WorkloadClass(
        kind=kind,
        sequence="n/a (inference)",
        row=f"inference step ({kind}): {dominant}" if dominant else f"inference step ({kind})",
        primary_sharding=primary,
        secondary_sharding=secondary,
        main_bottleneck=top[0] if top else "—",
        reasons=tuple(reasons),
        run_kind="inference",
        run_kind_reasons=rk_reasons,
    )


def classify_workload(analysis: Analysis) -> WorkloadClass:
    """The guide's workload row for a training step; a serving verdict for an
    inference step (the guide's table is about training)."""
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
    rk, rk_reasons = run_kind(analysis)
    model = [b for b, x in analysis.bucket_ops.items() if (b in MATMUL_BUCKETS or b == "attention") and x.ps > 0]
    if not model and not moe:
        # no matmul and no attention: no model's step (a loop of elementwise ops or transfers), dense or MoE
        other = max(((b, x.ps) for b, x in analysis.breakdown.items() if b != "idle"), key=lambda t: t[1],
                    default=("idle", 0.0))[0]
        return WorkloadClass(
            kind="no model", sequence="n/a", row=f"no model step: no matmul or attention in the step ({other} leads)",
            primary_sharding="—", secondary_sharding="—", main_bottleneck=other,
            reasons=("no matmul or attention time in the step: neither a dense nor an MoE model's step",),
            run_kind=rk, run_kind_reasons=rk_reasons)
    if rk == "inference":
        # the guide's short / long sequence split is about training steps
        reasons.append(f"attention is {share * 100:.0f}% of {basis}")
    elif share >= LONG_SEQ_ATTENTION_SHARE:
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
    if rk == "inference":
        return _serving_class(analysis, key[0], reasons, rk_reasons)
    if rk == "unknown":
        reasons.append("run kind unknown: the guide's (training) workload row is assumed")
    row, primary, secondary, bottleneck = TABLE[key]
    return WorkloadClass(
        kind=key[0],
        sequence=("long" if long_seq else "short"),
        row=row,
        primary_sharding=primary,
        secondary_sharding=secondary,
        main_bottleneck=bottleneck,
        reasons=tuple(reasons),
        run_kind=rk,
        run_kind_reasons=rk_reasons,
    )
