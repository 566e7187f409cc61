"""The notebook's data views of the records: `Analysis.frames()` (pandas
DataFrames). Their HTML cards are renderers (profanalyzer.report.cards).

pandas is imported inside `analysis_frames` only: the command line never
calls it (tests/test_fleet.py checks that `profanalyze TRACE` imports
neither pandas nor Dask). This module reads the records by attribute and
imports no record module (model/analysis.py calls it, so it sits beside the records).

The frames and their columns (times in picoseconds, fractions of the step):

steps     step x TensorCore when the per-core step times are at hand
          (`profanalyzer.load` of a trace: `core` is host:plane); else (a
          saved document, or `Analysis.frames()`) one row per step of the
          steps table, its time the median over TensorCores (`core`
          'median'). kept/reason are the step's (the analysis keeps or drops
          a step for all cores):
          step, step_ps, kept, reason, core
buckets   the step time by bucket at up to four scopes, `scope` says which:
          'run' (the breakdown: mean per kept step over TensorCores),
          'step' (one step, mean over TensorCores), 'core' (one TensorCore,
          mean over its kept steps), 'step_core' (one TensorCore in one
          step, when the per-core step times are at hand):
          scope, step (<NA> for 'run' and 'core'), core (<NA> for 'run'
          and 'step'), bucket, ps, fraction
ops       the ops tables: top ops, recomputed (remat) ops and kernels
          (`table`: 'top_ops' | 'remat_ops' | 'kernel_ops'), every TopOp
          field: name, hlo_category, bucket, tags, tf_op, reason, self_ps,
          fraction, count, flops, bytes, intensity, tflops_per_s, gbps,
          bound_by, roofline_fraction, deduplicated_name, model_flops_ratio
windows   collective windows the analysis holds (it does not keep every
          window of every step): the most exposed ones over the run
          (`source` 'top_exposed') and every window of the representative
          step of the timeline (`source` 'timeline'):
          source, core, step, type, name, engine, start_ps (from the step
          start), end_ps, window_ps, exposed_ps, hidden_ps, hidden_fraction,
          klass (hidden | partial | exposed)
findings  one row per recommendation, in rank order: rank, code, lever,
          title, severity, saving_ps, saving_fraction, evidence (list),
          actions (list), assumptions (list), guide_section, flags (list:
          the LIBTPU_INIT_ARGS flags, in order)
counters  one row per (op, unit) of the kernel counters (empty without
          counter lines): op, bucket, unit, utilisation (time-weighted over
          the op's runs), median (sample), ep_wait_fraction, verdict, lever,
          ps (the op's time per kept step per TensorCore)
"""

from __future__ import annotations

from typing import Any

__all__ = ["FRAME_COLUMNS", "analysis_frames"]

_OP_FIELDS = ("name", "hlo_category", "bucket", "tags", "tf_op", "reason", "self_ps", "fraction", "count", "flops", "bytes",
              "intensity", "tflops_per_s", "gbps", "bound_by", "roofline_fraction", "deduplicated_name", "model_flops_ratio")

#: The columns of each frame, in order (the module docstring says what they hold).
FRAME_COLUMNS: dict[str, tuple[str, ...]] = {
    "steps": ("step", "step_ps", "kept", "reason", "core"),
    "buckets": ("scope", "step", "core", "bucket", "ps", "fraction"),
    "ops": ("table",) + _OP_FIELDS,
    "windows": ("source", "core", "step", "type", "name", "engine", "start_ps", "end_ps", "window_ps", "exposed_ps",
                "hidden_ps", "hidden_fraction", "klass"),
    "findings": ("rank", "code", "lever", "title", "severity", "saving_ps", "saving_fraction", "evidence", "actions",
                 "assumptions", "guide_section", "flags"),
    "counters": ("op", "bucket", "unit", "utilisation", "median", "ep_wait_fraction", "verdict", "lever", "ps"),
}


def _rows(a: Any, findings: Any, core_steps: Any = None) -> dict[str, list[tuple]]:
    rows: dict[str, list[tuple]] = {k: [] for k in FRAME_COLUMNS}
    if core_steps:
        verdict = {r.number: (r.kept, r.reason) for r in a.steps.table}
        for c in core_steps:
            kept, reason = verdict.get(c.step, (False, "not in the steps table"))
            rows["steps"].append((c.step, float(c.step_ps), kept, reason, c.core))
    else:
        for r in a.steps.table:
            rows["steps"].append((r.number, r.step_ps, r.kept, r.reason, "median"))
    for b, s in a.breakdown.items():
        rows["buckets"].append(("run", None, None, b, s.ps, s.fraction))
    for r in a.steps.table:
        total = r.step_ps or 0.0
        for b, ps in r.buckets.items():
            rows["buckets"].append(("step", r.number, None, b, ps, ps / total if total else None))
    for c in a.per_core:
        for b, ps in c.buckets.items():
            rows["buckets"].append(("core", None, c.core, b, ps, ps / c.step_ps if c.step_ps else None))
    for cs in core_steps or ():
        for b, ps in cs.buckets.items():
            rows["buckets"].append(("step_core", cs.step, cs.core, b, float(ps), ps / cs.step_ps if cs.step_ps else None))
    for table in ("top_ops", "remat_ops", "kernel_ops"):
        for op in getattr(a, table):
            rows["ops"].append((table,) + tuple(list(v) if isinstance(v, tuple) else v for v in (getattr(op, f) for f in _OP_FIELDS)))
    for w in a.communication.top_exposed:
        rows["windows"].append(("top_exposed", w.core, w.step, w.type, w.name, w.engine, w.offset_ps, w.offset_ps + w.window_ps,
                                w.window_ps, w.exposed_ps, w.hidden_ps, w.hidden_fraction, w.klass))
    tl = a.timeline
    if tl is not None:
        engines = {}
        for t, cs in a.collectives.items():
            engines[t] = cs.engine
        for w in tl.windows:
            span = w.end_ps - w.start_ps
            hidden = round(span * w.hidden_fraction)
            rows["windows"].append(("timeline", tl.core, tl.step, w.type, w.name, engines.get(w.type, ""), w.start_ps, w.end_ps,
                                    span, span - hidden, hidden, w.hidden_fraction, w.klass))
    for i, f in enumerate(findings.recommendations if findings is not None else (), 1):
        rows["findings"].append((i, f.code, f.lever, f.title, f.severity, f.estimated_saving_ps, f.estimated_saving_fraction,
                                 list(f.evidence), list(f.actions), list(f.assumptions), f.guide_section, list(f.flags)))
    for k in getattr(a, "kernel_counters", None) or ():
        for u in sorted(set(k.utilisation) | set(k.median_utilisation)) or [""]:
            rows["counters"].append((k.op, k.bucket, u, k.utilisation.get(u), k.median_utilisation.get(u),
                                     k.ep_wait_fraction, k.verdict, k.lever, k.ps))
    return rows


def analysis_frames(a: Any, findings: Any = None, core_steps: Any = None) -> dict[str, Any]:
    """The DataFrames of an analysis (and of its findings, when given; else
    the `findings` frame is empty with its columns; and of each TensorCore's
    time per step, when given: `profanalyzer.load` of a trace gives them)."""
    import pandas as pd  # type: ignore[import-untyped]  # the notebook API's dependency (no stubs); never imported by the CLI

    out = {}
    for name, rows in _rows(a, findings, core_steps).items():
        df = pd.DataFrame.from_records(rows, columns=list(FRAME_COLUMNS[name]))
        if name == "buckets":
            df["step"] = df["step"].astype("Int64")
        out[name] = df
    return out
