"""Per-op statistics of the kept steps: self time, FLOPs, bytes and roofline
per op group, per-bucket summaries, MFU / MXU use, host-offload traffic and
the run-kind evidence (analysis stage; numpy inside, records out).

FLOPs: the op's `flops` stat (per occurrence). A matmul or attention kernel
whose trace carries no FLOPs (no stat, or 0 with no model FLOPs either: the
real vLLM capture's Pallas kernels) gets 2*M*N*K from its operand shapes when
the classifier could derive them (`shape_flops`), else its time counts as
"FLOPs unknown" and MFU says how much of the compute it covers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from profanalyzer.attribution import CoreWork, locate
from profanalyzer.classify import async_pair_key
from profanalyzer.classify.parse import shape_dims
from profanalyzer.classify.tables import ARRAY
from profanalyzer.model import BucketOps, HostOffloadSummary, RunKind, TopOp, Utilisation
from profanalyzer.runkind import RunKindEvidence, decide_run_kind, inference_marker
from profanalyzer.trace import LINE_MODULES, LINE_OPS, Trace
from profanalyzer.vocab import ATTENTION_SPLIT, BUCKETS, COMPUTE_BUCKETS, MATMUL_BUCKETS

REMAT_TOP = 15
KERNELS_TOP = 20
#: Below this share of compute time with known FLOPs, MFU is marked low-confidence.
FLOPS_COVERAGE_MIN = 0.9

#: Bytes per element of HLO element types (fp8 one byte, 4-bit types half).
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4, "u32": 4, "s64": 8, "u64": 8, "bf16": 2,
               "f16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16, "s4": 0.5, "u4": 0.5, "s2": 0.25, "u2": 0.25}
_HEAD = re.compile(r"^\s*(?:ROOT\s+)?%?[^\s=]+\s*=\s*(.*?)\s[a-z][a-z0-9\-]*\(")


def _dtype_bytes(dt: str) -> float | None:
    if dt in DTYPE_BYTES:
        return DTYPE_BYTES[dt]
    return 1 if dt.startswith("f8") else (0.5 if dt.startswith("f4") else None)


def output_bytes(hlo_text: str) -> float:
    """Bytes of an op's output shape(s) from its HLO text (nan when not visible)."""
    m = _HEAD.match(hlo_text[:4096])
    if not m:
        return math.nan
    total = 0.0
    for dt, dims in ARRAY.findall(m.group(1)):
        size = _dtype_bytes(dt)
        if size is not None:
            total += math.prod(shape_dims(dims)) * size
    return total if total > 0 else math.nan


# A host-memory (S(5)) array written as an op's output: `= f32[..]{..S(5)} copy-done(`
_OUTPUT_TO_HOST = re.compile(r"=\s*\(?[a-z0-9]+\[[^\]]*\]\{[^}]*S\(5\)\}")


@dataclass(frozen=True)
class OpsResult:
    top: tuple[TopOp, ...]
    remat: tuple[TopOp, ...]
    kernels: tuple[TopOp, ...]
    buckets: Mapping[str, BucketOps]
    host_offload: HostOffloadSummary | None = None
    groups: tuple["OpGroup", ...] = ()


class OpGroup:
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


def _peak(chip, bucket: str, precision: str | None = None) -> float:
    if bucket == "matmul_fp8" or precision == "fp8":
        return chip.core_peak_fp8_flops
    if bucket == "matmul_int8":
        return chip.core_peak_int8_flops
    return chip.core_peak_bf16_flops


def _kept_rows(trace: Trace, w: CoreWork, kept_list: np.ndarray):
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


def _group_rows(w: CoreWork, chip, rows, counts, self_sum, groups: dict, acc: dict) -> None:
    """Add one core's kept rows to the op groups and the utilisation sums."""
    md = w.plane.meta
    cols = w.classes.columns
    bucket_c, remat_c, phase_c, kernel_c = cols["bucket"], cols["remat"], cols["phase"], cols["kernel"]
    precision_c, reason_c, part_c, shape_c = cols["precision"], cols["reason"], cols["attention_part"], cols["shape_flops"]
    for r, cnt, sp, f, mf, by in zip(rows.tolist(), counts.tolist(), self_sum.tolist(),
                                     md.flops[rows].tolist(), md.model_flops[rows].tolist(), md.bytes_accessed[rows].tolist()):
        known = r < len(bucket_c)
        bucket = bucket_c[r] if known else "other_compute"
        unknown = False
        if bucket in MATMUL_BUCKETS or bucket == "attention":
            # No FLOPs in the trace: no stat, or 0 with no model FLOPs (kernels)
            if not (f > 0) and not (mf > 0) and (bucket in MATMUL_BUCKETS or (known and kernel_c[r])):
                sf = shape_c[r] if known else None
                if sf:
                    f = mf = float(sf)
                else:
                    f, mf, unknown = math.nan, math.nan, True
        tot_f = (0.0 if f != f else f) * cnt
        if mf == mf:
            acc["any_model"] = True
            acc["mf_model"] += mf * cnt
        else:
            acc["mf_model"] += tot_f
        if f == f:
            acc["any_flops"] = True
            acc["mf_flops"] += tot_f
            if bucket in MATMUL_BUCKETS:
                acc["mm_self"] += sp
                acc["mm_cap"] += sp * 1e-12 * _peak(chip, bucket)
                acc["mm_flops"] += tot_f
        name, cat = md.short_name(r), md.category[r]
        g = groups.get((name, cat, bucket))
        if g is None:
            g = groups[(name, cat, bucket)] = OpGroup(name, cat, bucket)
            if bucket == "host_offload":
                g.to_host = bool(_OUTPUT_TO_HOST.search(md.name[r][:4096]))
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


def ops_and_roofline(trace: Trace, work: list[CoreWork], kept_steps: set[int], step_mean: float,
                     top_n: int) -> tuple[OpsResult, Utilisation]:
    """Per-op self time, FLOPs and bytes over the kept steps of every
    TensorCore, grouped by (name, HLO category, bucket); MFU and MXU use."""
    chip = trace.chip
    kept_list = np.asarray(sorted(kept_steps), dtype=np.int64)
    groups: dict[tuple[str, str, str], OpGroup] = {}
    acc = {"mf_model": 0.0, "mf_flops": 0.0, "any_model": False, "any_flops": False,
           "mm_self": 0, "mm_cap": 0.0, "mm_flops": 0.0}
    n_core_steps = 0
    for w in work:
        rows, counts, self_sum, n_kept = _kept_rows(trace, w, kept_list)
        n_core_steps += n_kept
        if rows is not None:
            _group_rows(w, chip, rows, counts, self_sum, groups, acc)
    n_core_steps = n_core_steps or 1
    if not groups:
        return OpsResult((), (), (), {}), Utilisation(None, "none", None)
    agg = sorted(groups.values(), key=lambda g: (-g.self_ps, g.name))
    util = _utilisation(agg, acc, chip, step_mean, n_core_steps)
    denom = step_mean if step_mean > 0 else 1.0
    ctx = (chip, n_core_steps, denom)
    fam = families(agg)
    top = tuple(_top_op(g, *ctx) for g in fam[:top_n])
    remat_ops = tuple(_top_op(g, *ctx) for g in [g for g in fam if g.remat][:REMAT_TOP])
    kernels = tuple(_top_op(g, *ctx) for g in [g for g in fam if g.kernel is not None and str(g.kernel) != ""][:KERNELS_TOP])
    summaries = _bucket_summaries(agg, n_core_steps, denom, chip)
    host = host_offload_summary(agg, n_core_steps, denom)
    return OpsResult(top, remat_ops, kernels, summaries, host, tuple(agg)), util


#: Ops of one family (same instruction name up to its number, category,
#: bucket and framework scope: one op repeated in unrolled layers) are listed
#: as one row when there are at least this many.
FAMILY_MIN = 4
_NUMBER_SUFFIX = re.compile(r"\.\d+$")


def families(agg: list[OpGroup]) -> list[OpGroup]:
    """The op groups with unrolled repeats of one op merged into one row
    (`name.*`, count and times summed), most time first."""
    by_key: dict[tuple, list[OpGroup]] = {}
    for g in agg:
        stem = _NUMBER_SUFFIX.sub("", g.name)
        scoped = stem != g.name and bool((g.tf_op or "").strip())  # repeats share a framework scope
        key = (stem, g.hlo_category, g.bucket, g.tf_op, g.remat, g.kernel, g.precision, g.part) if scoped else (g.name, id(g))
        by_key.setdefault(key, []).append(g)
    out: list[OpGroup] = []
    for key, members in by_key.items():
        if len(members) < FAMILY_MIN:
            out.extend(members)
            continue
        first = members[0]
        f = OpGroup(f"{key[0]}.* ({len(members)} ops)", first.hlo_category, first.bucket)
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


def _utilisation(agg: list[OpGroup], acc: dict, chip, step_mean: float, n_core_steps: int) -> Utilisation:
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
    return Utilisation(mfu, src, mxu, flops_coverage=coverage,
                       low_confidence=bool(mfu is not None and coverage is not None and coverage < FLOPS_COVERAGE_MIN))


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
        for r, d in zip(ln.events.meta.tolist(), ln.events.dur_ps.tolist()):
            nm = plane.meta.name[r] if r >= 0 else ""
            tot[nm] = tot.get(nm, 0) + int(d)
        return tuple(sorted(tot, key=lambda k: (-tot[k], k)))
    return ()


def run_kind_of(agg: tuple[OpGroup, ...], step_ps: float, n_core_steps: int, phases: Mapping, remat_ps: float,
                programs: tuple[str, ...]) -> RunKind:
    """Training / inference / unknown from the op groups (see profanalyzer.runkind)."""
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


def _top_op(r: OpGroup, chip, n_core_steps: int, denom: float) -> TopOp:
    t_s = r.self_ps * 1e-12
    has_f = r.flops == r.flops and r.flops is not None and r.flops > 0
    has_b = r.bytes == r.bytes and r.bytes is not None and r.bytes > 0
    intensity = (r.flops / r.bytes) if has_f and has_b else None
    tflops = (r.tot_flops / t_s / 1e12) if has_f and t_s > 0 else None
    gbps = (r.tot_bytes / t_s / 1e9) if has_b and t_s > 0 else None
    peak = _peak(chip, r.bucket, r.precision)
    bw = chip.core_hbm_bytes_per_s
    if intensity is not None:
        ridge = peak / bw
        bound = "compute" if intensity >= ridge else "hbm"
        attainable = min(peak, intensity * bw)
        roof = (r.tot_flops / t_s) / attainable if t_s > 0 else None
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
    if g.part == "layout":
        return "attention_layout"
    if g.part == "kernel" or (g.kernel is not None and str(g.kernel) != ""):
        return "attention_kernel"
    return "attention_unfused"


def _bucket_summaries(agg: list[OpGroup], n_core_steps: int, denom: float, chip) -> dict:
    """Per bucket (and attention split into kernel / layout / unfused): time,
    FLOPs, bytes, compute- vs HBM-bound time, per step per TensorCore."""
    names = [b for b in BUCKETS if b != "idle"] + list(ATTENTION_SPLIT)
    acc = {n: [0, 0, 0.0, 0.0, 0.0, 0, 0, 0] for n in names}  # ps, ops, flops, model, bytes, compute, hbm, remat
    for g in agg:
        inten = _intensity(g.flops, g.bytes)
        compute_bound = inten >= _peak(chip, g.bucket) / chip.core_hbm_bytes_per_s
        targets = [g.bucket] if g.bucket in acc else []
        if g.bucket == "attention":
            targets.append(_attention_part(g))
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
