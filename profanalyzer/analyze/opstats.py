"""Per-op statistics of the kept steps, as records: the top ops with their
roofline, per-bucket summaries, MFU / MXU use, host-offload traffic and the
run-kind evidence (analysis stage; numpy inside, records out).

The op groups they are made of (self time, FLOPs, bytes per (name, HLO
category, bucket), unrolled repeats folded into families) come from
`profanalyzer.analyze.opgroups`. MFU says how much of the compute time has
known FLOPs (`flops_coverage`). Cost: numpy over the op groups (columns), so
traces with tens of thousands of distinct ops stay cheap; float sums add in
the order a loop over the groups would, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from profanalyzer.analyze.opfamilies import families
from profanalyzer.analyze.opgroups import (
    OpGroup,
    OpGroups,
    by_time,
    core_peak,
    group_ops,
    seq_sum,
)
from profanalyzer.analyze.runkind import (
    RunKindEvidence,
    decide_run_kind,
    inference_marker,
    inference_markers,
)
from profanalyzer.classify import async_pair_key
from profanalyzer.core.vocab import (
    ATTENTION_SPLIT,
    BUCKETS,
    COLLECTIVE_BUCKETS,
    COMPUTE_BUCKETS,
    MATMUL_BUCKETS,
)
from profanalyzer.model.analysis import BucketOps, TopOp, Utilisation
from profanalyzer.model.parts import HostOffloadSummary, RunKind
from profanalyzer.model.trace import LINE_MODULES, Trace

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

REMAT_TOP = 15
KERNELS_TOP = 20
#: An op's achieved rates (TFLOP/s, GB/s, share of its roofline) need at
#: least this much self time per run (1 us): below it the duration is a
#: launch (an async copy-start) or a few ticks of the profiler's timestamps,
#: and FLOPs or bytes over it are not a rate (0.000 ms copy-starts at
#: hundreds of millions of GB/s). Such ops show no rate.
RATE_MIN_RUN_PS = 1_000_000
#: Below this share of compute time with known FLOPs, MFU is marked low-confidence.
FLOPS_COVERAGE_MIN = 0.9

@dataclass(frozen=True)
class OpsResult:
    top: tuple[TopOp, ...]
    remat: tuple[TopOp, ...]
    kernels: tuple[TopOp, ...]
    buckets: Mapping[str, BucketOps]
    host_offload: HostOffloadSummary | None = None
    groups: OpGroups | tuple[OpGroup, ...] = ()  # most time first


def ops_and_roofline(att: Attributed, top_n: int) -> tuple[OpsResult, Utilisation]:
    """Per-op self time, FLOPs and bytes over the kept steps of every
    TensorCore, grouped by (name, HLO category, bucket); MFU and MXU use."""
    trace, work, kept_steps, step_mean = att.trace, att.work, att.kept_steps, att.step_mean
    chip = trace.chip
    kept_list = np.asarray(sorted(kept_steps), dtype=np.int64)
    acc: dict = {"mf_model": 0.0, "mf_flops": 0.0, "any_model": False, "any_flops": False, "hw_flops": 0.0,
                 "mm_self": 0, "mm_cap": 0.0, "mm_flops": 0.0}
    groups, n_core_steps = group_ops(trace, work, kept_list, chip, acc, att.memo, att.kernel_bytes)
    n_core_steps = n_core_steps or 1
    if not len(groups):
        return OpsResult((), (), (), {}), Utilisation(None, "none", None)
    agg = groups.take(by_time(groups.self_ps, groups.name))
    util = _utilisation(agg, acc, chip, step_mean, n_core_steps)
    denom = step_mean if step_mean > 0 else 1.0
    ctx = (chip, n_core_steps, denom)
    fam = families(agg)
    top = tuple(_top_op(fam.group(i), *ctx) for i in range(len(fam))[:top_n])
    remat_ops = tuple(_top_op(fam.group(i), *ctx) for i in np.flatnonzero(fam.remat)[:REMAT_TOP].tolist())
    kern: list[int] = []
    for i, k in enumerate(fam.kernel):
        if len(kern) >= KERNELS_TOP:
            break
        if k is not None and str(k) != "":
            kern.append(i)
    kernels = tuple(_top_op(fam.group(i), *ctx) for i in kern)
    summaries = _bucket_summaries(agg, n_core_steps, denom, chip)
    host = host_offload_summary([agg.group(i) for i, b in enumerate(agg.bucket) if b == "host_offload"], n_core_steps, denom)
    return OpsResult(top, remat_ops, kernels, summaries, host, agg), util


def _in(values: list, allowed) -> np.ndarray:
    """Per value: in `allowed` (one test per distinct value)."""
    memo: dict = {}
    return np.fromiter((memo[v] if v in memo else memo.setdefault(v, v in allowed) for v in values), dtype=bool, count=len(values))


def _utilisation(agg: OpGroups, acc: dict, chip, step_mean: float, n_core_steps: int) -> Utilisation:
    """MFU over all kept steps and cores, with how much compute time its FLOPs cover."""
    total_time_s = step_mean * 1e-12 * n_core_steps
    if acc["any_model"]:
        mf, src = acc["mf_model"], "model_flops"
    elif acc["any_flops"]:
        mf, src = acc["mf_flops"], "flops"
    else:
        mf, src = 0.0, "none"
    compute_ps = int(agg.self_ps[_in(agg.bucket, COMPUTE_BUCKETS)].sum())
    unknown_ps = int(agg.self_ps[agg.flops_unknown].sum())
    coverage = (1.0 - unknown_ps / compute_ps) if compute_ps > 0 else None
    mfu = mf / (total_time_s * chip.core_peak_bf16_flops) if src != "none" and total_time_s > 0 else None
    if mfu is not None and not any(b in MATMUL_BUCKETS or b == "attention" for b in set(agg.bucket)):
        mfu = None  # no matmul and no attention: MFU says nothing about this loop
        src = "none (no matmul or attention in the step)"
    mxu = (acc["mm_flops"] / acc["mm_cap"] if acc["mm_cap"] > 0 else None) if acc["mm_self"] > 0 else None
    hfu = (acc.get("hw_flops", 0.0) / (total_time_s * chip.core_peak_bf16_flops)
           if mfu is not None and acc["any_flops"] and total_time_s > 0 else None)
    return Utilisation(mfu, src, mxu, flops_coverage=coverage,
                       low_confidence=bool(mfu is not None and coverage is not None and coverage < FLOPS_COVERAGE_MIN),
                       hfu=hfu)


def host_offload_summary(agg: list[OpGroup], n_core_steps: int, denom: float) -> HostOffloadSummary | None:
    """Host <-> HBM traffic of the host_offload ops per step and TensorCore.
    Bytes are counted once per transfer: on the done half (or a synchronous
    copy), never on the start that issues it."""
    ops = [g for g in agg if g.bucket == "host_offload"]
    if not ops:
        return None
    ps = sum(g.self_ps for g in ops) / n_core_steps
    done = [g for g in ops if (async_pair_key(g.name) or ("", "sync"))[1] != "start"]
    to_host = sum(g.tot_bytes for g in done if g.to_host) / n_core_steps
    from_host = sum(g.tot_bytes for g in done if not g.to_host) / n_core_steps
    total = to_host + from_host
    gbps = (total / (ps * 1e-12) / 1e9) if ps > 0 and total > 0 else None
    return HostOffloadSummary(ps=ps, fraction=ps / denom, bytes_per_step=total, to_host_bytes=to_host,
                              from_host_bytes=from_host, gbps=gbps, transfers=float(sum(g.count for g in done)) / n_core_steps)


def program_names(trace: Trace) -> tuple[str, ...]:
    """Programs on the first TensorCore's XLA Modules line, most time first."""
    for plane in trace.tensorcores:
        ln = plane.line(LINE_MODULES)
        if ln is None or not len(ln.events):
            continue
        tot: dict[str, int] = {}
        for r, d in zip(ln.events.meta.tolist(), ln.events.dur_ps.tolist(), strict=True):
            nm = plane.meta.name[r] if r >= 0 else ""
            tot[nm] = tot.get(nm, 0) + int(d)
        return tuple(sorted(tot, key=lambda k: (-tot[k], k)))
    return ()


def run_kind_of(agg: OpGroups | tuple[OpGroup, ...], step_ps: float, n_core_steps: int, phases: Mapping,
                remat_ps: float, programs: tuple[str, ...]) -> RunKind:
    """Training / inference / unknown from the op groups (see profanalyzer.analyze.runkind)."""
    g = agg if isinstance(agg, OpGroups) else OpGroups.of(agg)
    compute = _in(g.bucket, COMPUTE_BUCKETS)
    by_tf: dict = {}
    marks = [by_tf[tf] if tf in by_tf else by_tf.setdefault(tf, inference_marker(tf or "")) for tf in g.tf_op]
    need = [i for i, m in enumerate(marks) if not m]
    for i, m in zip(need, inference_markers([g.name[i] for i in need]), strict=True):  # one marker per name
        marks[i] = m
    sp = g.self_ps.astype(np.float64)
    marked = np.fromiter(map(bool, marks), dtype=bool, count=len(marks))  # a marker is None or a word
    kinds = list(dict.fromkeys(m for m in marks if m))
    if kinds:
        code = {m: k for k, m in enumerate(kinds)}
        mcode = np.fromiter((code.get(m, -1) for m in marks), dtype=np.int64, count=len(marks))
        markers = {m: seq_sum(sp[mcode == k]) for k, m in enumerate(kinds)}
    else:
        markers = {}
    scoped_tf: dict = {}
    scoped = np.fromiter((scoped_tf[t] if t in scoped_tf else scoped_tf.setdefault(t, bool((t or "").strip())) for t in g.tf_op),
                         dtype=bool, count=len(g))
    ev = RunKindEvidence(
        step_ps=step_ps,
        compute_ps=int(g.self_ps[compute].sum()) / n_core_steps,
        scoped_ps=int(g.self_ps[compute & scoped].sum()) / n_core_steps,
        forward_ps=phases["forward"].ps if "forward" in phases else 0.0,
        backward_ps=phases["backward"].ps if "backward" in phases else 0.0,
        optimizer_ps=phases["optimizer"].ps if "optimizer" in phases else 0.0,
        remat_ps=remat_ps,
        inference_ps=seq_sum(sp[marked]) / n_core_steps,
        inference_markers=tuple(sorted(markers, key=lambda k: (-markers[k], k))),
        programs=programs,
    )
    kind, reasons = decide_run_kind(ev)
    return RunKind(kind=kind, reasons=reasons)


def _top_op(r: OpGroup, chip, n_core_steps: int, denom: float) -> TopOp:
    # a rate needs a duration: none for ops whose runs last under RATE_MIN_RUN_PS on average
    timed = r.count > 0 and r.self_ps >= RATE_MIN_RUN_PS * r.count
    t_s = r.self_ps * 1e-12 if timed else 0.0
    has_f = r.flops == r.flops and r.flops is not None and r.flops > 0
    has_b = r.bytes == r.bytes and r.bytes is not None and r.bytes > 0
    intensity = (r.flops / r.bytes) if has_f and has_b else None
    tflops = (r.tot_flops / t_s / 1e12) if has_f and t_s > 0 else None
    gbps = (r.tot_bytes / t_s / 1e9) if has_b and t_s > 0 else None
    peak = core_peak(chip, r.bucket, r.precision)
    bw = chip.core_hbm_bytes_per_s
    if intensity is not None:
        ridge = peak / bw
        bound = "compute" if intensity >= ridge else "hbm"
        attainable = min(peak, intensity * bw)
        roof = (r.tot_flops / t_s) / attainable if t_s > 0 else None
    elif has_b and (r.flops == 0 or (not has_f and r.bucket not in MATMUL_BUCKETS and not r.kernel
                                       and r.bucket not in COLLECTIVE_BUCKETS)):
        # no arithmetic (a FLOP count of 0, or none for an op that is no matmul, kernel or collective: XProf
        # states FLOPs only where there are some), bytes moved: the memory roofline bounds it
        bound = "hbm"
        roof = (r.tot_bytes / t_s) / bw if t_s > 0 else None
    else:
        bound, roof = "unknown", None
    tags = []
    if r.remat:
        tags.append("remat")
    if isinstance(r.phase, str) and r.phase:
        tags.append(r.phase)
    if isinstance(r.kernel, str) and r.kernel:
        tags.append(f"kernel:{r.kernel}")
    if isinstance(r.precision, str) and r.precision:
        tags.append(f"precision:{r.precision}")
    if isinstance(r.part, str) and r.part == "layout":
        tags.append("attention:layout")
    if r.flops_unknown:
        tags.append("flops:unknown")
    mf = r.tot_model_flops
    return TopOp(
        name=r.name,
        hlo_category=r.hlo_category,
        bucket=r.bucket,
        tags=tuple(tags),
        tf_op=r.tf_op or "",
        reason=r.reason or "",
        self_ps=r.self_ps / n_core_steps,
        fraction=r.self_ps / n_core_steps / denom,
        count=r.count / n_core_steps,
        flops=float(r.flops) if has_f else None,
        bytes=float(r.bytes) if has_b else None,
        intensity=intensity,
        tflops_per_s=tflops,
        gbps=gbps,
        bound_by=bound,
        roofline_fraction=roof,
        deduplicated_name=r.dedup or "",
        model_flops_ratio=(float(mf) / r.tot_flops) if has_f and r.mf_known > 0 and r.tot_flops > 0 else None,
        output_bytes=float(r.out_bytes) if r.out_bytes == r.out_bytes else None,
    )


def _intensity(flops: float, nbytes: float) -> float:
    """FLOPs per byte; nan when either is unknown (or 0/0)."""
    if flops != flops or nbytes != nbytes or (nbytes == 0 and flops == 0):
        return math.nan
    if nbytes == 0:
        return math.copysign(math.inf, flops)
    return flops / nbytes


def _attention_part(g: OpGroup) -> str:
    if g.part == "decode":  # contractions over a KV cache (analyze.kvcache)
        return "attention_decode"
    if g.part == "layout":
        return "attention_layout"
    if g.part == "kernel" or (g.kernel is not None and str(g.kernel) != ""):
        return "attention_kernel"
    return "attention_unfused"


def _intensities(flops: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """_intensity of each (flops, bytes) pair."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = flops / nbytes
    zero_b = nbytes == 0
    out = np.where(zero_b, np.copysign(np.inf, flops), out)
    return np.where(np.isnan(flops) | np.isnan(nbytes) | (zero_b & (flops == 0)), math.nan, out)


def _bucket_summaries(agg: OpGroups, n_core_steps: int, denom: float, chip) -> dict:
    """Per bucket (and attention split into kernel / layout / unfused): time,
    FLOPs, bytes, compute- vs HBM-bound time, per step per TensorCore."""
    names = [b for b in BUCKETS if b != "idle"] + list(ATTENTION_SPLIT)
    n = len(agg)
    peak = {b: core_peak(chip, b) / chip.core_hbm_bytes_per_s for b in set(agg.bucket)}
    ridge = np.fromiter((peak[b] for b in agg.bucket), dtype=np.float64, count=n)
    inten = _intensities(agg.flops, agg.bytes)
    compute_bound = inten >= ridge
    hbm_bound = ~compute_bound & ~np.isnan(inten)
    model = np.where(agg.mf_known > 0, agg.tot_model_flops, agg.tot_flops)
    code = {name: k for k, name in enumerate(names)}  # the names as integers: one integer test per name
    target = np.fromiter((code.get(b, -1) for b in agg.bucket), dtype=np.int64, count=n)
    part = np.full(n, -1, dtype=np.int64)
    for i in [i for i, b in enumerate(agg.bucket) if b == "attention"]:
        part[i] = code.get(_attention_part(agg.group(i)), -1)
    out = {}
    for k, name in enumerate(names):
        m = (target == k) | (part == k)
        ps = float(int(agg.self_ps[m].sum())) / n_core_steps
        out[name] = BucketOps(
            ps=ps,
            fraction=ps / denom,
            ops=int(m.sum()),
            flops=seq_sum(agg.tot_flops[m]) / n_core_steps,
            model_flops=seq_sum(model[m]) / n_core_steps,
            bytes=seq_sum(agg.tot_bytes[m]) / n_core_steps,
            compute_bound_ps=float(int(agg.self_ps[m & compute_bound].sum())) / n_core_steps,
            hbm_bound_ps=float(int(agg.self_ps[m & hbm_bound].sum())) / n_core_steps,
            remat_ps=float(int(agg.self_ps[m & agg.remat].sum())) / n_core_steps,
        )
    return out
