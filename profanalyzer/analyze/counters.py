"""Hardware counters, Pallas pipeline phases and device-plane peaks.

* `_counters_` line (TensorCore planes of captures taken with the
  kernel-profiling libtpu flags): one event per counter sample, named by
  unit (`MXU`, `Vector ALU`, `Vector Load`, ...), with a `% util` stat (a
  double) and a duration (the sample window, not uniform). Per op: the
  time-weighted utilisation of each unit over the op's span (each sample
  weighted by its overlap with the op's events), and the median sample.
* `XLA TraceMe` line: the phases of a Pallas `emit_pipeline` kernel
  (`ep_wait_in`, `ep_wait_out`, `ep_run_kernel`, ...). Per op: the share of
  its span spent in `ep_wait_*` phases (waiting for its pipeline's DMA).
* Ops whose samples (or phases) cover less than MIN_COVERAGE of their span
  are left out (a neighbour's edge inside a sample window).
* Kernel verdict (ops with counter samples): `waiting_on_dma` when the
  `ep_wait_*` share is at least WAIT_BOUND; else `mxu_bound` when the MXU is
  at least MXU_BOUND busy; else `vector_bound` when a vector unit is at
  least VECTOR_BOUND busy; else `low_utilisation`. Each with its lever.
* Counters as matmul evidence (`counter_matmul_rows`, run by
  `analysis.attribute` between a first classification and attribution): a
  `tpu_custom_call` the classifier left in other_compute whose time-weighted
  MXU utilisation over its runs is at least MXU_MATMUL is re-bucketed as a
  matmul kernel (precision from its output type; FLOPs not derivable), the
  evidence in its reason (`[counters.mxu]`). Nothing moves without counters.
* Device-plane peaks (`peak_teraflops_per_second`,
  `peak_hbm_bw_gigabytes_per_second`, per TensorCore plane): used instead of
  the hardware table when present (the note says which), FP8 and ICI
  figures stay the table's.

The lines are read from the capture files themselves (the analysis reader
keeps neither line), only their TensorCore planes, and only when a plane's
event metadata names a counter unit or a pipeline phase; a capture without
them has no counters (`None`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import numpy as np

from profanalyzer.analyze.attributed import Attributed
from profanalyzer.core.stats import median
from profanalyzer.core.vocab import BUCKETS, COUNTERS_LINE, TRACEME_LINE, UTIL_STAT
from profanalyzer.model.analysis import KernelCounters
from profanalyzer.model.trace import LINE_OPS, OpMetadata, Trace

__all__ = ["COUNTERS_LINE", "TRACEME_LINE", "UTIL_STAT", "kernel_counters", "with_device_peaks",
           "MXU_BOUND", "VECTOR_BOUND", "WAIT_BOUND", "MXU_MATMUL", "counter_matmul_rows", "trace_counter_lines", "VERDICTS", "ops_precision", "with_counter_tags"]

MXU_BOUND = 0.6
VECTOR_BOUND = 0.6
WAIT_BOUND = 0.3
#: Time-weighted MXU utilisation over a custom kernel's runs from which its counters make it a matmul.
MXU_MATMUL = 0.5
TPU_CUSTOM_CALL = "tpu_custom_call"  # the custom-call target of a Pallas kernel
VECTOR_UNITS = ("Vector ALU", "Vector Load", "Vector Store", "Vector EUP")
#: Share of an op's span its samples (or phases) must cover to be reported.
MIN_COVERAGE = 0.5
#: Ops with counters reported at most (by time).
MAX_OPS = 30

#: verdict -> (lever, what to change)
VERDICTS: dict[str, tuple[str, str]] = {
    "waiting_on_dma": ("tokamax", "the kernel waits on its pipeline's input/output DMA: bigger blocks (tune-jax block "
                                  "sizes, guide L6) and more scoped VMEM for them (xla_tpu_scoped_vmem_limit_kib, L5)"),
    "mxu_bound": ("fp8", "the MXU is the limit: fewer MXU passes per FLOP -- bf16 instead of f32 operands (an f32 "
                         "matmul runs several passes: 72% MXU busy is ~12% of the bf16 peak), then FP8 (guide L1)"),
    "vector_bound": ("tokamax", "the vector units are the limit, not the MXU: move elementwise work out of the "
                                "kernel's inner loop or fuse it into the matmul epilogue; retune block sizes (L6)"),
    "low_utilisation": ("tokamax", "no unit is busy: the kernel is latency-bound (small blocks, too little work per "
                                   "grid step): larger blocks with tune-jax (L6)"),
}


def with_device_peaks(trace: Trace) -> tuple[Trace, str]:
    """The trace with its chip's BF16 and HBM peaks from the TensorCore planes' own stats when
    present, and the note saying which source the peaks are from ("" when unchanged)."""
    tcs = trace.tensorcores
    if not tcs:
        return trace, ""
    tf = [p.stats.get("peak_teraflops_per_second") for p in tcs]
    bw = [p.stats.get("peak_hbm_bw_gigabytes_per_second") for p in tcs]
    tf_ok = [float(x) for x in tf if isinstance(x, (int, float)) and x > 0]
    bw_ok = [float(x) for x in bw if isinstance(x, (int, float)) and x > 0]
    if not tf_ok and not bw_ok:
        return trace, ""
    chip = trace.chip
    per = chip.planes_per_chip
    kw: dict[str, Any] = {}  # Chip fields to replace
    said = []
    if tf_ok:
        v = median(tf_ok) * per
        if abs(v - chip.peak_bf16_tflops) > 1e-6 * max(1.0, v):
            kw["peak_bf16_tflops"] = v
        said.append(f"BF16 peak {v / per:g} TFLOP/s per TensorCore")
    if bw_ok:
        v = median(bw_ok) * per
        if abs(v - chip.hbm_gbps) > 1e-6 * max(1.0, v):
            kw["hbm_gbps"] = v
        said.append(f"HBM {v / per:g} GB/s per TensorCore")
    same = "" if kw else " (the same as the hardware table)"
    note = (f"peaks from the device planes (peak_teraflops_per_second / peak_hbm_bw_gigabytes_per_second): "
            f"{', '.join(said)}{same}; FP8 and ICI from the hardware table")
    if kw:
        trace = replace(trace, chip=replace(chip, **kw))
    return trace, note


_COUNTER_UNITS = frozenset(("MXU", *VECTOR_UNITS))


def _has_counter_names(names) -> bool:
    """A plane's event metadata names a counter unit or an emit_pipeline phase (the lines' events use them)."""
    if not _COUNTER_UNITS.isdisjoint(names):  # a set against the column: no copy of its texts
        return True
    return any(n.startswith("ep_wait") for n in names)


def trace_counter_lines(trace: Trace) -> dict[tuple[str, str], dict]:
    """(host, plane name) -> read_counter_lines record, of every capture file of the trace; {} when no
    TensorCore plane names a counter unit or a pipeline phase (nothing re-read)."""
    tables = {id(p.meta): p.meta for p in trace.tensorcores}  # TensorCores often share one table
    if not any(_has_counter_names(m.name) for m in tables.values()):
        return {}
    lines: dict[tuple[str, str], dict] = {}
    if trace.reads is None:  # built in memory from no file: nothing to read
        return {}
    for f in sorted({h.file for h in trace.hosts if h.file}):
        try:
            got = trace.reads.counter_lines(f)
        except Exception:  # noqa: BLE001 - a capture the analysis read stays analysable without its counters
            continue
        host = next((h.name for h in trace.hosts if h.file == f), "")
        for plane, rec in got.items():
            lines[(host, plane)] = rec
    return lines


_OUT_TYPE = re.compile(r"=\s*\(?\s*(bf16|f16|f32|f8e[0-9a-z]+|s8|u8)\[")
#: output element type -> (precision, bucket) of a matmul kernel known by its counters only
_OUT_PRECISION = {"bf16": ("bf16", "matmul_bf16"), "f16": ("bf16", "matmul_bf16"), "s8": ("int8", "matmul_int8"),
                  "u8": ("int8", "matmul_int8"), "f32": (None, "matmul_other")}


def counter_matmul_rows(trace: Trace, work, lines: dict[tuple[str, str], dict]) -> dict[str, dict[int, tuple[str, str, str | None, str]]]:
    """Counters as matmul evidence: plane label -> {metadata row: (bucket, kernel, precision, reason)} of
    the `tpu_custom_call` kernels the classifier left in other_compute (no name, metadata or operand
    shape said what they compute) whose time-weighted MXU utilisation over all their runs on the
    planes sharing their metadata is at least MXU_MATMUL: the MXU only runs matmuls, so they are matmul
    kernels (precision from the output element type; FLOPs not derivable). `work`: the first
    classification's CoreWork list; `lines`: trace_counter_lines(trace). {} without counter lines."""
    if not lines:
        return {}
    other = BUCKETS.index("other_compute")
    acc: dict[tuple[int, int], list[float]] = {}  # (id(meta), row) -> [sample overlap, overlap * MXU util, op time]
    tables: dict[int, OpMetadata] = {}
    labels: dict[int, list[str]] = {}
    for w in work:
        md = w.plane.meta
        labels.setdefault(id(md), []).append(w.plane.label)
        tables[id(md)] = md
        rec = lines.get((w.plane.host, w.plane.name))
        ln = w.plane.line(LINE_OPS)
        if rec is None:
            continue
        cnt = rec.get("counters")
        if cnt is None or ln is None or not len(ln.events) or "MXU" not in rec.get("units", ()):
            continue
        n = min(len(w.classes.bucket), len(md))
        cand = [r for r in np.flatnonzero(w.classes.bucket[:n] == other).tolist()
                if TPU_CUSTOM_CALL in str(md.name[r] or "")]
        if not cand:
            continue
        s, e, u, util = cnt
        mxu = u == rec["units"].index("MXU")
        s, e, util = s[mxu], e[mxu], util[mxu]
        ev = ln.events
        for r in cand:
            ii = np.flatnonzero(ev.meta == r)
            if not len(ii):
                continue
            os_, oe = ev.start_ps[ii], ev.end_ps[ii]
            order = np.argsort(os_)
            os_, oe = os_[order], oe[order]
            ov = _overlap(s, e, os_, oe)
            a = acc.setdefault((id(md), r), [0.0, 0.0, 0.0])
            a[0] += float(ov.sum())
            a[1] += float((ov * util).sum())
            a[2] += float((oe - os_).sum())
    out: dict[str, dict[int, tuple[str, str, str | None, str]]] = {}
    for (mid, r), (cov, wu, span) in sorted(acc.items()):
        if span <= 0 or cov < MIN_COVERAGE * span:
            continue  # the samples must cover most of the kernel's runs
        busy = wu / cov
        if busy < MXU_MATMUL:
            continue
        text = str(tables[mid].name[r] or "")
        m = _OUT_TYPE.search(text)
        dt = m.group(1) if m else ""
        precision, bucket = ("fp8", "matmul_fp8") if dt.startswith("f8") else _OUT_PRECISION.get(dt, (None, "matmul_other"))
        reason = (f"[counters.mxu] matmul kernel by its hardware counters: MXU {busy:.0%} busy over its runs "
                  f"(time-weighted, >= {MXU_MATMUL:.0%}; only matmuls run on the MXU), no name, kernel metadata or "
                  f"operand shape said so; {precision or 'unknown'} from output type -> {bucket}; "
                  f"FLOPs not derivable (no operand shapes)")
        for label in labels[mid]:
            out.setdefault(label, {})[r] = (bucket, "pallas_matmul", precision, reason)
    return out


def ops_precision(ops) -> dict[str, tuple[str, str | None]]:
    """op name -> (bucket, precision tag) of the top ops (the verdict's lever reads the precision)."""
    return {o.name: (o.bucket, next((t.split(":", 1)[1] for t in o.tags if t.startswith("precision:")), None))
            for o in ops}


def _overlap(s: np.ndarray, e: np.ndarray, os_: np.ndarray, oe: np.ndarray) -> np.ndarray:
    """Per sample [s, e): its total overlap with the (disjoint, sorted) spans [os_, oe)."""
    if not len(os_):
        return np.zeros(len(s))
    cum = np.concatenate([[0], np.cumsum(oe - os_)])

    def covered(t):
        k = np.searchsorted(os_, t, side="right")
        prev_end = np.where(k > 0, oe[np.clip(k - 1, 0, None)], 0)
        inside = np.where(k > 0, np.minimum(t, prev_end) - os_[np.clip(k - 1, 0, None)], 0)
        return cum[np.clip(k - 1, 0, None)] * (k > 0) + np.maximum(inside, 0)

    return (covered(e) - covered(s)).astype(np.float64)


def kernel_counters(att: Attributed,
                    bucket_of: dict[str, tuple[str, str | None]] | None = None) -> tuple[KernelCounters, ...] | None:
    """Per op with counter samples or pipeline phases: utilisation by unit, ep_wait share, verdict."""
    trace, work, kept_steps, step_mean_ps = att.trace, att.work, att.kept_steps, att.step_mean
    lines = att.counter_lines  # analysis.attribute read them for the re-bucketing
    if lines is None:
        lines = trace_counter_lines(trace)
    if not lines:
        return None
    kept = np.asarray(sorted(kept_steps), dtype=np.int64)
    acc: dict[str, dict] = {}
    n_core_steps = 0
    for w in work:
        rec = lines.get((w.plane.host, w.plane.name))
        st = trace.steps.get(w.plane.label)
        ln = w.plane.line(LINE_OPS)
        if st is None:
            continue
        sel = np.isin(st.number, kept)
        n_core_steps += int(sel.sum())
        if rec is None or ln is None or not len(ln.events):
            continue
        ks, ke = np.sort(st.start_ps[sel]), np.sort(st.end_ps[sel])
        ev = ln.events
        in_step = np.zeros(len(ev), dtype=bool)
        k = np.searchsorted(ks, ev.start_ps, side="right") - 1
        ok = k >= 0
        in_step[ok] = ev.start_ps[ok] < ke[k[ok]]
        names = w.plane.meta.short_names
        # leaf events: a loop or call op holds the kernels it runs, its samples are theirs
        has_child = np.zeros(len(ev), dtype=bool)
        par = ev.parent[ev.parent >= 0]
        has_child[par] = True
        top = np.flatnonzero(in_step & ~has_child)
        by_name: dict[str, list[int]] = {}
        for i in top.tolist():
            by_name.setdefault(names[int(ev.meta[i])], []).append(i)
        cnt = rec.get("counters")
        ph = rec.get("phases")
        units = rec.get("units", ())
        for name, idx in by_name.items():
            ii = np.asarray(idx)
            os_, oe = ev.start_ps[ii], ev.end_ps[ii]
            order = np.argsort(os_)
            os_, oe = os_[order], oe[order]
            span = float((oe - os_).sum())
            if span <= 0:
                continue
            a = acc.setdefault(name, {"span": 0.0, "w": {}, "wu": {}, "samples": {}, "wait": 0.0, "phase": 0.0})
            has = False
            if cnt is not None:
                s, e, u, util = cnt
                ov = _overlap(s, e, os_, oe)
                hit = ov > 0
                if hit.any():
                    has = True
                    for j in range(len(units)):
                        m = hit & (u == j)
                        if m.any():
                            a["w"][units[j]] = a["w"].get(units[j], 0.0) + float(ov[m].sum())
                            a["wu"][units[j]] = a["wu"].get(units[j], 0.0) + float((ov[m] * util[m]).sum())
                            a["samples"].setdefault(units[j], []).extend(util[m].tolist())
            if ph is not None:
                ps_, pe_, wait = ph
                ov = _overlap(ps_, pe_, os_, oe)
                if (ov > 0).any():
                    has = True
                    a["wait"] += float(ov[wait].sum())
                    a["phase"] += float(ov.sum())
            if has:
                a["span"] += span
    out = []
    denom = max(1, n_core_steps)
    for name, a in acc.items():
        if a["span"] <= 0 or (not a["w"] and a["phase"] <= 0):
            continue
        # samples (or phases) must cover most of the op: a neighbour's edge inside a window says nothing
        if max(max(a["w"].values(), default=0.0), a["phase"]) < MIN_COVERAGE * a["span"]:
            continue
        util = {u: a["wu"][u] / a["w"][u] for u in a["w"] if a["w"][u] > 0}
        med = {u: median(v) for u, v in a["samples"].items() if v}
        wait = a["wait"] / a["span"] if a["phase"] > 0 else None
        mxu = util.get("MXU")
        vec = max((util[u] for u in VECTOR_UNITS if u in util), default=None)
        if wait is not None and wait >= WAIT_BOUND:
            verdict, why = "waiting_on_dma", f"ep_wait phases {wait:.0%} of its time"
        elif mxu is not None and mxu >= MXU_BOUND:
            verdict, why = "mxu_bound", f"MXU {mxu:.0%} busy"
        elif vec is not None and vec >= VECTOR_BOUND:
            verdict, why = "vector_bound", f"vector units {vec:.0%} busy, MXU {mxu or 0:.0%}"
        elif util:
            verdict, why = "low_utilisation", f"MXU {mxu or 0:.0%}, vector {vec or 0:.0%}"
        else:
            verdict, why = "", ""
        bucket, precision = (bucket_of or {}).get(name, ("", None))
        lever, change = VERDICTS.get(verdict, ("", ""))
        if verdict == "mxu_bound" and precision == "bf16":
            change = "the MXU is the limit at bf16: FP8 operands double its peak (guide L1)"
        ps = a["span"] / denom
        out.append(KernelCounters(op=name, bucket=bucket, ps=ps, fraction=ps / step_mean_ps if step_mean_ps > 0 else 0.0,
                                  utilisation=dict(sorted(util.items())), median_utilisation=dict(sorted(med.items())),
                                  samples=sum(len(v) for v in a["samples"].values()), ep_wait_fraction=wait,
                                  verdict=verdict, lever=lever, reason=f"{why}: {change}" if verdict else ""))
    out.sort(key=lambda k: (-k.ps, k.op))
    return tuple(out[:MAX_OPS])


def with_counter_tags(analysis):
    """The analysis with each top op that has counters tagged `counters:<verdict>` and `mxu:<NN>%`."""
    kc = {k.op: k for k in (analysis.kernel_counters or ()) if k.verdict}
    if not kc:
        return analysis

    def tag(o):
        k = kc.get(o.name)
        if k is None:
            return o
        extra = [f"counters:{k.verdict}"]
        if "MXU" in k.utilisation:
            extra.append(f"mxu:{k.utilisation['MXU'] * 100:.0f}%")
        return replace(o, tags=tuple(o.tags) + tuple(extra))

    return replace(analysis, top_ops=tuple(tag(o) for o in analysis.top_ops),
                   kernel_ops=tuple(tag(o) for o in analysis.kernel_ops))
