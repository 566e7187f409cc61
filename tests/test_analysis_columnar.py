"""The vectorised analysis stage (opstats, scopes, idle, overlap) against
straightforward reference implementations: per-row Python loops over every
core's metadata rows, as the analysis ran before it grouped with numpy and
shared per-row features between the cores sharing a table (TableMemo).

Each changed function's result must equal the reference's exactly (floats
bit for bit: the vectorised sums add in the reference's order), on every
sample trace and, when present, the real captures in ../shared/real-traces/."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import SAMPLES, sample_names, sample_path
from realcap import REAL, V6E, VLLM

from profanalyzer.analyze import opstats as O
from profanalyzer.analyze.attributed import TableMemo
from profanalyzer.analyze.attribution import CoreWork, locate
from profanalyzer.analyze.critical import ADJACENT_PS, MAX_ADJACENT_OPS, critical_path
from profanalyzer.analyze.idle import (
    HOST_CALLBACK,
    HOST_DISPATCH,
    HOST_WAIT,
    PEER_WAIT,
    UNEXPLAINED,
    core_step_causes,
    idle_causes,
    row_kinds,
    union_intervals,
)
from profanalyzer.analyze.opfamilies import FAMILY_MIN, families
from profanalyzer.analyze.opgroups import (
    OpGroups,
    by_time,
    output_bytes,
)
from profanalyzer.analyze.opstats import (
    FLOPS_COVERAGE_MIN,
    KERNELS_TOP,
    REMAT_TOP,
    ops_and_roofline,
    run_kind_of,
)
from profanalyzer.analyze.overlap import (
    TYPES,
    Windows,
    analyze_overlap,
    windows_for_core,
)
from profanalyzer.analyze.runkind import (
    RunKindEvidence,
    decide_run_kind,
    inference_marker,
)
from profanalyzer.analyze.scopes import (
    MAX_DEPTH,
    MAX_ROWS,
    NO_SCOPE,
    collapse,
    fold_scope,
    scope_rollup,
)
from profanalyzer.classify import ROLE_CODES
from profanalyzer.core.vocab import (
    ATTENTION_SPLIT,
    BUCKETS,
    COLLECTIVE_BUCKETS,
    COMPUTE_BUCKETS,
    IDLE_CAUSES,
    MATMUL_BUCKETS,
)
from profanalyzer.model.analysis import BucketOps, TopOp, Utilisation
from profanalyzer.model.parts import RunKind, ScopeRow
from profanalyzer.model.trace import LINE_MODULES, LINE_OPS, Plane, Trace
from profanalyzer.read.trace import read_trace

BARRIER = re.compile(r"barrier", re.I)
OUTPUT_TO_HOST = re.compile(r"=\s*\(?[a-z0-9]+\[[^\]]*\]\{[^}]*S\(5\)\}")
NUMBER_SUFFIX = re.compile(r"\.\d+$")


def host_callback(text: str) -> bool:
    return HOST_CALLBACK.search(text) is not None


# ---------------------------------------------------------------------------
# Reference implementations: per-row loops, core by core
# ---------------------------------------------------------------------------

class RefGroup:
    """Accumulator of one (name, HLO category, bucket) op group over the
    kept steps of every TensorCore (analysis-internal)."""

    __slots__ = ("name", "hlo_category", "bucket", "self_ps", "count", "tot_flops", "tot_model_flops", "mf_known",
                 "tot_bytes", "flops", "bytes", "tf_op", "dedup", "remat", "phase", "kernel", "precision", "reason",
                 "part", "flops_unknown", "to_host", "out_bytes")

    def __init__(self, name: str, hlo_category: str, bucket: str) -> None:
        self.name, self.hlo_category, self.bucket = name, hlo_category, bucket
        self.self_ps = self.count = self.mf_known = 0
        self.tot_flops = self.tot_model_flops = self.tot_bytes = 0.0
        self.flops = self.bytes = math.nan
        self.tf_op = self.dedup = self.phase = self.kernel = self.precision = self.reason = self.part = None
        self.remat = self.flops_unknown = self.to_host = False
        self.out_bytes = math.nan


def ref_peak(chip, bucket: str, precision: str | None = None) -> float:
    if bucket == "matmul_fp8" or precision == "fp8":
        return chip.core_peak_fp8_flops
    if bucket == "matmul_int8":
        return chip.core_peak_int8_flops
    return chip.core_peak_bf16_flops


def ref_kept_rows(trace: Trace, w: CoreWork, kept_list: np.ndarray):
    """(rows, counts, self ps per row, number of kept steps) of a core's ops in its kept steps."""
    steps = trace.steps[w.plane.label]
    kept = np.isin(steps.number, kept_list)
    ln = w.plane.line(LINE_OPS)
    if ln is None or len(ln.events) == 0:
        return None, None, None, int(kept.sum())
    ev = ln.events
    ks, ke = steps.start_ps[kept], steps.end_ps[kept]
    order = np.argsort(ks)
    inside = locate(ks[order], ke[order], ev.start_ps)[1] & (ev.meta >= 0)
    if not inside.any():
        return None, None, None, int(kept.sum())
    r_in = ev.meta[inside].astype(np.int64)
    n = len(w.plane.meta)
    counts = np.bincount(r_in, minlength=n)
    # Exact: per-row sums stay far below 2**53 ps.
    self_sum = np.rint(np.bincount(r_in, weights=ev.self_ps[inside], minlength=n)).astype(np.int64)
    rows = np.flatnonzero(counts)
    return rows, counts[rows], self_sum[rows], int(kept.sum())


def ref_group_rows(w: CoreWork, chip, rows, counts, self_sum, groups: dict, acc: dict) -> None:
    """Add one core's kept rows to the op groups and the utilisation sums."""
    md = w.plane.meta
    cols = w.classes.columns
    bucket_c, remat_c, phase_c, kernel_c = cols["bucket"], cols["remat"], cols["phase"], cols["kernel"]
    precision_c, reason_c, part_c, shape_c = cols["precision"], cols["reason"], cols["attention_part"], cols["shape_flops"]
    for r, cnt, sp, f, mf, by in zip(rows.tolist(), counts.tolist(), self_sum.tolist(),
                                     md.flops[rows].tolist(), md.model_flops[rows].tolist(), md.bytes_accessed[rows].tolist(), strict=True):
        known = r < len(bucket_c)
        bucket = bucket_c[r] if known else "other_compute"
        unknown = False
        shape_b = cols.get("shape_bytes")
        if shape_b is not None and r < len(shape_b) and shape_b[r] and not (by > 0):
            by = float(shape_b[r])  # a kernel's bytes from the shapes its text prints
        if bucket in MATMUL_BUCKETS or bucket == "attention":
            # No FLOPs in the trace: no stat, or 0 with no model FLOPs (kernels)
            if not (f > 0) and not (mf > 0) and (bucket in MATMUL_BUCKETS or (known and kernel_c[r])):
                sf = shape_c[r] if known else None
                if sf:
                    f = mf = float(sf)
                else:
                    f, mf, unknown = math.nan, math.nan, True
        tot_f = (0.0 if f != f else f) * cnt
        remat = bool(known and remat_c[r])  # recomputed work is not the model's: out of MFU, in HFU
        if mf == mf:
            acc["any_model"] = True
            acc["mf_model"] += 0.0 if remat else mf * cnt
        else:
            acc["mf_model"] += 0.0 if remat else tot_f
        if f == f or mf == mf:  # executed work: at least the model work the op does
            acc["hw_flops"] += max(tot_f, mf * cnt) if mf == mf else tot_f
        if f == f:
            acc["any_flops"] = True
            acc["mf_flops"] += 0.0 if remat else tot_f
            if bucket in MATMUL_BUCKETS:
                acc["mm_self"] += sp
                acc["mm_cap"] += sp * 1e-12 * ref_peak(chip, bucket)
                acc["mm_flops"] += tot_f
        name, cat = md.short_name(r), md.category[r]
        g = groups.get((name, cat, bucket))
        if g is None:
            g = groups[(name, cat, bucket)] = RefGroup(name, cat, bucket)
            if bucket == "host_offload":
                g.to_host = bool(OUTPUT_TO_HOST.search(md.name[r][:4096]))
            if known and remat_c[r]:
                g.out_bytes = output_bytes(md.name[r])
        g.self_ps += sp
        g.count += cnt
        g.tot_flops += tot_f
        g.tot_bytes += (0.0 if by != by else by) * cnt
        g.flops_unknown = g.flops_unknown or unknown
        if mf == mf:
            g.tot_model_flops += mf * cnt
            g.mf_known += 1
        if f == f and not (f <= g.flops):
            g.flops = f
        if by == by and not (by <= g.bytes):
            g.bytes = by
        if known:
            g.remat = g.remat or bool(remat_c[r])
            for attr, v in (("phase", phase_c[r]), ("kernel", kernel_c[r]), ("precision", precision_c[r]),
                            ("reason", reason_c[r]), ("part", part_c[r])):
                if getattr(g, attr) is None and v is not None:
                    setattr(g, attr, v)
        if g.tf_op is None:
            g.tf_op = md.tf_op[r]
        if g.dedup is None:
            g.dedup = md.deduplicated_name[r]


def ref_families(agg: list[RefGroup]) -> list[RefGroup]:
    """The op groups with unrolled repeats of one op merged into one row
    (`name.*`, count and times summed), most time first."""
    by_key: dict[tuple, list[RefGroup]] = {}
    for g in agg:
        stem = NUMBER_SUFFIX.sub("", g.name)
        scoped = stem != g.name and bool((g.tf_op or "").strip())  # repeats share a framework scope
        key = (stem, g.hlo_category, g.bucket, g.tf_op, g.remat, g.kernel, g.precision, g.part) if scoped else (g.name, id(g))
        by_key.setdefault(key, []).append(g)
    out: list[RefGroup] = []
    for key, members in by_key.items():
        if len(members) < FAMILY_MIN:
            out.extend(members)
            continue
        first = members[0]
        f = RefGroup(f"{key[0]}.* ({len(members)} ops)", first.hlo_category, first.bucket)
        for attr in ("tf_op", "dedup", "remat", "phase", "kernel", "precision", "reason", "part", "to_host", "out_bytes"):
            setattr(f, attr, getattr(first, attr))
        for m in members:
            f.self_ps += m.self_ps
            f.count += m.count
            f.tot_flops += m.tot_flops
            f.tot_model_flops += m.tot_model_flops
            f.mf_known += m.mf_known
            f.tot_bytes += m.tot_bytes
            f.flops_unknown = f.flops_unknown or m.flops_unknown
        # per occurrence: the family's mean
        f.flops = f.tot_flops / f.count if f.count and any(m.flops == m.flops for m in members) else math.nan
        f.bytes = f.tot_bytes / f.count if f.count and any(m.bytes == m.bytes for m in members) else math.nan
        out.append(f)
    return sorted(out, key=lambda g: (-g.self_ps, g.name))


def ref_utilisation(agg: list[RefGroup], acc: dict, chip, step_mean: float, n_core_steps: int) -> Utilisation:
    """MFU over all kept steps and cores, with how much compute time its FLOPs cover."""
    total_time_s = step_mean * 1e-12 * n_core_steps
    if acc["any_model"]:
        mf, src = acc["mf_model"], "model_flops"
    elif acc["any_flops"]:
        mf, src = acc["mf_flops"], "flops"
    else:
        mf, src = 0.0, "none"
    compute_ps = sum(g.self_ps for g in agg if g.bucket in COMPUTE_BUCKETS)
    unknown_ps = sum(g.self_ps for g in agg if g.flops_unknown)
    coverage = (1.0 - unknown_ps / compute_ps) if compute_ps > 0 else None
    mfu = mf / (total_time_s * chip.core_peak_bf16_flops) if src != "none" and total_time_s > 0 else None
    if mfu is not None and not any(g.bucket in MATMUL_BUCKETS or g.bucket == "attention" for g in agg):
        mfu = None  # no matmul and no attention: MFU says nothing about this loop
        src = "none (no matmul or attention in the step)"
    mxu = (acc["mm_flops"] / acc["mm_cap"] if acc["mm_cap"] > 0 else None) if acc["mm_self"] > 0 else None
    hfu = (acc["hw_flops"] / (total_time_s * chip.core_peak_bf16_flops)
           if mfu is not None and acc["any_flops"] and total_time_s > 0 else None)
    return Utilisation(mfu, src, mxu, flops_coverage=coverage,
                       low_confidence=bool(mfu is not None and coverage is not None and coverage < FLOPS_COVERAGE_MIN),
                       hfu=hfu)


def ref_run_kind_of(agg: tuple[RefGroup, ...], step_ps: float, n_core_steps: int, phases: Mapping, remat_ps: float,
                programs: tuple[str, ...]) -> RunKind:
    """Training / inference / unknown from the op groups (see profanalyzer.analyze.runkind)."""
    compute = [g for g in agg if g.bucket in COMPUTE_BUCKETS]
    markers: dict[str, float] = {}
    marked_ps = 0.0
    for g in agg:
        m = inference_marker(g.tf_op or "") or inference_marker(g.name)
        if m:
            markers[m] = markers.get(m, 0.0) + g.self_ps
            marked_ps += g.self_ps
    ev = RunKindEvidence(
        step_ps=step_ps,
        compute_ps=sum(g.self_ps for g in compute) / n_core_steps,
        scoped_ps=sum(g.self_ps for g in compute if (g.tf_op or "").strip()) / n_core_steps,
        forward_ps=phases["forward"].ps if "forward" in phases else 0.0,
        backward_ps=phases["backward"].ps if "backward" in phases else 0.0,
        optimizer_ps=phases["optimizer"].ps if "optimizer" in phases else 0.0,
        remat_ps=remat_ps,
        inference_ps=marked_ps / n_core_steps,
        inference_markers=tuple(sorted(markers, key=lambda k: (-markers[k], k))),
        programs=programs,
    )
    kind, reasons = decide_run_kind(ev)
    return RunKind(kind=kind, reasons=reasons)


def ref_top_op(r: RefGroup, chip, n_core_steps: int, denom: float) -> TopOp:
    # no rate over runs shorter than 1 us on average (opstats.RATE_MIN_RUN_PS, issue 23)
    t_s = r.self_ps * 1e-12 if r.count > 0 and r.self_ps >= 1_000_000 * r.count else 0.0
    has_f = r.flops == r.flops and r.flops is not None and r.flops > 0
    has_b = r.bytes == r.bytes and r.bytes is not None and r.bytes > 0
    intensity = (r.flops / r.bytes) if has_f and has_b else None
    tflops = (r.tot_flops / t_s / 1e12) if has_f and t_s > 0 else None
    gbps = (r.tot_bytes / t_s / 1e9) if has_b and t_s > 0 else None
    peak = ref_peak(chip, r.bucket, r.precision)
    bw = chip.core_hbm_bytes_per_s
    if intensity is not None:
        ridge = peak / bw
        bound = "compute" if intensity >= ridge else "hbm"
        attainable = min(peak, intensity * bw)
        roof = (r.tot_flops / t_s) / attainable if t_s > 0 else None
    elif has_b and (r.flops == 0 or (not has_f and r.bucket not in MATMUL_BUCKETS and not r.kernel
                                       and r.bucket not in COLLECTIVE_BUCKETS)):  # a byte mover: HBM-bound (#32 item 9)
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


def ref_intensity(flops: float, nbytes: float) -> float:
    """FLOPs per byte; nan when either is unknown (or 0/0)."""
    if flops != flops or nbytes != nbytes or (nbytes == 0 and flops == 0):
        return math.nan
    if nbytes == 0:
        return math.copysign(math.inf, flops)
    return flops / nbytes


def ref_attention_part(g: RefGroup) -> str:
    if g.part == "layout":
        return "attention_layout"
    if g.part == "kernel" or (g.kernel is not None and str(g.kernel) != ""):
        return "attention_kernel"
    return "attention_unfused"


def ref_bucket_summaries(agg: list[RefGroup], n_core_steps: int, denom: float, chip) -> dict:
    """Per bucket (and attention split into kernel / layout / unfused): time,
    FLOPs, bytes, compute- vs HBM-bound time, per step per TensorCore."""
    names = [b for b in BUCKETS if b != "idle"] + list(ATTENTION_SPLIT)
    acc = {n: [0, 0, 0.0, 0.0, 0.0, 0, 0, 0] for n in names}  # ps, ops, flops, model, bytes, compute, hbm, remat
    for g in agg:
        inten = ref_intensity(g.flops, g.bytes)
        compute_bound = inten >= ref_peak(chip, g.bucket) / chip.core_hbm_bytes_per_s
        targets = [g.bucket] if g.bucket in acc else []
        if g.bucket == "attention":
            targets.append(ref_attention_part(g))
        for t in targets:
            a = acc[t]
            a[0] += g.self_ps
            a[1] += 1
            a[2] += g.tot_flops
            a[3] += g.tot_model_flops if g.mf_known > 0 else g.tot_flops
            a[4] += g.tot_bytes
            if compute_bound:
                a[5] += g.self_ps
            elif inten == inten:
                a[6] += g.self_ps
            if g.remat:
                a[7] += g.self_ps
    out = {}
    for name in names:
        ps_, ops, flops, model, nbytes, cb, hb, rm = acc[name]
        ps = float(ps_) / n_core_steps
        out[name] = BucketOps(
            ps=ps,
            fraction=ps / denom,
            ops=int(ops),
            flops=float(flops) / n_core_steps,
            model_flops=float(model) / n_core_steps,
            bytes=float(nbytes) / n_core_steps,
            compute_bound_ps=float(cb) / n_core_steps,
            hbm_bound_ps=float(hb) / n_core_steps,
            remat_ps=float(rm) / n_core_steps,
        )
    return out


def ref_ops_and_roofline(trace: Trace, work: list[CoreWork], kept_steps: set[int], step_mean: float,
                     top_n: int) -> tuple[O.OpsResult, Utilisation]:
    """Per-op self time, FLOPs and bytes over the kept steps of every
    TensorCore, grouped by (name, HLO category, bucket); MFU and MXU use."""
    chip = trace.chip
    kept_list = np.asarray(sorted(kept_steps), dtype=np.int64)
    groups: dict[tuple[str, str, str], RefGroup] = {}
    acc = {"mf_model": 0.0, "mf_flops": 0.0, "any_model": False, "any_flops": False, "hw_flops": 0.0,
           "mm_self": 0, "mm_cap": 0.0, "mm_flops": 0.0}
    n_core_steps = 0
    for w in work:
        rows, counts, self_sum, n_kept = ref_kept_rows(trace, w, kept_list)
        n_core_steps += n_kept
        if rows is not None:
            ref_group_rows(w, chip, rows, counts, self_sum, groups, acc)
    n_core_steps = n_core_steps or 1
    if not groups:
        return O.OpsResult((), (), (), {}), Utilisation(None, "none", None)
    agg = sorted(groups.values(), key=lambda g: (-g.self_ps, g.name))
    util = ref_utilisation(agg, acc, chip, step_mean, n_core_steps)
    denom = step_mean if step_mean > 0 else 1.0
    ctx = (chip, n_core_steps, denom)
    fam = ref_families(agg)
    top = tuple(ref_top_op(g, *ctx) for g in fam[:top_n])
    remat_ops = tuple(ref_top_op(g, *ctx) for g in [g for g in fam if g.remat][:REMAT_TOP])
    kernels = tuple(ref_top_op(g, *ctx) for g in [g for g in fam if g.kernel is not None and str(g.kernel) != ""][:KERNELS_TOP])
    summaries = ref_bucket_summaries(agg, n_core_steps, denom, chip)
    host = O.host_offload_summary(agg, n_core_steps, denom)
    return O.OpsResult(top, remat_ops, kernels, summaries, host, tuple(agg)), util


def ref_scope_rollup(trace: Trace, work: list[CoreWork], kept_steps: set[int], step_mean: float) -> tuple[ScopeRow, ...]:
    """Self time per folded name scope over the kept steps of every TensorCore,
    per kept step per TensorCore (the divisor of the top ops: kept core-steps)."""
    nb = len(BUCKETS)
    coll = np.asarray([b in COLLECTIVE_BUCKETS for b in BUCKETS], dtype=bool)
    kept_list = np.asarray(sorted(kept_steps), dtype=np.int64)
    ids: dict[str, int] = {}
    bucket_ps: dict[int, np.ndarray] = {}
    remat_ps: dict[int, float] = {}
    ops: dict[int, set[str]] = {}
    runs: dict[int, float] = {}  # max runs per kept step of one op
    layers: dict[int, set[int]] = {}
    n_core_steps = 0
    folded: dict[str, tuple[str, tuple[int, ...]]] = {}  # tf_op -> fold_scope(tf_op), shared by the cores
    for w in work:
        steps = trace.steps[w.plane.label]
        kept = np.isin(steps.number, kept_list)
        nk = int(kept.sum())
        n_core_steps += nk
        ln = w.plane.line(LINE_OPS)
        if ln is None or len(ln.events) == 0 or nk == 0:
            continue
        md = w.plane.meta
        fold = [folded[t] if t in folded else folded.setdefault(t, fold_scope(t)) for t in md.tf_op]
        row_scope = np.asarray([ids.setdefault(s, len(ids)) for s, _ in fold] + [ids.setdefault(NO_SCOPE, len(ids))], dtype=np.int64)
        ev = ln.events
        rows = np.where((ev.meta >= 0) & (ev.meta < len(md)), ev.meta, len(md)).astype(np.int64)
        ev_scope = row_scope[rows]
        remat_rows = np.concatenate([np.asarray(w.classes.remat, dtype=bool)[: len(md)], [False]]) if len(w.classes.remat) >= len(md) \
            else np.zeros(len(md) + 1, dtype=bool)
        ev_remat = remat_rows[rows].astype(np.int64)
        ns = len(ids)
        ks, ke = steps.start_ps[kept], steps.end_ps[kept]
        order = np.argsort(ks)
        ks, ke = ks[order], ke[order]
        by_bucket, by_remat = w.ops.exclusive_many([(ev_scope * nb + w.ev_bucket, ns * nb), (ev_scope * 2 + ev_remat, ns * 2)], ks, ke)
        tot_b = by_bucket.sum(axis=0).reshape(ns, nb)
        tot_r = by_remat.sum(axis=0).reshape(ns, 2)[:, 1]
        # runs of each metadata row inside the kept steps
        lo = np.searchsorted(ks, ev.start_ps, side="right") - 1
        inside = (lo >= 0) & (ev.start_ps < ke[np.clip(lo, 0, len(ke) - 1)])
        counts = np.bincount(rows[inside], minlength=len(md) + 1)
        for r in np.flatnonzero(counts).tolist():
            sid = int(row_scope[r])
            ops.setdefault(sid, set()).add(md.name[r] if r < len(md) else "")
            runs[sid] = max(runs.get(sid, 0.0), counts[r] / nk)
            if r < len(fold) and fold[r][1]:
                layers.setdefault(sid, set()).update(fold[r][1])
        for sid in np.flatnonzero(tot_b.sum(axis=1)).tolist():
            acc = bucket_ps.get(sid)
            bucket_ps[sid] = tot_b[sid].astype(np.float64) + (acc if acc is not None else 0.0)
            remat_ps[sid] = remat_ps.get(sid, 0.0) + float(tot_r[sid])
    if not bucket_ps or n_core_steps == 0:
        return ()
    names = {v: k for k, v in ids.items()}
    denom = step_mean if step_mean > 0 else 1.0
    out = []
    for sid, b in bucket_ps.items():
        per = np.rint(b / n_core_steps)  # whole picoseconds: sums of rows are exact after the JSON round trip
        ps = float(per.sum())
        count = max(len(layers.get(sid, ())), int(round(runs.get(sid, 0.0))), 1)
        out.append(ScopeRow(
            scope=names[sid],
            ps=ps,
            fraction=ps / denom,
            buckets={BUCKETS[i]: float(per[i]) for i in np.flatnonzero(per).tolist()},
            exposed_comm_ps=float(per[coll].sum()),
            remat_ps=float(round(remat_ps.get(sid, 0.0) / n_core_steps)),
            ops=len(ops.get(sid, ())),
            count=count,
        ))
    out.sort(key=lambda r: (-r.ps, r.scope))
    if len(out) > MAX_ROWS:
        out = list(out[:MAX_ROWS]) + list(collapse(out[MAX_ROWS:], 2))
        out = list(collapse(out, MAX_DEPTH))
    return tuple(out)


def ref_row_kinds(w: CoreWork) -> np.ndarray:
    """Per metadata row: HOST_WAIT for ops talking to the host, PEER_WAIT for
    collectives and barriers, UNEXPLAINED otherwise."""
    md = w.plane.meta
    n = len(md)
    out = np.full(n + 1, UNEXPLAINED, dtype=np.int8)
    cols = w.classes.columns
    coll = cols.get("collective")
    host_b = BUCKETS.index("host_offload")
    coll_b = {BUCKETS.index(b) for b in COLLECTIVE_BUCKETS}
    bucket = w.classes.bucket
    for r in range(min(n, len(bucket))):
        kind = coll[r] if coll is not None and r < len(coll) else None
        text = md.name[r]
        if int(bucket[r]) == host_b or kind == "host_transfer" or host_callback(text) or host_callback(md.display_name[r]):
            out[r] = HOST_WAIT
        elif int(bucket[r]) in coll_b or BARRIER.search(md.short_name(r)):
            out[r] = PEER_WAIT
    return out



def ref_covered_before(ms: np.ndarray, me: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time covered by disjoint sorted intervals [ms, me) before each t."""
    if not len(ms):
        return np.zeros(len(t), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(me - ms)])
    i = np.searchsorted(ms, t, side="right") - 1
    ic = np.clip(i, 0, len(ms) - 1)
    part = np.where(i >= 0, np.minimum(t, me[ic]) - ms[ic], 0)
    return np.where(i >= 0, cum[ic] + np.maximum(part, 0), 0)


def ref_gaps(w: CoreWork) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """The idle gaps of a core's XLA Ops line (start, end, kind of the op
    that ends each) and its program runs (merged XLA Modules events)."""
    ln = w.plane.line(LINE_OPS)
    mods = w.plane.line(LINE_MODULES)
    have_mods = mods is not None and len(mods.events) > 0
    if have_mods:
        ms_, mend, _ = union_intervals(mods.events.start_ps, mods.events.end_ps)
    else:
        ms_ = mend = np.zeros(0, dtype=np.int64)
    lo = np.iinfo(np.int64).min // 4
    hi = np.iinfo(np.int64).max // 4
    if ln is None or len(ln.events) == 0:
        gs, ge, nxt = np.asarray([lo]), np.asarray([hi]), np.asarray([UNEXPLAINED], dtype=np.int8)
    else:
        ev = ln.events
        top = np.flatnonzero(ev.parent < 0)
        us, ue, first = union_intervals(ev.start_ps[top], ev.end_ps[top])
        kinds = ref_row_kinds(w)
        rows = ev.meta[top[first]].astype(np.int64)
        rows = np.where((rows >= 0) & (rows < len(kinds) - 1), rows, len(kinds) - 1)
        op_kind = kinds[rows]  # kind of the op opening each merged interval
        # gaps: before the first interval, between intervals, after the last
        gs = np.concatenate([[lo], ue])
        ge = np.concatenate([us, [hi]])
        nxt = np.concatenate([op_kind, [UNEXPLAINED]]).astype(np.int8)
    keep = ge > gs
    return gs[keep], ge[keep], nxt[keep], ms_, mend, have_mods


def ref_pieces(gs, ge, nxt, ms_, mend, have_mods, a: int, b: int):
    """The gaps inside one step window [a, b): (start, end, duration, time
    inside program runs, time before the next op inside its run, next op kind)."""
    j0 = int(np.searchsorted(ge, a, side="right"))
    j1 = int(np.searchsorted(gs, b, side="left"))
    if j1 <= j0:
        return None
    s = np.maximum(gs[j0:j1], a)
    e = np.minimum(ge[j0:j1], b)
    d = np.maximum(e - s, 0)
    g_end = ge[j0:j1]
    ends_here = g_end <= b  # the op after the gap starts in this window
    if have_mods:
        inside = ref_covered_before(ms_, mend, e) - ref_covered_before(ms_, mend, s)
        # the part inside the program run that the next op starts in
        m = np.clip(np.searchsorted(ms_, g_end, side="left") - 1, 0, max(len(ms_) - 1, 0))
        in_run = ends_here & (ms_[m] < g_end) & (g_end <= mend[m]) if len(ms_) else np.zeros(len(s), dtype=bool)
        before = np.where(in_run, np.maximum(e - np.maximum(s, ms_[m]), 0), 0)
    else:
        inside = d
        before = np.where(ends_here, d, 0)
    return s, e, d, inside, before, nxt[j0:j1]


def ref_core_step_causes(w: CoreWork, step_start: np.ndarray, step_end: np.ndarray) -> tuple[np.ndarray, bool]:
    """(n_steps, 4) idle picoseconds per cause for the given step windows of
    one core (before reconciling with the idle bucket), and whether program
    boundaries were known."""
    ns = len(step_start)
    out = np.zeros((ns, len(IDLE_CAUSES)), dtype=np.int64)
    gs, ge, nxt, ms_, mend, have_mods = ref_gaps(w)
    for i in range(ns):
        got = ref_pieces(gs, ge, nxt, ms_, mend, have_mods, int(step_start[i]), int(step_end[i]))
        if got is None:
            continue
        s, e, d, inside, before, k = got
        out[i, HOST_DISPATCH] += int((d - inside).sum())
        for c in (HOST_WAIT, PEER_WAIT):
            out[i, c] += int(before[k == c].sum())
        out[i, UNEXPLAINED] += int((inside - np.where((k == HOST_WAIT) | (k == PEER_WAIT), before, 0)).sum())
    return out, have_mods


def ref_names_operand(operands: str, name: str) -> bool:
    """`%name` appears in the operand text as a whole instruction name."""
    if not name:
        return False
    at = operands.find(f"%{name}")
    while at >= 0:
        end = at + len(name) + 1
        if end >= len(operands) or not (operands[end].isalnum() or operands[end] in "._-"):
            return True
        at = operands.find(f"%{name}", end)
    return False


def ref_critical_path(plane: Plane, wins: Windows, hidden: np.ndarray) -> np.ndarray:
    """Per window: on the critical path, i.e. nothing was hidden in it and its
    (start) op consumes the output of the op that ran just before it on the
    TensorCore (the HLO text names that op among its operands), so no compute
    independent of the collective was ready to overlap it."""
    out = np.zeros(len(wins), dtype=bool)
    ln = plane.line(LINE_OPS)
    if ln is None or not len(ln.events) or not len(wins):
        return out
    ev = ln.events
    md = plane.meta
    cand = np.flatnonzero(hidden <= 0)
    before = np.searchsorted(ev.start_ps, wins.start[cand], side="left") - 1
    for k, i in zip(cand.tolist(), before.tolist(), strict=True):
        r = int(wins.row[k])
        if r < 0 or r >= len(md):
            continue
        text = md.name[r]
        operands = text[text.find("(") + 1:]
        j, looked = i, 0
        # the ops that ended within ADJACENT_PS before the window (async issue
        # ops such as slice-start can sit between a producer and its collective)
        while j >= 0 and looked < MAX_ADJACENT_OPS and ev.end_ps[j] >= wins.start[k] - ADJACENT_PS:
            if ev.end_ps[j] <= wins.start[k] + ADJACENT_PS and ev.meta[j] >= 0:  # not an op enclosing the window
                looked += 1
                if ref_names_operand(operands, md.short_name(int(ev.meta[j]))):
                    out[k] = True
                    break
            j -= 1
    return out


# ---------------------------------------------------------------------------
# Cases: every sample trace, and the real captures when present
# ---------------------------------------------------------------------------

REAL_CAPTURES = (VLLM, V6E)
CASES = [("sample", n) for n in sample_names()] + [("real", n) for n in REAL_CAPTURES]


def _path(kind: str, name: str):
    if kind == "sample":
        return sample_path(name)
    p = REAL / name
    if not p.exists():
        pytest.skip(f"real capture {name} not available (../shared/real-traces/ absent)")
    return p


_LOADED: dict = {}


def loaded(kind: str, name: str) -> SimpleNamespace:
    """The trace, its CoreWork and the analysis's arguments to the stages
    (captured from analyze_trace), loaded once per case."""
    key = (kind, name)
    if key not in _LOADED:
        from profanalyzer.analyze.analysis import (
            AnalysisOptions,
            analyze_attributed,
            attribute,
        )

        att = attribute(read_trace(_path(kind, name)))
        trace = att.trace  # with the device planes' peaks, as the stages see it
        an = analyze_attributed(att)
        n_core_steps = max(1, sum(c.steps_kept for c in an.per_core))
        _LOADED[key] = SimpleNamespace(trace=trace, analysis=an, n_core_steps=n_core_steps, att=att, work=att.work,
                                       kept=att.kept_steps, mean=att.step_mean, top=AnalysisOptions().top_ops)
    return _LOADED[key]


def canon(x):
    """A comparable form: floats by their bits (nan as one value), records by fields."""
    if isinstance(x, (float, np.floating)):
        return ("nan",) if x != x else ("float", float(x).hex())
    if isinstance(x, (bool, np.bool_)):
        return ("bool", bool(x))
    if isinstance(x, (int, np.integer)):
        return ("int", int(x))
    if isinstance(x, (list, tuple)):
        return tuple(canon(v) for v in x)
    if isinstance(x, dict):
        return tuple((k, canon(v)) for k, v in x.items())
    if isinstance(x, np.ndarray):
        return canon(x.tolist())
    if hasattr(x, "__dataclass_fields__"):
        return (type(x).__name__,) + tuple(canon(getattr(x, f)) for f in x.__dataclass_fields__)
    if hasattr(x, "__slots__"):
        return tuple(canon(getattr(x, f)) for f in x.__slots__)
    return x


def fresh(c: SimpleNamespace) -> None:
    """Forget the run's TableMemo: the next call computes every table anew."""
    c.att.memo.__init__()


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind,name", CASES)
def test_ops_and_roofline_matches_reference(kind, name):
    c = loaded(kind, name)
    ref, ref_util = ref_ops_and_roofline(c.trace, c.work, c.kept, c.mean, c.top)
    for attempt in ("cold", "warm"):  # computing the tables, then reusing them
        if attempt == "cold":
            fresh(c)
        got, util = ops_and_roofline(c.att, c.top)
        assert canon(got.top) == canon(ref.top)
        assert canon(got.remat) == canon(ref.remat)
        assert canon(got.kernels) == canon(ref.kernels)
        assert canon(got.buckets) == canon(ref.buckets)
        assert canon(got.host_offload) == canon(ref.host_offload)
        assert canon(util) == canon(ref_util)
        assert canon(list(got.groups)) == canon(list(ref.groups))
    assert len(ref.groups) > 0 or kind == "real"


@pytest.mark.parametrize("kind,name", CASES)
def test_families_match_reference(kind, name):
    c = loaded(kind, name)
    ref, _ = ref_ops_and_roofline(c.trace, c.work, c.kept, c.mean, c.top)
    agg = list(ref.groups)
    got = families(OpGroups.of(agg))
    assert canon(list(got)) == canon(ref_families(agg))


def test_families_merge_unrolled_repeats():
    """Synthetic: FAMILY_MIN scoped repeats merge into one row whose sums add
    in member order; fewer, or unscoped ones, stay rows of their own."""
    def grp(name, ps, tf="jit(f)/layers/mlp/dot_general", flops=math.nan, nbytes=3.0):
        g = RefGroup(name, "convolution", "matmul_bf16")
        g.self_ps, g.count, g.tot_flops, g.tot_bytes, g.tf_op = ps, 2, 0.1 * ps, 1e-3 * ps, tf
        g.flops, g.bytes = flops, nbytes
        return g

    agg = [grp(f"fusion.{i}", 1000 + i, flops=float(i) if i % 2 else math.nan) for i in range(FAMILY_MIN)]
    agg += [grp(f"copy.{i}", 10 + i) for i in range(FAMILY_MIN - 1)]
    agg += [grp(f"dot.{i}", 100, tf="") for i in range(FAMILY_MIN)]
    agg.sort(key=lambda g: (-g.self_ps, g.name))
    got = list(families(OpGroups.of(agg)))
    assert canon(got) == canon(ref_families(agg))
    assert got[0].name == f"fusion.* ({FAMILY_MIN} ops)" and got[0].count == 2 * FAMILY_MIN
    assert sum(1 for g in got if g.name.startswith("copy.")) == FAMILY_MIN - 1


def test_by_time_is_sorted_order():
    rng = np.random.default_rng(7)
    sp = rng.integers(0, 5, size=500)
    names = [f"op{rng.integers(0, 40)}" for _ in range(500)]
    assert by_time(sp, names).tolist() == sorted(range(500), key=lambda i: (-int(sp[i]), names[i]))


@pytest.mark.parametrize("kind,name", CASES)
def test_run_kind_matches_reference(kind, name):
    c = loaded(kind, name)
    ref, _ = ref_ops_and_roofline(c.trace, c.work, c.kept, c.mean, c.top)
    got, _ = ops_and_roofline(c.att, c.top)
    an = c.analysis
    args = (c.mean, c.n_core_steps, an.phases, an.remat.ps, ("train_step",))
    assert canon(run_kind_of(got.groups, *args)) == canon(ref_run_kind_of(tuple(ref.groups), *args))
    # a sequence of OpGroup still works
    assert canon(run_kind_of(tuple(got.groups), *args)) == canon(ref_run_kind_of(tuple(ref.groups), *args))


@pytest.mark.parametrize("kind,name", CASES)
def test_scope_rollup_matches_reference(kind, name):
    c = loaded(kind, name)
    ref = ref_scope_rollup(c.trace, c.work, c.kept, c.mean)
    fresh(c)
    assert canon(scope_rollup(c.att)) == canon(ref)
    assert canon(scope_rollup(c.att)) == canon(ref)  # tables reused


@pytest.mark.parametrize("kind,name", CASES)
def test_row_kinds_match_reference(kind, name):
    c = loaded(kind, name)
    fresh(c)
    memo = c.att.memo
    for w in c.work:
        ref = ref_row_kinds(w)
        assert row_kinds(w).tolist() == ref.tolist()
        assert row_kinds(w, memo).tolist() == ref.tolist()


def test_row_kinds_text_checks():
    """Host callbacks and barriers found in any case, in ASCII and non-ASCII
    tables (IGNORECASE matches some non-ASCII letters: dotted capital I)."""
    texts = ["%a = f32[] custom-call(), custom_call_target=\"xla_python_CPU_Callback\"", "%barrier.1 = () barrier()",
             "%x = f32[] add()", "%y = f32[] custom-call(), custom_call_target=\"callbackish\"", "%BarrIer.2 = () foo()"]
    for extra in ("", "%barr\u0130er.3 = () foo()"):
        t = texts + ([extra] if extra else [])
        n = len(t)
        plane = SimpleNamespace(meta=_Meta(t))
        cls = SimpleNamespace(bucket=np.full(n, BUCKETS.index("other_compute")), columns={"collective": np.full(n, None, dtype=object)})
        w = SimpleNamespace(plane=plane, classes=cls)
        assert row_kinds(w).tolist() == ref_row_kinds(w).tolist()
        assert row_kinds(w).tolist()[:5] == [HOST_WAIT, PEER_WAIT, UNEXPLAINED, UNEXPLAINED, PEER_WAIT]
        if extra:
            assert row_kinds(w).tolist()[5] == PEER_WAIT


class _Meta:
    def __init__(self, texts):
        self.name = tuple(texts)
        self.display_name = ("",) * len(texts)

    def __len__(self):
        return len(self.name)

    def short_name(self, r):
        return self.name[r].split("=", 1)[0].strip().lstrip("%").strip()

    @property
    def short_names(self):
        return tuple(self.short_name(r) for r in range(len(self)))


@pytest.mark.parametrize("kind,name", CASES)
def test_idle_causes_reuse_tables(kind, name):
    c = loaded(kind, name)
    fresh(c)
    cold = idle_causes(c.att)
    assert canon(idle_causes(c.att)) == canon(cold)
    assert canon(cold.causes) == canon(c.analysis.idle_causes)


def _type_code(c):
    return TYPES.index(c) if isinstance(c, str) and c in TYPES else TYPES.index("unknown")


@pytest.mark.parametrize("kind,name", CASES)
def test_overlap_matches_reference(kind, name):
    """Window types (per row, from the classification) and the per-type time
    of the collective ops against per-row loops; with and without the memo."""
    c = loaded(kind, name)
    fresh(c)
    memo = c.att.memo
    kept_list = np.asarray(sorted(c.kept), dtype=np.int64)
    own: dict[str, float] = {}
    n_core_steps = 0
    for w in c.work:
        a, b = windows_for_core(w.plane, w.classes, {}, memo), windows_for_core(w.plane, w.classes, {})
        assert canon((a[0].start, a[0].end, a[0].type, a[0].on_sc, a[0].row, a[1])) == \
            canon((b[0].start, b[0].end, b[0].type, b[0].on_sc, b[0].row, b[1]))
        coll = w.classes.columns["collective"] if len(w.classes) else []
        for t, r in zip(a[0].type.tolist(), a[0].row.tolist(), strict=True):
            expect = {_type_code(coll[r])} if w.classes.role[r] == ROLE_CODES["sync"] else set()
            if a[1] == "Async XLA Ops line":
                expect.add(_type_code(w.classes.op_class(w.plane, r).collective))
            assert not expect or t in expect
        # reference per-type time: a per-row label loop
        steps = c.trace.steps[w.plane.label]
        kept = np.isin(steps.number, kept_list)
        n_core_steps += int(kept.sum())
        ops = w.plane.line(LINE_OPS)
        if ops is None or not len(ops.events) or not kept.any() or not len(w.classes):
            continue
        names = ("none",) + TYPES
        code = {t: i for i, t in enumerate(names)}
        label = np.asarray([code[c_ if c_ else "unknown"] if isinstance(r_, str) and r_ else 0
                            for c_, r_ in zip(w.classes.columns["collective"], w.classes.columns["role"], strict=True)], dtype=np.int64)
        rows = ops.events.meta
        tot = w.ops.exclusive(np.where(rows >= 0, label[np.maximum(rows, 0)], 0), len(names),
                              steps.start_ps[kept], steps.end_ps[kept]).sum(axis=0)
        for i, t in enumerate(names[1:], 1):
            if tot[i]:
                own[t] = own.get(t, 0.0) + float(tot[i])
    got = analyze_overlap(c.att)
    n = max(n_core_steps, 1)
    # whole picoseconds (issue 23: records round every ps field when built)
    assert {t: s.exposed_ps for t, s in got.types.items() if s.exposed_ps} == {t: int(round(v / n)) for t, v in own.items() if round(v / n)}
    assert canon((got.types, got.communication, got.sparsecore)) == canon(
        (lambda r: (r.types, r.communication, r.sparsecore))(analyze_overlap(c.att)))


def test_table_memo_is_keyed_by_the_shared_table():
    """A feature is computed once per table object and its classes (the planes sharing a table share
    it); an equal copy of a table is another table (the reader shares equal tables, see below)."""
    meta, copy = SimpleNamespace(name=("a", "b")), SimpleNamespace(name=("a", "b"))
    p1, p2, p3 = SimpleNamespace(meta=meta), SimpleNamespace(meta=meta), SimpleNamespace(meta=copy)
    cls, cls2 = SimpleNamespace(), SimpleNamespace()
    memo = TableMemo()
    calls = []

    def feature(tag):
        calls.append(tag)
        return tag

    assert memo.get("f", p1, cls, lambda: feature(1)) == 1
    assert memo.get("f", p2, cls, lambda: feature(2)) == 1  # the same table: shared
    assert memo.get("f", p3, cls, lambda: feature(3)) == 3  # another table object
    assert memo.get("f", p1, cls2, lambda: feature(4)) == 4  # other classes of it
    assert memo.get("g", p1, cls, lambda: feature(5)) == 5  # another feature
    assert calls == [1, 3, 4, 5]


@pytest.mark.parametrize("name", ["dense_short_fsdp_2hosts", "moe_short_fsdp_ep"])
def test_the_reader_shares_equal_tables_across_cores_and_hosts(name):
    """What the identity key rests on: the TensorCores whose op-metadata tables are equal hold one table
    object, whichever host they are on, and one PlaneClasses per table."""
    from profanalyzer.pipeline.run import run

    att = run(SAMPLES / name if name.endswith("2hosts") else sample_path(name)).attributed
    planes = att.trace.tensorcores
    by_content = {}
    for pl in planes:
        by_content.setdefault((pl.meta.name, pl.meta.display_name, pl.meta.category, pl.meta.ids.tobytes()), set()).add(id(pl.meta))
    assert all(len(ids) == 1 for ids in by_content.values())
    assert len({pl.host for pl in planes}) >= (2 if name.endswith("2hosts") else 1) and len(by_content) < len(planes)
    classes_of = {}
    for w in att.work:
        classes_of.setdefault(id(w.plane.meta), set()).add(id(w.classes))
    assert all(len(c) == 1 for c in classes_of.values())


def test_output_bytes_reads_shapes():
    assert output_bytes("%a = bf16[4,8]{1,0} fusion(%b)") == 64
    assert math.isnan(output_bytes("not hlo"))


@pytest.mark.parametrize("kind,name", CASES)
def test_core_step_causes_match_reference(kind, name):
    c = loaded(kind, name)
    fresh(c)
    memo = c.att.memo
    for w in c.work:
        steps = c.trace.steps[w.plane.label]
        for sel in (slice(None), slice(None, None, 2), slice(0, 0)):
            a, b = steps.start_ps[sel], steps.end_ps[sel]
            got, have = core_step_causes(w, a, b, memo)
            ref, ref_have = ref_core_step_causes(w, a, b)
            assert have == ref_have
            assert got.tolist() == ref.tolist()


@pytest.mark.parametrize("kind,name", CASES)
def test_critical_path_matches_reference(kind, name):
    c = loaded(kind, name)
    fresh(c)
    memo = c.att.memo
    for w in c.work:
        wins, _ = windows_for_core(w.plane, w.classes, {})
        hidden = w.compute(wins.end) - w.compute(wins.start)
        ref = ref_critical_path(w.plane, wins, hidden)
        assert critical_path(w.plane, wins, hidden, memo).tolist() == ref.tolist()
        assert critical_path(w.plane, wins, np.zeros(len(wins), dtype=np.int64)).tolist() == \
            ref_critical_path(w.plane, wins, np.zeros(len(wins), dtype=np.int64)).tolist()


def test_families_tricky_names():
    """Instruction numbers: any Unicode decimal digits; `$` before a final newline."""
    names = ["a.1", "a.1.2", "a..12", "a.", "a", ".5", "a.12\n", "a.1\n\n", "a.\u0661\u0662", "a.\u00b2", "x.1a", "a.-1"]
    agg = []
    for rep in range(FAMILY_MIN):
        for i, n in enumerate(names):
            g = RefGroup(n if rep == 0 else f"{n}.{rep}" if not n.endswith("\n") else n[:-1] + f".{rep}\n", "fusion", "other_compute")
            g.self_ps, g.count, g.tf_op = 10 * i + rep, 1, "jit(f)/mlp/add"
            agg.append(g)
    agg.sort(key=lambda g: (-g.self_ps, g.name))
    assert canon(list(families(OpGroups.of(agg)))) == canon(ref_families(agg))


def test_vectorised_sums_add_in_order():
    """What the vectorised sums rely on: ufunc.at and cumsum add one value
    at a time, in order, so with magnitudes far apart (where order changes
    the last bits) they equal a Python loop; families' sums follow."""
    rng = np.random.default_rng(11)
    vals = rng.choice([1e-9, 3.3, 1e16, -7.1e15, 0.1, 2.0 ** 60], size=4000) * rng.random(4000)
    gid = rng.integers(0, 37, size=4000)
    ref = [0.0] * 37
    for g, v in zip(gid.tolist(), vals.tolist(), strict=True):
        ref[g] += v
    got = np.zeros(37)
    np.add.at(got, gid, vals)
    assert got.tolist() == ref
    seq = 0.0
    for v in vals.tolist():
        seq += v
    assert float(np.cumsum(np.concatenate([[0.0], vals]))[-1]) == seq
    agg = []
    for i, v in enumerate(vals[:400].tolist()):
        g = RefGroup(f"fusion.{i}", "fusion", "other_compute")
        g.self_ps, g.count, g.tf_op, g.tot_flops, g.tot_bytes, g.tot_model_flops = 400 - i, 1, "jit(f)/x/add", v, -v, v / 3
        agg.append(g)
    assert canon(list(families(OpGroups.of(agg)))) == canon(ref_families(agg))


def test_inference_markers_equal_one_search_per_text():
    from profanalyzer.analyze.runkind import inference_marker, inference_markers

    texts = ["", "decode", "jit(decode_step)/dot", "predecode", "kv-cache.3", "fusion.1\nprefill", "Sampler_0",
             "x.logits y", "vllm", "İdecode", "no marker here", "decode\n", "\ndecode", "ragged_paged_attention.12",
             "tokens/sample", "generate-then-decode"]
    for name in ("serving_tp2_w4", "dense_short_fsdp"):
        tr = read_trace(sample_path(name))
        texts += list(tr.tensorcores[0].meta.display_name) + list(tr.tensorcores[0].meta.tf_op)
    want = [inference_marker(t) for t in texts]
    assert any(want) and want.count(None) > 0
    assert inference_markers(texts) == want
    assert inference_markers([]) == []


def test_family_stems_equal_the_regex_per_name():
    from profanalyzer.analyze.opfamilies import _NUMBER_SUFFIX, _stems

    names = ["fusion.12", "fusion", "fusion.", "a.1.2", "a.b", "x.12a", ".5", "5", "", "copy.٣",  # Arabic-Indic digit
             "dot.0001", "all-gather-start.3.remat"]
    assert _stems(names) == [_NUMBER_SUFFIX.sub("", n) for n in names]
    odd = names + ["conv.4\n", "a\x00b.3"]  # a final newline ($ matches before it); a NUL in a name
    assert _stems(odd) == [_NUMBER_SUFFIX.sub("", n) for n in odd]
    assert _stems([]) == []


def test_idle_case_folded_search_equals_lower_case_search():
    """idle._Lowered folds ASCII by setting bit 0x20: for letter needles it
    finds exactly the texts whose str.lower() contains them (markup,
    controls and digits never fold into letters)."""
    import random

    from profanalyzer.analyze.idle import _BARRIER, HOST_CALLBACK, _Lowered

    rnd = random.Random(3)
    alphabet = "abcxyzABCXYZ@[]^_`{|}~ \x01\x1f09.-" + "CALLBACKcallbackBarrierBARRIER"
    for _ in range(300):
        texts = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40))) for _ in range(rnd.randint(0, 30))]
        texts += ["CallBack", "xbarrierx", "BARRIER", "cAlLbAcK", "@ALLBACK", "[ARRIER"]
        low = _Lowered(texts)
        for needle, pattern in (("callback", HOST_CALLBACK), ("barrier", _BARRIER)):
            assert low.containing(needle, pattern).tolist() == [needle in t.lower() for t in texts]
    mixed = _Lowered(["Ünïcode callback", "plain"])  # not ASCII: the pattern itself, text by text
    assert mixed.low is None
    assert mixed.containing("callback", HOST_CALLBACK).tolist() == [HOST_CALLBACK.search(t) is not None for t in mixed.texts]


def test_scope_rows_per_distinct_scope_equal_row_by_row():
    """scopes._scope_rows folds each distinct tf_op once: the same ids (in
    first-seen order), names and (row, layer) pairs as folding row by row."""
    from profanalyzer.analyze.scopes import NO_SCOPE, _scope_rows, fold_scope

    tf = ["jit(f)/layers_3/mlp/dot", "", "jit(f)/layers_4/mlp/dot", "jit(f)/layers_3/mlp/dot", None,
          "jit(f)/block_2/layer_7/attn", "jit(f)/layers_4/mlp/dot", "plain"]

    class Table:  # the columns _scope_rows reads of an OpMetadata
        tf_op = tf
        name = [f"%op.{i} = f32[] add()" for i in range(len(tf))]

        def __len__(self) -> int:
            return len(tf)

    table = Table()
    got_ids, got_names, got_layers = {}, {}, {}
    rs, rn, pr, pi = _scope_rows(table, got_ids, got_names, got_layers)
    ids: dict = {}
    layers: dict = {}
    want_rs, want_pairs = [], []
    for r, t in enumerate(tf):
        s, idx = fold_scope(t)
        want_rs.append(ids.setdefault(s, len(ids)))
        want_pairs += [(r, layers.setdefault(i, len(layers))) for i in idx]
    want_rs.append(ids.setdefault(NO_SCOPE, len(ids)))
    assert rs.tolist() == want_rs and list(got_ids) == list(ids) and list(got_layers) == list(layers)
    assert list(zip(pr.tolist(), pi.tolist(), strict=True)) == want_pairs and want_pairs
    assert rn.tolist() == list(range(len(tf))) + [len(tf)]
