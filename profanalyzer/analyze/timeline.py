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

from typing import TYPE_CHECKING

import numpy as np

from profanalyzer.analyze.attribution import exclusive_segments
from profanalyzer.analyze.overlap import Windows, window_class, window_name
from profanalyzer.model import Lane, Span, TimelineSample, WindowSpan
from profanalyzer.stats import median
from profanalyzer.trace import LINE_SC_OPS
from profanalyzer.vocab import BUCKETS

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

MAX_SPANS_PER_LANE = 1500
MAX_WINDOWS = 400


def _coalesce(s: np.ndarray, e: np.ndarray, b: np.ndarray, labels: list[str], names: tuple[str, ...], step_ps: int, limit: int) -> tuple[list[Span], bool]:
    """Merge touching spans of one bucket; past `limit` spans, bin the step into
    `limit` equal bins, each drawn as the bucket holding most of its time.

    s/e are offsets from the step start; b indexes `names`. Vectorised."""
    n = len(s)
    if n == 0:
        return [], False
    merged = False
    if n > limit:
        merged = True
        width = max(step_ps // limit, 1)
        # Split time into bins: spans are mostly shorter than a bin; a span
        # counts in the bin of its midpoint.
        mid = (s + e) // 2
        bin_of = np.minimum(mid // width, limit - 1)
        dur = e - s
        key = bin_of * len(names) + b
        tot = np.bincount(key, weights=dur, minlength=limit * len(names)).reshape(limit, len(names))
        used = tot.sum(axis=1) > 0
        win = np.argmax(tot, axis=1)
        # label: the longest span of the winning bucket in the bin
        order = np.lexsort((-dur, key))
        first: dict[int, int] = {}
        for i in order.tolist():
            first.setdefault(int(key[i]), i)
        bins = np.flatnonzero(used)
        s = bins * width
        e = np.minimum((bins + 1) * width, step_ps)
        b = win[bins]
        labels = [labels[first[int(k)]] for k in (bins * len(names) + b).tolist()]
        n = len(s)
    # Merge runs of touching spans with the same bucket.
    brk = np.ones(n, dtype=bool)
    brk[1:] = (b[1:] != b[:-1]) | (s[1:] != e[:-1])
    starts = np.flatnonzero(brk)
    ends = np.append(starts[1:], n) - 1
    dur = e - s
    spans = []
    for i0, i1 in zip(starts.tolist(), ends.tolist(), strict=True):
        j = i0 + int(np.argmax(dur[i0 : i1 + 1]))
        spans.append(Span(int(s[i0]), int(e[i1]), names[int(b[i0])], labels[j]))
    return spans, merged


def build_timeline(att: Attributed, windows: Windows | None) -> TimelineSample | None:
    """The timeline of the representative step on the first core of `work`;
    `windows` are that core's collective windows (overlap built them)."""
    trace, work, step_table = att.trace, att.work, att.step_table
    if not work:
        return None
    kept_rows = [r for r in step_table if r.kept]
    if not kept_rows:
        return None
    med = median([r.step_ps for r in kept_rows])
    rep = min(kept_rows, key=lambda r: (abs(r.step_ps - med), r.number)).number
    w = work[0]
    plane = w.plane
    steps = trace.steps[plane.label]
    idx = np.flatnonzero(steps.number == rep)
    if not len(idx):
        return None
    a, b = int(steps.start_ps[idx[0]]), int(steps.end_ps[idx[0]])
    ops = plane.line("XLA Ops")
    lo, hi = w.ops.window(a, b)
    seg_s, seg_e, owner = exclusive_segments(w.ops.start[lo:hi], w.ops.end[lo:hi])
    owner = owner + lo
    m = (seg_e > a) & (seg_s < b)
    seg_s, seg_e, owner = seg_s[m], seg_e[m], owner[m]
    labels = []
    for ev_i in owner.tolist():
        r = int(ops.events.meta[ev_i]) if ops is not None else -1
        labels.append((plane.meta.display_name[r] or plane.meta.name[r][:60]) if r >= 0 else "?")
    spans, merged = _coalesce(
        np.clip(seg_s, a, b) - a, np.clip(seg_e, a, b) - a, w.ev_bucket[owner], labels, BUCKETS, b - a, MAX_SPANS_PER_LANE
    )
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
        sp, mg = _coalesce(ss, ee, np.zeros(len(ss), dtype=np.int64), lab, ("busy",), b - a, MAX_SPANS_PER_LANE)
        merged |= mg
        lanes.append(Lane(sc.name, "SparseCore", tuple(sp)))
    wins = windows if windows is not None else Windows.concat([])
    spans_w = []
    sel = np.flatnonzero((wins.start >= a) & (wins.start < b))[:MAX_WINDOWS]
    if len(sel):
        ws, we = wins.start[sel], wins.end[sel]
        hs = w.compute(we) - w.compute(ws)
        sub = wins.take(sel)
        names = [window_name(plane.meta, r) for r in sub.row.tolist()]
        for s0, e0, typ, name, h in zip(ws.tolist(), we.tolist(), sub.type_names(), names, hs.tolist(), strict=True):
            win = e0 - s0
            spans_w.append(WindowSpan(s0 - a, min(e0, b) - a, typ, name, (h / win) if win > 0 else 0.0, window_class(h, win)))
    return TimelineSample(plane.label, int(rep), b - a, tuple(lanes), tuple(spans_w), merged)
