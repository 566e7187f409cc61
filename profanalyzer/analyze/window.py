"""`exported_window(att, analysis, steps) -> TraceWindow`: the window
`analyze --trace-out` exports, from the run's attributed trace
(`Attributed`: the per-core work and the collective windows the analysis
computed, not a second attribution pass).

The window: the representative step of the analysis (its timeline's step),
or the steps asked for (`--steps`). Per host a process; per TensorCore of it
these tracks:

    <core> ops           every XLA op's self time, named by the op, its
                         bucket, tags and HLO category in args
    <core> buckets       the same time merged into runs of one bucket
    <core> collectives   each collective window, named by its class
                         ("exposed all-gather ..."; its shade: hidden,
                         partial or exposed), hidden/exposed ps in args
    <sparsecore> ops     the busy spans of each of the core's SparseCores

and per exported step an instant at its start. The first moment each claim
pool's time is spent (its bucket's first segment on the first TensorCore,
the first recomputed op for `remat`) is kept for the findings' markers
(profanalyzer.report.perfetto). Times are the trace's picoseconds from the
capture's origin.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from profanalyzer.analyze.attribution import CoreWork, exclusive_segments
from profanalyzer.analyze.overlap import window_class, window_name, windows_for_core
from profanalyzer.core.errors import InputError
from profanalyzer.core.vocab import BUCKETS, CLAIM_BUCKET, CLAIM_REMAT
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.trace import LINE_SC_OPS, Trace
from profanalyzer.model.window import TraceWindow, WindowEvent, WindowTrack

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

__all__ = ["exported_window"]


def _label(plane, row: int) -> str:
    return (plane.meta.display_name[row] or plane.meta.name[row][:80]) if row >= 0 else "?"


def _step_bounds(trace: Trace, w: CoreWork, step: int) -> tuple[int, int] | None:
    s = trace.steps.get(w.plane.label)
    if s is None:
        return None
    idx = np.flatnonzero(s.number == step)
    if not len(idx):
        return None
    return int(s.start_ps[idx[0]]), int(s.end_ps[idx[0]])


def _core_events(trace: Trace, w: CoreWork, a: int, b: int, pid: int, tid0: int, step: int,
                 first_seen: dict[str, int], windows) -> list[WindowEvent]:
    """The ops, buckets and collectives tracks of one TensorCore over [a, b), and its SparseCores';
    `windows`: the core's collective windows (overlap.windows_for_core)."""
    plane = w.plane
    ops_line = plane.line("XLA Ops")
    out: list[WindowEvent] = []
    lo, hi = w.ops.window(a, b)
    seg_s, seg_e, owner = exclusive_segments(w.ops.start[lo:hi], w.ops.end[lo:hi])
    owner = owner + lo
    seg_s, seg_e = np.clip(seg_s, a, b), np.clip(seg_e, a, b)
    keep = seg_e > seg_s
    seg_s, seg_e, owner = seg_s[keep], seg_e[keep], owner[keep]
    rows = ops_line.events.meta[owner] if ops_line is not None else np.full(len(owner), -1)
    buckets = w.ev_bucket[owner]
    cat = plane.meta.category
    for s, e, r, bk in zip(seg_s.tolist(), seg_e.tolist(), rows.tolist(), buckets.tolist(), strict=True):
        bucket = BUCKETS[bk]
        remat = bool(w.classes.remat[r]) if r >= 0 and len(w.classes) else False
        args: dict[str, Any] = {"bucket": bucket, "step": step, "self_ps": e - s}
        if r >= 0:
            args["hlo_category"] = cat[r]
        if remat:
            args["remat"] = True
            first_seen.setdefault(CLAIM_REMAT, s)
        first_seen.setdefault(CLAIM_BUCKET + bucket, s)
        out.append(WindowEvent(pid, tid0, s, _label(plane, r), bucket, args, dur_ps=e - s))
    # buckets: runs of one bucket
    if len(seg_s):
        brk = np.ones(len(seg_s), dtype=bool)
        brk[1:] = (buckets[1:] != buckets[:-1]) | (seg_s[1:] != seg_e[:-1])
        starts = np.flatnonzero(brk)
        ends = np.append(starts[1:], len(seg_s)) - 1
        for i0, i1 in zip(starts.tolist(), ends.tolist(), strict=True):
            s, e = int(seg_s[i0]), int(seg_e[i1])
            out.append(WindowEvent(pid, tid0 + 1, s, BUCKETS[int(buckets[i0])], "bucket", {"step": step, "ps": e - s},
                                   dur_ps=e - s))
    # collective windows, shaded by how much compute hid them
    sel = np.flatnonzero((windows.end > a) & (windows.start < b))
    if len(sel):
        sub = windows.take(sel)
        ws, we = np.maximum(sub.start, a), np.minimum(sub.end, b)
        hidden = w.compute(we) - w.compute(ws)
        for s, e, typ, eng, row, h in zip(ws.tolist(), we.tolist(), sub.type_names(), sub.engines(), sub.row.tolist(),
                                          hidden.tolist(), strict=True):
            span = max(e - s, 0)
            klass = window_class(h, span)
            out.append(WindowEvent(
                pid, tid0 + 2, s, f"{klass} {typ.replace('_', '-')} {window_name(plane.meta, row)}", "collective",
                {"type": typ, "engine": eng, "class": klass, "hidden_ps": int(h), "exposed_ps": int(span - h),
                 "hidden_fraction": round(h / span, 6) if span else 0.0, "step": step},
                dur_ps=span, shade=klass))
    # SparseCores of this TensorCore
    for k, sc in enumerate(trace.sparsecores_of(plane)):
        ln = sc.line(LINE_SC_OPS)
        if ln is None or not len(ln.events):
            continue
        ev = ln.events
        top = np.flatnonzero((ev.depth == 0) & (ev.end_ps > a) & (ev.start_ps < b))
        for i in top.tolist():
            s, e = max(int(ev.start_ps[i]), a), min(int(ev.end_ps[i]), b)
            out.append(WindowEvent(pid, tid0 + 3 + k, s, _label(sc, int(ev.meta[i])), "sparsecore", {"step": step},
                                   dur_ps=max(e - s, 0)))
    return out


def _tracks(trace: Trace, w: CoreWork, pid: int, tid0: int) -> list[WindowTrack]:
    core = w.plane.name
    names = [f"{core} ops", f"{core} buckets", f"{core} collectives"]
    names += [f"{sc.name} ops" for sc in trace.sparsecores_of(w.plane)]
    return [WindowTrack(pid, tid0 + i, n) for i, n in enumerate(names)]


def exported_window(att: Attributed, analysis: Analysis, steps: Collection[int] = ()) -> TraceWindow:
    """The exported window (see the module doc): `steps`, else the timeline's step, else the first kept
    step. InputError when there is none, or a step asked for is not in the trace."""
    trace = att.trace
    if steps:
        wanted = sorted(set(int(s) for s in steps))
    elif analysis.timeline is not None:
        wanted = [analysis.timeline.step]
    else:
        wanted = [r.number for r in analysis.steps.table if r.kept][:1]
    if not wanted:
        raise InputError("--trace-out: no kept step to export (pass --steps)")
    work = att.work
    hosts = sorted({w.plane.host for w in work})
    pid_of = {h: i + 1 for i, h in enumerate(hosts)}
    tracks: list[WindowTrack] = []
    events: list[WindowEvent] = []
    first_seen: dict[str, int] = {}
    found_steps: list[int] = []
    step_start: int | None = None
    tid_next: dict[int, int] = {}
    for w in work:
        pid = pid_of[w.plane.host]
        tid0 = tid_next.get(pid, 1)
        tid_next[pid] = tid0 + 3 + len(trace.sparsecores_of(w.plane))
        tracks.extend(_tracks(trace, w, pid, tid0))
        wins = None  # the core's collective windows, built on its first exported step (the run's memo shared)
        for step in wanted:
            bounds = _step_bounds(trace, w, step)
            if bounds is None:
                continue
            a, b = bounds
            if step not in found_steps:
                found_steps.append(step)
            seen = first_seen if w is work[0] else {}
            if w is work[0] and step_start is None:
                step_start = a
            if wins is None:
                wins = windows_for_core(w.plane, w.classes, {}, att.memo)[0]
            events.extend(_core_events(trace, w, a, b, pid, tid0, step, seen, wins))
            events.append(WindowEvent(pid, tid0, a, f"step {step}", "step", {"step": step, "step_ps": b - a}))
    missing = [s for s in wanted if s not in found_steps]
    if missing:
        have = sorted({int(n) for w in work for n in trace.steps[w.plane.label].number.tolist()})
        raise InputError(f"--steps: no step {', '.join(map(str, missing))} in this trace (steps {_span(have)})")
    return TraceWindow(source=analysis.source, tool_version=analysis.tool_version, chip=analysis.hardware.name,
                       hosts=tuple(hosts), tracks=tuple(tracks), events=tuple(events), steps=tuple(found_steps),
                       first_ps=first_seen, start_ps=step_start)


def _span(numbers: Iterable[int]) -> str:
    n = list(numbers)
    return f"{n[0]}..{n[-1]}" if n else "none"
