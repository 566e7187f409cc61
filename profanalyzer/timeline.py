"""One representative step, as lanes of spans, for the report's timeline.

The representative step is the kept step whose time (median over cores) is
closest to the median kept step; the core is the first TensorCore. Lanes: the
TensorCore (spans coloured by bucket, coalesced so adjacent spans of one
bucket merge; spans shorter than MIN_SPAN_FRACTION of the step are folded into
their neighbours' bucket only when of the same bucket, never dropped from the
totals), then each of its SparseCores (busy spans). Collective windows are
listed separately with their hidden fraction and class.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profanalyzer.classify import BUCKETS
from profanalyzer.trace import LINE_SC_OPS, Trace

MAX_SPANS_PER_LANE = 1500
MAX_WINDOWS = 400


@dataclass(frozen=True)
class Span:
    start_ps: int  # from step start
    end_ps: int
    bucket: str  # a BUCKETS name, or 'busy' on SparseCore lanes
    label: str  # op name of the longest piece


@dataclass(frozen=True)
class Lane:
    name: str
    engine: str  # TensorCore | SparseCore
    spans: tuple[Span, ...]


@dataclass(frozen=True)
class WindowSpan:
    start_ps: int
    end_ps: int
    type: str
    name: str
    hidden_fraction: float
    klass: str


@dataclass(frozen=True)
class TimelineSample:
    core: str
    step: int
    step_ps: int
    lanes: tuple[Lane, ...]
    windows: tuple[WindowSpan, ...]
    coalesced: bool  # spans were merged to stay under MAX_SPANS_PER_LANE


def _coalesce(s: np.ndarray, e: np.ndarray, b: list[str], labels: list[str], limit: int) -> tuple[list[Span], bool]:
    spans: list[Span] = []
    best: list[int] = []
    for i in range(len(s)):
        if spans and spans[-1].bucket == b[i] and spans[-1].end_ps == int(s[i]):
            prev = spans[-1]
            label = prev.label if best[-1] >= int(e[i] - s[i]) else labels[i]
            spans[-1] = Span(prev.start_ps, int(e[i]), b[i], label)
            best[-1] = max(best[-1], int(e[i] - s[i]))
        else:
            spans.append(Span(int(s[i]), int(e[i]), b[i], labels[i]))
            best.append(int(e[i] - s[i]))
    merged = False
    while len(spans) > limit:
        # Merge the shortest span into its left neighbour (visual only).
        merged = True
        lens = np.asarray([x.end_ps - x.start_ps for x in spans])
        k = int(np.argmin(lens[1:])) + 1
        left = spans[k - 1]
        spans[k - 1] = Span(left.start_ps, spans[k].end_ps, left.bucket, left.label)
        del spans[k]
    return spans, merged


def build_timeline(trace: Trace, work, kept_steps: set[int], step_table) -> TimelineSample | None:
    from profanalyzer.overlap import _klass, _windows_for_core

    if not work:
        return None
    kept_rows = [r for r in step_table if r.kept]
    if not kept_rows:
        return None
    med = float(np.median([r.step_ps for r in kept_rows]))
    rep = min(kept_rows, key=lambda r: (abs(r.step_ps - med), r.number)).number
    w = work[0]
    plane = w.plane
    steps = trace.steps[plane.label]
    idx = np.flatnonzero(steps.number == rep)
    if not len(idx):
        return None
    a, b = int(steps.start_ps[idx[0]]), int(steps.end_ps[idx[0]])
    m = (w.seg_end > a) & (w.seg_start < b)
    s = np.clip(w.seg_start[m], a, b) - a
    e = np.clip(w.seg_end[m], a, b) - a
    bk = [BUCKETS[i] for i in w.seg_bucket[m].tolist()]
    ops = plane.line("XLA Ops")
    labels = []
    for ev_i in w.seg_event[m].tolist():
        r = int(ops.events.meta[ev_i]) if ops is not None else -1
        labels.append((plane.meta.display_name[r] or plane.meta.name[r][:60]) if r >= 0 else "?")
    spans, merged = _coalesce(s, e, bk, labels, MAX_SPANS_PER_LANE)
    lanes = [Lane(f"{plane.name} TensorCore", "TensorCore", tuple(spans))]
    for sc in trace.sparsecores_of(plane):
        ln = sc.line(LINE_SC_OPS)
        if ln is None or not len(ln.events):
            lanes.append(Lane(sc.name, "SparseCore", ()))
            continue
        ev = ln.events
        top = (ev.depth == 0) & (ev.end_ps > a) & (ev.start_ps < b)
        ss = np.clip(ev.start_ps[top], a, b) - a
        ee = np.clip(ev.end_ps[top], a, b) - a
        lab = [(sc.meta.display_name[r] or sc.meta.name[r][:60]) if r >= 0 else "?" for r in ev.meta[top].tolist()]
        sp, mg = _coalesce(ss, ee, ["busy"] * len(ss), lab, MAX_SPANS_PER_LANE)
        merged |= mg
        lanes.append(Lane(sc.name, "SparseCore", tuple(sp)))
    wins, _ = _windows_for_core(plane, w.classes.frame, {})
    windows = []
    if len(wins):
        from profanalyzer.overlap import _COMPUTE, _covered_fn

        cov = _covered_fn(w.seg_start, w.seg_end, _COMPUTE[w.seg_bucket] if len(w.seg_bucket) else np.zeros(0, bool))
        sel = wins[(wins["start"] >= a) & (wins["start"] < b)].head(MAX_WINDOWS)
        if len(sel):
            hs = cov(sel["end"].to_numpy()) - cov(sel["start"].to_numpy())
            for r, h in zip(sel.itertuples(index=False), hs.tolist()):
                win = int(r.end - r.start)
                windows.append(
                    WindowSpan(int(r.start - a), int(min(r.end, b) - a), r.type, r.name, (h / win) if win > 0 else 0.0, _klass(h, win))
                )
    return TimelineSample(plane.label, int(rep), b - a, tuple(lanes), tuple(windows), merged)
