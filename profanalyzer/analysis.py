"""analyze(path) -> Analysis: the analysis stage of the pipeline.

read (xspace.reader) -> model (trace.load_trace) -> analyze (this module:
classification, exclusive attribution, steady-state steps, roofline) ->
findings (heuristics) -> render (report).

Everything crossing the stage boundary is a frozen dataclass; numpy stays
inside (no pandas: its import alone cost ~0.25 s of a 1.9 s end-to-end run).
`Analysis.to_dict()` (profanalyzer.model) is deterministic (sorted keys,
integer picoseconds, 12 significant digits) and is the JSON that `--json`
writes; `findings.load_analysis` reads it back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

import numpy as np

from profanalyzer import __version__
from profanalyzer.attribution import CoreWork, PlaneClasses, attribute_trace, classify_plane, locate  # noqa: F401 - old import paths
from profanalyzer.errors import InputError
from profanalyzer.stats import STRAGGLER_MIN_MEMBERS, STRAGGLER_MIN_REL_SCALE, STRAGGLER_Z, modified_z
from profanalyzer.model import (  # noqa: F401 - the records' old import path
    SCHEMA_VERSION,
    Analysis,
    BucketOps,
    BucketShare,
    ChipSpec,
    CoreSummary,
    HostSummary,
    StepRow,
    StepsSummary,
    TopOp,
    Utilisation,
    to_jsonable,
)
from profanalyzer.overlap import analyze_overlap
from profanalyzer.hostplanes import host_activity, no_host_planes_note
from profanalyzer.idle import idle_causes
from profanalyzer.memory import trace_memory
from profanalyzer.scopes import scope_rollup
from profanalyzer.stepclass import step_classes
from profanalyzer.timeline import build_timeline
from profanalyzer.vocab import ATTENTION_SPLIT, BUCKETS, COLLECTIVE_BUCKETS, MATMUL_BUCKETS, PHASES
from profanalyzer.trace import ANALYSIS_LINES, LINE_OPS, Trace, load_trace


#: Steady-state rule: a step is an outlier when |d - median| > K * scale, with
#: scale = max(1.4826 * MAD, MIN_REL_SCALE * median). Needs >= MIN_STEPS steps.
__all__ = [
    "AnalysisOptions", "analyze", "analyze_trace", "read_trace", "select_steps", "OpsResult",
    # re-exported: records (profanalyzer.model), per-core work (profanalyzer.attribution)
    "SCHEMA_VERSION", "Analysis", "BucketOps", "BucketShare", "CoreSummary", "HostSummary", "StepRow", "StepsSummary",
    "TopOp", "Utilisation", "to_jsonable", "CoreWork", "PlaneClasses", "attribute_trace", "classify_plane",
]

OUTLIER_K = 3.0
MIN_REL_SCALE = 0.005
MIN_STEPS_FOR_RULE = 3


# ---------------------------------------------------------------------------
# Analysis-internal results
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OpsResult:
    top: tuple[TopOp, ...]
    remat: tuple[TopOp, ...]
    kernels: tuple[TopOp, ...]
    buckets: Mapping[str, BucketOps]


# ---------------------------------------------------------------------------
# Classification of a plane's ops
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------


def select_steps(numbers: np.ndarray, durations: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Steady-state selection. Returns (kept mask, reasons for dropped steps)."""
    n = len(durations)
    kept = np.ones(n, dtype=bool)
    reasons = [""] * n
    if n < MIN_STEPS_FOR_RULE:
        return kept, reasons
    med = float(np.median(durations))
    mad = float(np.median(np.abs(durations - med))) * 1.4826
    scale = max(mad, MIN_REL_SCALE * med)
    for i in range(n):
        dev = (float(durations[i]) - med) / scale if scale > 0 else 0.0
        if abs(dev) > OUTLIER_K:
            kept[i] = False
            kind = "slower" if dev > 0 else "faster"
            first = " (first step: warm-up/compile)" if i == 0 and dev > 0 else ""
            reasons[i] = f"{abs(float(durations[i]) / med - 1) * 100:.1f}% {kind} than the median step{first}"
    if not kept.any():  # pathological: keep everything rather than nothing
        kept[:] = True
        reasons = [""] * n
    return kept, reasons


# ---------------------------------------------------------------------------
# The analysis
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AnalysisOptions:
    chip: str | None = None
    top_ops: int = 30
    jobs: int | None = None  # host files decoded in parallel (default: one per core)
    progress: object = None  # callable(done, total, label) after each host file
    memory: bool = False  # read HBM use (HLO buffer assignment, allocator activity): profanalyzer.memory
    host_activity: bool = False  # read the host planes' dispatch/input lines: profanalyzer.hostplanes


def read_trace(path: str | Path, options: AnalysisOptions = AnalysisOptions()) -> Trace:
    """The read stage as `analyze` runs it: only the lines the analysis uses."""
    return load_trace(path, chip=options.chip, jobs=options.jobs, progress=options.progress, lines=ANALYSIS_LINES)


def analyze(path: str | Path, options: AnalysisOptions = AnalysisOptions()) -> Analysis:
    return analyze_trace(read_trace(path, options), options)


def analyze_trace(trace: Trace, options: AnalysisOptions = AnalysisOptions()) -> Analysis:
    work = attribute_trace(trace)
    if not work or all(len(w.attribution.step_numbers) == 0 for w in work):
        raise InputError(f"{trace.source}: no steps and no XLA Ops events on any TensorCore: nothing to attribute")
    notes: list[str] = []
    if trace.note:
        notes.append(trace.note)
    rows = _core_step_rows(work)
    table, kept_mask, step_med = _step_table(rows)
    kept_steps = set(r.number for r in table if r.kept)
    row_kept = kept_mask[rows.step_index]

    # --- per core means over kept steps, then averaged over cores ---------
    col = rows.col
    core_ids = [ci for ci in range(len(work)) if (row_kept & (rows.core == ci)).any()]
    core_means = np.asarray([rows.vals[row_kept & (rows.core == ci)].mean(axis=0) for ci in core_ids]).reshape(len(core_ids), rows.vals.shape[1])
    core_counts = [int((row_kept & (rows.core == ci)).sum()) for ci in core_ids]
    avg = core_means.mean(axis=0)
    step_mean = float(avg[col["step_ps"]])
    denom = step_mean if step_mean > 0 else 1.0
    breakdown = {b: BucketShare(float(avg[col[b]]), float(avg[col[b]]) / denom) for b in BUCKETS}
    remat = BucketShare(float(avg[col["remat_ps"]]), float(avg[col["remat_ps"]]) / denom)
    phases = {p: BucketShare(float(avg[col[p]]), float(avg[col[p]]) / denom) for p in PHASES}
    per_core = _per_core(work, core_ids, core_means, core_counts, col)

    per_host = _per_host(per_core)
    ops, util = _ops_and_roofline(trace, work, kept_steps, step_mean, options.top_ops)
    overlap = analyze_overlap(trace, work, kept_steps, step_mean)
    timeline = build_timeline(trace, work, kept_steps, table, overlap.windows[0] if overlap.windows else None)

    sources = sorted({trace.steps[w.plane.label].source for w in work})
    steps = _steps_summary(table, step_med[kept_mask], step_mean, sources)
    steps = replace(steps, classes=step_classes(table))
    if any(s.startswith("XLA Modules") for s in sources):
        notes.append("no Steps line: steps are the runs of the dominant program on XLA Modules")
    idle = idle_causes(trace, work, kept_steps, step_mean)
    activity, activity_notes = host_activity(trace, work, kept_steps) if options.host_activity else ((), ())
    no_host = no_host_planes_note(trace)
    analysis = Analysis(
        schema_version=SCHEMA_VERSION,
        tool_version=__version__,
        source=trace.source,
        input_kind=trace.input_kind,
        run=trace.run,
        hosts=tuple(h.name for h in trace.hosts),
        hardware=ChipSpec.from_dict(trace.chip.to_dict()),
        chip_source=trace.chip_source,
        tensorcores=len(trace.tensorcores),
        sparsecores=len(trace.sparsecores),
        steps=steps,
        breakdown=breakdown,
        remat=remat,
        phases=phases,
        per_core=tuple(per_core),
        per_host=per_host,
        top_ops=ops.top,
        remat_ops=ops.remat,
        kernel_ops=ops.kernels,
        bucket_ops=ops.buckets,
        utilisation=util,
        collectives=overlap.types,
        communication=overlap.communication,
        sparsecore_offload=overlap.sparsecore,
        timeline=timeline,
        definitions=_definitions(steps),
        notes=tuple(notes) + idle.notes + tuple(dict.fromkeys(n for n in (*activity_notes, no_host) if n)),
        idle_causes=idle.causes,
        memory=trace_memory(trace) if options.memory else None,
        idle_host_activity=activity,
        scopes=scope_rollup(trace, work, kept_steps, step_mean),
    )
    analysis.self_check()
    return analysis


@dataclass(frozen=True, eq=False)
class _CoreStepRows:
    """One row per (core, step): step_ps, the buckets, remat_ps, the phases."""

    step: np.ndarray  # step number per row
    core: np.ndarray  # index into work per row
    vals: np.ndarray  # float64 (rows, columns)
    col: Mapping[str, int]  # column of each value
    step_numbers: np.ndarray  # distinct step numbers, ascending
    step_index: np.ndarray  # per row: index into step_numbers


def _core_step_rows(work: list[CoreWork]) -> _CoreStepRows:
    nums, cores, vals = [], [], []
    for ci, w in enumerate(work):
        a = w.attribution
        n = len(a.step_numbers)
        if not n:
            continue
        nums.append(np.asarray(a.step_numbers, dtype=np.int64))
        cores.append(np.full(n, ci, dtype=np.int64))
        vals.append(
            np.column_stack([np.asarray(a.step_ps, dtype=np.int64), a.buckets, np.asarray(a.remat_ps, dtype=np.int64), a.phase_ps]).astype(np.float64)
        )
    row_step = np.concatenate(nums)
    step_numbers, row_si = np.unique(row_step, return_inverse=True)
    col = {c: i for i, c in enumerate(("step_ps", *BUCKETS, "remat_ps", *PHASES))}
    return _CoreStepRows(row_step, np.concatenate(cores), np.concatenate(vals), col, step_numbers, row_si)


def _step_table(rows: _CoreStepRows) -> tuple[tuple[StepRow, ...], np.ndarray, np.ndarray]:
    """The consensus step table (by step number, median over cores), the kept
    mask and the median step time per step."""
    col, step_numbers = rows.col, rows.step_numbers
    bcols = [col[b] for b in BUCKETS]
    step_med = np.empty(len(step_numbers))
    bucket_mean_by_step = np.empty((len(step_numbers), len(BUCKETS)))
    for i in range(len(step_numbers)):
        sel = rows.vals[rows.step_index == i]
        step_med[i] = np.median(sel[:, col["step_ps"]])
        bucket_mean_by_step[i] = sel[:, bcols].mean(axis=0)
    kept_mask, reasons = select_steps(step_numbers, step_med)
    table = tuple(
        StepRow(
            number=int(n),
            step_ps=float(step_med[i]),
            kept=bool(kept_mask[i]),
            reason=reasons[i],
            buckets={b: float(bucket_mean_by_step[i, j]) for j, b in enumerate(BUCKETS)},
        )
        for i, n in enumerate(step_numbers.tolist())
    )
    return table, kept_mask, step_med


def _per_core(work: list[CoreWork], core_ids: list[int], core_means: np.ndarray, core_counts: list[int],
              col: Mapping[str, int]) -> list[CoreSummary]:
    """Per-core means over the kept steps, and straggler cores (modified z of compute time)."""
    # --- per-core spread, stragglers ---------------------------------------
    busy = core_means[:, col["step_ps"]] - core_means[:, col["idle"]]
    compute = busy - core_means[:, [col[b] for b in BUCKETS if b in COLLECTIVE_BUCKETS]].sum(axis=1)
    floor = STRAGGLER_MIN_REL_SCALE * float(np.median(core_means[:, col["step_ps"]])) if len(core_ids) else 0.0
    zs = modified_z(compute, floor)
    per_core = []
    for j, ci in enumerate(core_ids):
        w = work[ci]
        z = float(zs[j]) if len(work) >= 3 else 0.0
        m = core_means[j]
        per_core.append(
            CoreSummary(
                core=w.plane.label,
                host=w.plane.host,
                plane=w.plane.name,
                steps_kept=core_counts[j],
                step_ps=float(m[col["step_ps"]]),
                busy_ps=float(busy[j]),
                compute_ps=float(compute[j]),
                buckets={b: float(m[col[b]]) for b in BUCKETS},
                remat_ps=float(m[col["remat_ps"]]),
                straggler=bool(len(work) >= STRAGGLER_MIN_MEMBERS and z > STRAGGLER_Z),
                busy_z=z,
            )
        )
    return per_core


def _steps_summary(table: tuple[StepRow, ...], kept_d: np.ndarray, step_mean: float, sources: list[str]) -> StepsSummary:
    steps = StepsSummary(
        count=len(table),
        kept=sum(1 for r in table if r.kept),
        source="; ".join(sources),
        step_time_ps={
            "median": float(np.median(kept_d)),
            "min": float(kept_d.min()),
            "max": float(kept_d.max()),
            "mean": step_mean,
        },
        dropped=tuple(r for r in table if not r.kept),
        rule=(
            f"steps whose duration (median over TensorCores) differs from the median step by more than "
            f"{OUTLIER_K:g} x max(1.4826 x MAD, {MIN_REL_SCALE:.1%} of the median) are dropped "
            f"(rule applied with >= {MIN_STEPS_FOR_RULE} steps)"
        ),
        table=table,
    )
    return steps


def _definitions(steps: StepsSummary) -> dict[str, str]:
    definitions = {
        "step_time": f"step windows from {steps.source}; each TensorCore's step time is its own window",
        "buckets": "each instant of a step goes to the deepest XLA op running then (self time), or idle when none runs",
        "exposed_communication": "time a collective op itself occupies the TensorCore (synchronous collectives, and start/done/call-start/call-done halves of async ones): the core computes nothing then",
        "remat": "self time of recomputed ops (.remat instruction names or /rematted_computation/ in tf_op); overlaps the buckets",
        "breakdown": "mean per kept step on each TensorCore, then averaged over TensorCores",
        "hidden_fraction": "TensorCore compute time inside a collective's window (start to done, or the op itself when synchronous) / window",
        "mfu": "model FLOPs of the step's ops / (step time x BF16 peak of one TensorCore)",
    }
    return definitions


def _per_host(per_core: list[CoreSummary]) -> tuple[HostSummary, ...]:
    """Per-host means and straggler hosts, the fleet view's rule: modified
    z-score (scale floored at STRAGGLER_MIN_REL_SCALE of the median step)
    above STRAGGLER_Z on step time, or below -STRAGGLER_Z on waiting time
    (idle + exposed communication: the slow host waits least), with at least
    STRAGGLER_MIN_MEMBERS hosts."""
    hosts = sorted({c.host for c in per_core})
    rows = []
    for h in hosts:
        cs = [c for c in per_core if c.host == h]
        comm = [sum(v for b, v in c.buckets.items() if b in COLLECTIVE_BUCKETS) for c in cs]
        rows.append((h, len(cs), float(np.mean([c.step_ps for c in cs])), float(np.mean([c.compute_ps for c in cs])),
                     float(np.mean(comm)), float(np.mean([c.buckets["idle"] for c in cs]))))
    many = len(rows) >= STRAGGLER_MIN_MEMBERS
    floor = STRAGGLER_MIN_REL_SCALE * float(np.median([r[2] for r in rows])) if rows else 0.0
    zs = modified_z([r[2] for r in rows], floor) if many else [0.0] * len(rows)
    zw = modified_z([r[4] + r[5] for r in rows], floor) if many else [0.0] * len(rows)
    return tuple(
        HostSummary(h, n, st, cp, cm, idle, zs[i], zw[i], bool(many and (zs[i] > STRAGGLER_Z or zw[i] < -STRAGGLER_Z)))
        for i, (h, n, st, cp, cm, idle) in enumerate(rows)
    )


class _OpGroup:
    """Accumulator of one (name, HLO category, bucket) op group over the
    kept steps of every TensorCore (analysis-internal)."""

    __slots__ = ("name", "hlo_category", "bucket", "self_ps", "count", "tot_flops", "tot_model_flops", "mf_known",
                 "tot_bytes", "flops", "bytes", "tf_op", "dedup", "remat", "phase", "kernel", "precision", "reason")

    def __init__(self, name: str, hlo_category: str, bucket: str) -> None:
        self.name, self.hlo_category, self.bucket = name, hlo_category, bucket
        self.self_ps = self.count = self.mf_known = 0
        self.tot_flops = self.tot_model_flops = self.tot_bytes = 0.0
        self.flops = self.bytes = math.nan
        self.tf_op = self.dedup = self.phase = self.kernel = self.precision = self.reason = None
        self.remat = False


def _ops_and_roofline(trace: Trace, work: list[CoreWork], kept_steps: set[int], step_mean: float, top_n: int):
    """Per-op self time, FLOPs and bytes over the kept steps of every
    TensorCore, grouped by (name, HLO category, bucket); MFU and MXU use."""
    chip = trace.chip
    peak_bf16 = chip.core_peak_bf16_flops
    kept_list = np.asarray(sorted(kept_steps), dtype=np.int64)
    groups: dict[tuple[str, str, str], _OpGroup] = {}
    mf_model = mf_flops = 0.0  # model FLOPs (falling back to FLOPs per op), FLOPs
    any_model = any_flops = False
    mm_self, mm_cap, mm_flops = 0, 0.0, 0.0
    n_core_steps = 0
    for w in work:
        steps = trace.steps[w.plane.label]
        kept = np.isin(steps.number, kept_list)
        n_core_steps += int(kept.sum())
        ln = w.plane.line(LINE_OPS)
        if ln is None or len(ln.events) == 0:
            continue
        ev = ln.events
        ks, ke = steps.start_ps[kept], steps.end_ps[kept]
        order = np.argsort(ks)
        ks, ke = ks[order], ke[order]
        inside = locate(ks, ke, ev.start_ps)[1] & (ev.meta >= 0)
        if not inside.any():
            continue
        md = w.plane.meta
        r_in = ev.meta[inside].astype(np.int64)
        counts = np.bincount(r_in, minlength=len(md))
        # Exact: per-row sums stay far below 2**53 ps.
        self_sum = np.rint(np.bincount(r_in, weights=ev.self_ps[inside], minlength=len(md))).astype(np.int64)
        rows = np.flatnonzero(counts)
        cols = w.classes.columns
        bucket_c, remat_c, phase_c, kernel_c = cols["bucket"], cols["remat"], cols["phase"], cols["kernel"]
        precision_c, reason_c = cols["precision"], cols["reason"]
        for r, cnt, sp, f, mf, by in zip(rows.tolist(), counts[rows].tolist(), self_sum[rows].tolist(),
                                         md.flops[rows].tolist(), md.model_flops[rows].tolist(), md.bytes_accessed[rows].tolist()):
            bucket = bucket_c[r] if r < len(bucket_c) else "other_compute"
            tot_f = (0.0 if f != f else f) * cnt
            tot_b = (0.0 if by != by else by) * cnt
            if mf == mf:
                any_model = True
                mf_model += mf * cnt
            else:
                mf_model += tot_f
            if f == f:
                any_flops = True
                mf_flops += tot_f
                if bucket in MATMUL_BUCKETS:
                    mm_self += sp
                    mm_cap += sp * 1e-12 * (chip.core_peak_fp8_flops if bucket == "matmul_fp8" else peak_bf16)
                    mm_flops += tot_f
            name, cat = md.short_name(r), md.category[r]
            g = groups.get((name, cat, bucket))
            if g is None:
                g = groups[(name, cat, bucket)] = _OpGroup(name, cat, bucket)
            g.self_ps += sp
            g.count += cnt
            g.tot_flops += tot_f
            g.tot_bytes += tot_b
            if mf == mf:
                g.tot_model_flops += mf * cnt
                g.mf_known += 1
            if f == f and not (f <= g.flops):
                g.flops = f
            if by == by and not (by <= g.bytes):
                g.bytes = by
            if r < len(bucket_c):
                g.remat = g.remat or bool(remat_c[r])
                for attr, v in (("phase", phase_c[r]), ("kernel", kernel_c[r]), ("precision", precision_c[r]), ("reason", reason_c[r])):
                    if getattr(g, attr) is None and v is not None:
                        setattr(g, attr, v)
            if g.tf_op is None:
                g.tf_op = md.tf_op[r]
            if g.dedup is None:
                g.dedup = md.deduplicated_name[r]
    n_core_steps = n_core_steps or 1
    if not groups:
        return OpsResult((), (), (), {}), Utilisation(None, "none", None)

    # Utilisation over all kept steps and cores.
    total_time_s = step_mean * 1e-12 * n_core_steps
    mf, src = (mf_model, "model_flops") if any_model else ((mf_flops, "flops") if any_flops else (0.0, "none"))
    mfu = mf / (total_time_s * peak_bf16) if src != "none" and total_time_s > 0 else None
    mxu = (mm_flops / mm_cap if mm_cap > 0 else None) if mm_self > 0 else None
    util = Utilisation(mfu, src, mxu)

    agg = sorted(groups.values(), key=lambda g: (-g.self_ps, g.name))
    denom = step_mean if step_mean > 0 else 1.0
    ctx = (chip, n_core_steps, denom)
    top = tuple(_top_op(g, *ctx) for g in agg[:top_n])
    remat_ops = tuple(_top_op(g, *ctx) for g in [g for g in agg if g.remat][:REMAT_TOP])
    kernels = tuple(_top_op(g, *ctx) for g in [g for g in agg if g.kernel is not None and str(g.kernel) != ""][:KERNELS_TOP])
    summaries = _bucket_summaries(agg, n_core_steps, denom, chip)
    return OpsResult(top, remat_ops, kernels, summaries), util


REMAT_TOP = 15
KERNELS_TOP = 20


def _top_op(r, chip, n_core_steps: int, denom: float) -> "TopOp":
    peak_bf16 = chip.core_peak_bf16_flops
    t_s = r.self_ps * 1e-12
    has_f = r.flops == r.flops and r.flops is not None and r.flops > 0
    has_b = r.bytes == r.bytes and r.bytes is not None and r.bytes > 0
    intensity = (r.flops / r.bytes) if has_f and has_b else None
    tflops = (r.tot_flops / t_s / 1e12) if has_f and t_s > 0 else None
    gbps = (r.tot_bytes / t_s / 1e9) if has_b and t_s > 0 else None
    peak = chip.core_peak_fp8_flops if (r.bucket == "matmul_fp8" or r.precision == "fp8") else peak_bf16
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
    mf = r.tot_model_flops
    return TopOp(
        name=r.name,
        hlo_category=r.hlo_category,
        bucket=r.bucket,
        tags=tuple(tags),
        tf_op=r.tf_op,
        reason=r.reason,
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
        deduplicated_name=r.dedup,
        model_flops_ratio=(float(mf) / r.tot_flops) if has_f and r.mf_known > 0 and r.tot_flops > 0 else None,
    )


def _intensity(flops: float, nbytes: float) -> float:
    """FLOPs per byte; nan when either is unknown (or 0/0)."""
    if flops != flops or nbytes != nbytes or (nbytes == 0 and flops == 0):
        return math.nan
    if nbytes == 0:
        return math.copysign(math.inf, flops)
    return flops / nbytes


def _bucket_summaries(agg: list[_OpGroup], n_core_steps: int, denom: float, chip) -> dict:
    """Per bucket (and attention split by kernel/unfused): time, FLOPs, bytes,
    compute- vs HBM-bound time, per step per TensorCore."""
    names = [b for b in BUCKETS if b != "idle"] + list(ATTENTION_SPLIT)
    acc = {n: [0, 0, 0.0, 0.0, 0.0, 0, 0, 0] for n in names}  # ps, ops, flops, model, bytes, compute, hbm, remat
    for g in agg:
        inten = _intensity(g.flops, g.bytes)
        peak = chip.core_peak_fp8_flops if g.bucket == "matmul_fp8" else chip.core_peak_bf16_flops
        compute_bound = inten >= peak / chip.core_hbm_bytes_per_s
        targets = [g.bucket] if g.bucket in acc else []
        if g.bucket == "attention":
            targets.append("attention_kernel" if g.kernel is not None and str(g.kernel) != "" else "attention_unfused")
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
