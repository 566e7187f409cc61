"""One representative step, as lanes of spans, for the report's timeline.

The representative step is the kept step whose time (median over cores) is
closest to the median kept step; the core is the first TensorCore. Lanes: the
TensorCore (spans coloured by bucket, coalesced so adjacent spans of one
bucket merge; past MAX_SPANS_PER_LANE, binned so that every op's time is still
drawn, each bucket's within a bin of where it ran), then each of its
SparseCores (busy spans). Collective windows are listed separately with their
hidden fraction and class; past MAX_WINDOWS, neighbouring windows of one type
are drawn as one that says how many it holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from profanalyzer.analyze.attribution import exclusive_segments
from profanalyzer.analyze.overlap import Windows, window_class, window_name
from profanalyzer.core.stats import median
from profanalyzer.core.vocab import BUCKETS
from profanalyzer.model.parts import Lane, Span, TimelineSample, WindowSpan
from profanalyzer.model.trace import LINE_SC_OPS

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

MAX_SPANS_PER_LANE = 1500
MAX_WINDOWS = 400


def _coalesce(s: np.ndarray, e: np.ndarray, b: np.ndarray, labels: list[str], names: tuple[str, ...], step_ps: int, limit: int) -> tuple[list[Span], bool]:
    """Merge touching spans of one bucket; past `limit` spans, bin the step into `limit` equal bins and
    draw, in each bin, one span per bucket as long as that bucket's time in the bin (a span crossing bins
    counts in each for the part it covers there), in the order the buckets first run in the bin: every
    op's time is drawn (the drawn spans sum to the busy time, per bucket too), each within a bin's width of
    where it ran.

    s/e are offsets from the step start (the spans do not overlap); b indexes `names`. Vectorised."""
    n = len(s)
    if n == 0:
        return [], False
    merged = False
    if n > limit:
        merged = True
        width = max(-(-step_ps // limit), 1)
        first_bin = s // width
        last_bin = np.maximum(first_bin, (e - 1) // width)
        per = (last_bin - first_bin + 1).astype(np.int64)
        # one piece per (span, bin it covers): exclusive spans, so at most n + limit pieces
        src = np.repeat(np.arange(n), per)
        k = np.arange(len(src)) - np.repeat(np.cumsum(per) - per, per)
        pbin = first_bin[src] + k
        ps = np.maximum(s[src], pbin * width)
        pe = np.minimum(e[src], (pbin + 1) * width)
        pdur = pe - ps
        keep = pdur > 0
        src, pbin, ps, pdur = src[keep], pbin[keep], ps[keep], pdur[keep]
        key = pbin * len(names) + b[src]
        uk, inv = np.unique(key, return_inverse=True)
        tot = np.bincount(inv, weights=pdur, minlength=len(uk)).astype(np.int64)
        first_at = np.full(len(uk), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first_at, inv, ps)
        # label: the span with the longest piece of that bucket in the bin
        order = np.lexsort((-pdur, inv))
        lead = order[np.r_[True, inv[order][1:] != inv[order][:-1]]]
        lab = {int(inv[i]): labels[int(src[i])] for i in lead.tolist()}
        ubin, ub = uk // len(names), uk % len(names)
        seq = np.lexsort((first_at, ubin))  # by bin, then by when the bucket first runs in it
        cursor: dict[int, int] = {}
        out_s, out_e, out_b, out_l = [], [], [], []
        for j in seq.tolist():
            bn = int(ubin[j])
            at = cursor.get(bn, bn * width)
            out_s.append(at)
            out_e.append(at + int(tot[j]))
            out_b.append(int(ub[j]))
            out_l.append(lab[j])
            cursor[bn] = at + int(tot[j])
        s, e, b, labels = (np.asarray(out_s, dtype=np.int64), np.asarray(out_e, dtype=np.int64),
                           np.asarray(out_b, dtype=np.int64), out_l)
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


def _merged_windows(spans: list[WindowSpan], limit: int, step_ps: int) -> list[WindowSpan]:
    """Past `limit` windows, neighbouring windows of one collective type (closer than a gap that grows until
    they fit) are drawn as one: its span from the first start to the last end, its name the count, its hidden
    fraction and class those of the windows' summed time."""
    gap = max(step_ps // max(limit, 1), 1)
    out = spans
    while len(out) > limit:
        groups: list[list[WindowSpan]] = []
        last: dict[str, int] = {}  # type -> index of its open group
        for w in sorted(out, key=lambda x: (x.start_ps, x.type)):
            g = last.get(w.type)
            if g is not None and w.start_ps - groups[g][-1].end_ps <= gap:
                groups[g].append(w)
            else:
                last[w.type] = len(groups)
                groups.append([w])
        out = [_one_window(g) for g in groups]
        gap *= 2
    return out


def _one_window(g: list[WindowSpan]) -> WindowSpan:
    if len(g) == 1:
        return g[0]
    win = sum(w.end_ps - w.start_ps for w in g)
    hidden = sum(w.hidden_fraction * (w.end_ps - w.start_ps) for w in g)
    frac = hidden / win if win > 0 else 0.0
    n = sum(w.count for w in g)
    return WindowSpan(g[0].start_ps, max(w.end_ps for w in g), g[0].type, f"{n} {g[0].type} windows",
                      frac, window_class(hidden, win), n)


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
    sel = np.flatnonzero((wins.start >= a) & (wins.start < b))
    if len(sel):
        ws, we = wins.start[sel], wins.end[sel]
        hs = w.compute(we) - w.compute(ws)
        sub = wins.take(sel)
        names = [window_name(plane.meta, r) for r in sub.row.tolist()]
        for s0, e0, typ, name, h in zip(ws.tolist(), we.tolist(), sub.type_names(), names, hs.tolist(), strict=True):
            win = e0 - s0
            spans_w.append(WindowSpan(s0 - a, min(e0, b) - a, typ, name, (h / win) if win > 0 else 0.0, window_class(h, win)))
    if len(spans_w) > MAX_WINDOWS:  # (each merged window says how many it holds: `count`)
        spans_w = _merged_windows(spans_w, MAX_WINDOWS, b - a)
    return TimelineSample(plane.label, int(rep), b - a, tuple(lanes), tuple(spans_w), merged)
