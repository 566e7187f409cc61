"""The analysis stage of the pipeline (profanalyzer.pipeline.run.run calls it).

read (xspace.read_trace: a Source -> trace) -> analyze (this module:
classification, exclusive attribution, steady-state steps, roofline) ->
findings (heuristics) -> render (report).

Everything crossing the stage boundary is a frozen dataclass; numpy stays
inside (no pandas: its import alone cost ~0.25 s of a 1.9 s end-to-end run).
`Analysis.to_dict()` (profanalyzer.model.analysis) is deterministic (sorted keys,
integer picoseconds, 12 significant digits) and is the JSON that `--json`
writes; `findings.load_analysis` reads it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from profanalyzer.analyze.antipatterns import find_antipatterns
from profanalyzer.analyze.attributed import Attributed, trace_program
from profanalyzer.analyze.attribution import CoreWork, attribute_trace
from profanalyzer.analyze.capture import assumptions, capture_quality
from profanalyzer.analyze.collectives import diagnose_collectives
from profanalyzer.analyze.counters import (
    counter_matmul_rows,
    kernel_counters,
    ops_precision,
    trace_counter_lines,
    with_counter_tags,
    with_device_peaks,
)
from profanalyzer.analyze.expected import summarize as expected_summary
from profanalyzer.analyze.hostplanes import host_activity, no_host_planes_note
from profanalyzer.analyze.idle import IdleResult, idle_causes
from profanalyzer.analyze.kernelflops import (
    attention_kernel_rows,
    attention_kernels,
    kernel_byte_rows,
)
from profanalyzer.analyze.kvcache import (
    cache_attention_rows,
    cache_contractions,
    decode_cache,
)
from profanalyzer.analyze.opgroups import OpGroups
from profanalyzer.analyze.opstats import (
    RATE_MIN_RUN_PS,
    ops_and_roofline,
    program_names,
    run_kind_of,
)
from profanalyzer.analyze.overlap import analyze_overlap
from profanalyzer.analyze.scopes import scope_rollup
from profanalyzer.analyze.sourcelines import with_source_lines
from profanalyzer.analyze.stepclass import step_classes
from profanalyzer.analyze.timeline import build_timeline
from profanalyzer.classify import Memo
from profanalyzer.core.errors import InputError
from profanalyzer.core.stats import (
    STRAGGLER_MIN_MEMBERS,
    STRAGGLER_MIN_REL_SCALE,
    STRAGGLER_Z,
    median,
    modified_z,
)
from profanalyzer.core.version import __version__
from profanalyzer.core.vocab import (
    BUCKETS,
    COLLECTIVE_BUCKETS,
    PHASES,
    PREDICTED_INPUT_KINDS,
)
from profanalyzer.model.analysis import (
    SCHEMA_VERSION,
    Analysis,
    BucketShare,
    CoreSummary,
    HostSummary,
    StepRow,
    StepsSummary,
)
from profanalyzer.model.parts import ChipSpec
from profanalyzer.model.trace import Trace

#: Steady-state rule: a step is an outlier when |d - median| > K * scale, with
#: scale = max(1.4826 * MAD, MIN_REL_SCALE * median). Needs >= MIN_STEPS steps.
__all__ = [
    "AnalysisOptions", "analyze_trace", "attribute", "analyze_attributed", "select_steps",
    "step_consensus", "median_kept_step",
]

OUTLIER_K = 3.0
MIN_REL_SCALE = 0.005
MIN_STEPS_FOR_RULE = 3


# ---------------------------------------------------------------------------
# Analysis-internal results
# ---------------------------------------------------------------------------


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
    med = median(durations)
    mad = median(np.abs(durations - med)) * 1.4826
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


def step_consensus(numbers: np.ndarray, durations: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """The one definition of the step time, for `analyze` and `info` alike.

    `numbers`, `durations`: one row per (TensorCore, step window). Returns the
    distinct step numbers (ascending), each step's time (the median over the
    TensorCores that have it), the kept (steady-state) mask and the reasons of
    the dropped steps (`select_steps`). The run's step time is the median of
    the kept steps' times (`median_kept_step`)."""
    step_numbers, index = np.unique(np.asarray(numbers, dtype=np.int64), return_inverse=True)
    durations = np.asarray(durations, dtype=np.float64)
    step_med = np.empty(len(step_numbers))
    for i in range(len(step_numbers)):
        step_med[i] = median(durations[index == i])
    kept, reasons = select_steps(step_numbers, step_med)
    return step_numbers, step_med, kept, reasons


def median_kept_step(trace: Trace) -> tuple[float | None, int, int]:
    """(median step time, kept steps, steps) of a trace's step windows, as
    `analyze` reports them (`step_consensus` over every TensorCore)."""
    nums, durs = [], []
    for p in trace.tensorcores:
        st = trace.steps.get(p.label)
        if st is not None and len(st):
            nums.append(np.asarray(st.number, dtype=np.int64))
            durs.append(np.asarray(st.end_ps, dtype=np.int64) - np.asarray(st.start_ps, dtype=np.int64))
    if not nums:
        return None, 0, 0
    numbers, step_med, kept, _ = step_consensus(np.concatenate(nums), np.concatenate(durs))
    return float(median(step_med[kept])), int(kept.sum()), len(numbers)


# ---------------------------------------------------------------------------
# The analysis
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AnalysisOptions:
    chip: str | None = None
    top_ops: int = 30
    jobs: int | None = None  # host files decoded in parallel (default: one per core)
    progress: object = None  # callable(done, total, label) after each host file
    memory: bool = False  # read HBM use (HLO buffer assignment, allocator activity): profanalyzer.analyze.memory
    host_activity: bool = False  # read the host planes' dispatch/input lines: profanalyzer.analyze.hostplanes


#: The defaults, one shared instance (frozen) for every `options=` default.
DEFAULT_ANALYSIS_OPTIONS = AnalysisOptions()


def _cache_read_ps(ops, att: Attributed) -> float:
    """The time of the ops that read the KV cache: the attention bucket's decode part, and the attention
    kernels (paged / ragged) that contract the cache."""
    found = att.kv_contractions
    ps = ops.buckets["attention_decode"].ps if "attention_decode" in ops.buckets else 0.0
    g = ops.groups
    if not found or not isinstance(g, OpGroups) or "attention" not in ops.buckets:
        return ps
    att_rows = [i for i, b in enumerate(g.bucket) if b == "attention"]
    raw = float(sum(int(g.self_ps[i]) for i in att_rows))
    kern = float(sum(int(g.self_ps[i]) for i in att_rows if g.part[i] == "kernel" and g.name[i] in found))
    return ps + (kern * ops.buckets["attention"].ps / raw if raw > 0 else 0.0)


def analyze_trace(trace: Trace, options: AnalysisOptions = DEFAULT_ANALYSIS_OPTIONS) -> Analysis:
    return analyze_attributed(attribute(trace), options)


@dataclass(frozen=True, eq=False)
class _Tables:
    """What `attribute` computed on the way to the kept steps and the step
    mean, kept for `analyze_attributed`'s summaries."""

    rows: _CoreStepRows
    kept_mask: np.ndarray
    step_med: np.ndarray
    core_ids: list[int]
    core_means: np.ndarray
    core_counts: list[int]
    avg: np.ndarray
    peaks_note: str  # where the chip's peaks came from ("" when the hardware table's)


def attribute(trace: Trace, memo: Memo | None = None) -> Attributed:
    """Classify and attribute every TensorCore, then keep the steady-state
    steps: the context every analysis stage takes (built once per run). The
    chip's peaks come from the device planes when they carry them. `memo`:
    the run's classify memo (a new one when None), kept by the Attributed."""
    memo = memo if memo is not None else Memo()
    trace, peaks_note = with_device_peaks(trace)
    work = attribute_trace(trace, memo=memo)
    lines = trace_counter_lines(trace)  # read once per run: the re-bucketing and the kernel counters use them
    moved = counter_matmul_rows(trace, work, lines)  # counters as matmul evidence: re-bucket, then attribute again
    program = trace_program(trace)  # read once per run: the KV-cache contractions, anti-patterns, source lines use it
    main = program[0].main if program[0] is not None and program[0].modules else None
    contractions = cache_contractions(main) if main is not None else {}  # found once: re-bucketing and summary
    for found in (cache_attention_rows(work, contractions), attention_kernel_rows(work, main)):
        for label, found_rows in found.items():
            moved = {**moved, label: {**moved.get(label, {}), **found_rows}}
    if moved:
        work = attribute_trace(trace, moved, memo)
    if not work or all(len(w.attribution.step_numbers) == 0 for w in work):
        raise InputError(f"{trace.source}: no steps and no XLA Ops events on any TensorCore: nothing to attribute")
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
    return Attributed(trace, work, kept_steps, step_mean, table,
                      _Tables(rows, kept_mask, step_med, core_ids, core_means, core_counts, avg, peaks_note),
                      classify=memo, programs=program, counter_lines=lines, kv_contractions=contractions,
                      kernel_bytes=kernel_byte_rows(work, main))


def analyze_attributed(att: Attributed, options: AnalysisOptions = DEFAULT_ANALYSIS_OPTIONS) -> Analysis:
    """The Analysis of an attributed trace: every stage reads `att`."""
    trace, work, table, step_mean = att.trace, att.work, att.step_table, att.step_mean
    t: _Tables = att.tables
    rows, kept_mask, step_med, core_ids, core_means, core_counts, avg = (
        t.rows, t.kept_mask, t.step_med, t.core_ids, t.core_means, t.core_counts, t.avg)
    col = rows.col
    notes: list[str] = []
    if trace.note:
        notes.append(trace.note)
    predicted = trace.input_kind in PREDICTED_INPUT_KINDS  # a replayed program: its planes are made, not captured
    if t.peaks_note and not predicted:
        notes.append(t.peaks_note)
    program = att.programs[0]
    if program is not None and program.literal_source:
        notes.append(f"the capture's HLO carries no constant values: kernels' masks read from the XLA dump of the "
                     f"same compile beside it ({program.literal_source})")
    denom = step_mean if step_mean > 0 else 1.0
    breakdown = {b: BucketShare(float(avg[col[b]]), float(avg[col[b]]) / denom) for b in BUCKETS}
    remat = BucketShare(float(avg[col["remat_ps"]]), float(avg[col["remat_ps"]]) / denom)
    phases = {p: BucketShare(float(avg[col[p]]), float(avg[col[p]]) / denom) for p in PHASES}
    per_core = _per_core(work, core_ids, core_means, core_counts, col)

    per_host = _per_host(per_core)
    ops, util = ops_and_roofline(att, options.top_ops)
    overlap = analyze_overlap(att)
    timeline = build_timeline(att, overlap.windows[0] if overlap.windows else None)

    sources = sorted({trace.steps[w.plane.label].source for w in work})
    steps = _steps_summary(table, step_med[kept_mask], step_mean, sources)
    steps = replace(steps, classes=step_classes(table))
    if any(s.startswith("XLA Modules") for s in sources):
        notes.append("no Steps line: steps are the runs of the dominant program on XLA Modules")
    n_core_steps = max(1, sum(core_counts))
    run_kind = run_kind_of(ops.groups, step_mean, n_core_steps, phases, remat.ps, program_names(trace))
    has_colls = any(t.count > 0 for t in overlap.types.values())
    # a replayed program runs back to back by construction: why-idle is a capture's question (issue 32 item 8)
    idle = IdleResult({}, ()) if predicted else idle_causes(att)
    activity, activity_notes = host_activity(att) if options.host_activity else ((), ())
    no_host = no_host_planes_note(trace) if not predicted else ""
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
        per_core=tuple(replace(c, idle_causes=idle.by_core.get(c.core, {})) for c in per_core),
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
        run_kind=run_kind,
        host_offload=ops.host_offload,
        capture=capture_quality(att, steps, util, has_colls),
        assumptions=assumptions(trace, util),
        notes=tuple(notes) + idle.notes + tuple(dict.fromkeys(n for n in (*activity_notes, no_host) if n)),
        idle_causes=idle.causes,
        memory=_memory(trace) if options.memory else None,
        idle_host_activity=activity,
        scopes=scope_rollup(att),
        idle_causes_by_step=idle.by_step,
        collective_diagnosis=diagnose_collectives(att, overlap),
        antipatterns=find_antipatterns(att),
        attention_kernels=attention_kernels(ops.kernels, att.main_module),
        decode_cache=decode_cache(att.main_module, att.kv_contractions, _cache_read_ps(ops, att),
                                  trace.chip.core_hbm_bytes_per_s),
        kernel_counters=kernel_counters(att, ops_precision(ops.top)),
        expected=expected_summary(att, steps.count),
        program_memory=trace.program_memory,
    )
    analysis = with_time_basis(with_counter_tags(with_source_lines(analysis, att)))
    analysis.self_check()
    return analysis


def with_time_basis(a: Analysis) -> Analysis:
    """Mark every time of a replayed compiled program as predicted (issue #25): the document, its steps,
    buckets, remat, phases and op tables carry `time_basis`."""
    if a.input_kind not in PREDICTED_INPUT_KINDS:
        return a
    p = "predicted"

    def ops(rows):
        return tuple(replace(r, time_basis=p) for r in rows)

    return replace(a, time_basis=p, steps=replace(a.steps, time_basis=p),
                   breakdown={k: replace(v, time_basis=p) for k, v in a.breakdown.items()},
                   remat=replace(a.remat, time_basis=p),
                   phases={k: replace(v, time_basis=p) for k, v in a.phases.items()},
                   top_ops=ops(a.top_ops), remat_ops=ops(a.remat_ops), kernel_ops=ops(a.kernel_ops))


def _memory(trace: Trace):
    """The memory section (--memory): imported only when asked for."""
    from profanalyzer.analyze.memory import trace_memory

    return trace_memory(trace)


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
    _, step_med, kept_mask, reasons = step_consensus(rows.step, rows.vals[:, col["step_ps"]])
    bucket_mean_by_step = np.empty((len(step_numbers), len(BUCKETS)))
    for i in range(len(step_numbers)):
        bucket_mean_by_step[i] = rows.vals[rows.step_index == i][:, bcols].mean(axis=0)
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
    # compute: busy minus the collectives and the host-offload waits (a core waiting on a host DMA does not compute)
    compute = busy - core_means[:, [col[b] for b in BUCKETS if b in COLLECTIVE_BUCKETS or b == "host_offload"]].sum(axis=1)
    floor = STRAGGLER_MIN_REL_SCALE * median(core_means[:, col["step_ps"]]) if len(core_ids) else 0.0
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
            "median": median(kept_d),
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
        "mfu": "model FLOPs of the step's ops, each counted once (rematerialised ops excluded) / (step time x BF16 "
               "peak of one TensorCore)",
        "hfu": "hardware FLOPs utilisation: every FLOP the step executed, recompute included / (step time x BF16 "
               "peak of one TensorCore)",
        "op_rates": (f"an op's TFLOP/s, GB/s and share of its roofline are over its self time, and only for ops whose runs "
                     f"last at least {RATE_MIN_RUN_PS / 1e6:g} us on average: under that the duration is a launch or a few "
                     "timestamp ticks, not a rate"),
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
    floor = STRAGGLER_MIN_REL_SCALE * median([r[2] for r in rows]) if rows else 0.0
    zs = modified_z([r[2] for r in rows], floor) if many else [0.0] * len(rows)
    zw = modified_z([r[4] + r[5] for r in rows], floor) if many else [0.0] * len(rows)
    return tuple(
        HostSummary(h, n, st, cp, cm, idle, zs[i], zw[i], bool(many and (zs[i] > STRAGGLER_Z or zw[i] < -STRAGGLER_Z)))
        for i, (h, n, st, cp, cm, idle) in enumerate(rows)
    )
