"""Exclusive per-step, per-core attribution of TensorCore time to buckets.

Every instant of a step window on a TensorCore's `XLA Ops` line belongs to
the deepest op running then (nested ops count once: a parent owns only its
self time), or to `idle` when no op runs. Collective ops (synchronous ones,
the start/done halves of async ones, SparseCore call-start/call-done
wrappers) own their time as that collective's bucket: the TensorCore was not
computing, so this is exposed communication.

Vectorised without building segments: an event adds its (window-clipped)
duration to its own label and subtracts it from its direct parent's label.
Because children lie inside parents, what remains for each label is exactly
the time owned by ops of that label. Any per-op label works the same way
(bucket, remat flag, phase, collective type).

`CoreAttribution.self_check()` enforces conservation: on every step the
buckets sum to the step window exactly (integer picoseconds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from profanalyzer.classify import (
    ROLE_CODES,
    Memo,
    OpClass,
    async_pair_key,
    classify_codes,
    classify_op,
    columns_of,
)
from profanalyzer.core.errors import InvariantError
from profanalyzer.core.parallel import map_ordered
from profanalyzer.core.vocab import BUCKETS, COMPUTE_BUCKETS, PHASES
from profanalyzer.model.trace import LINE_OPS, Plane, Trace

BUCKET_INDEX = {b: i for i, b in enumerate(BUCKETS)}
IDLE = BUCKET_INDEX["idle"]

#: Relative tolerance of the conservation check (the brief asks for 0.1%;
#: integer arithmetic makes the sums exact, so any mismatch is a bug).
RECONCILE_TOLERANCE = 1e-3


try:  # the optional C accelerator (setup.py): the same sums in one pass over the events
    import profanalyzer.analyze._windows as _windows  # type: ignore[import-not-found]
except ImportError:  # no compiler at install time: numpy alone
    _windows = None


@dataclass(frozen=True, eq=False)
class OpTimeline:
    """One line's events as the attribution needs them (sorted by start)."""

    start: np.ndarray  # int64
    end: np.ndarray  # int64, inside the parent's span
    parent: np.ndarray  # int64, -1 at top level
    prefix_end: np.ndarray  # running max of end (monotonic): finds events overlapping a window

    @staticmethod
    def of(start: np.ndarray, end: np.ndarray, parent: np.ndarray) -> OpTimeline:
        pe = np.maximum.accumulate(end) if len(end) else end
        return OpTimeline(start, end, parent, pe)

    def window(self, a: int, b: int) -> tuple[int, int]:
        """Index range of the events overlapping [a, b)."""
        lo = int(np.searchsorted(self.prefix_end, a, side="right"))
        hi = int(np.searchsorted(self.start, b, side="left"))
        return lo, max(lo, hi)

    def exclusive(self, labels: np.ndarray, n_labels: int, wa: np.ndarray, wb: np.ndarray) -> np.ndarray:
        """(n_windows, n_labels) time owned by ops of each label inside each window."""
        return self.exclusive_many([(labels, n_labels)], wa, wb)[0]

    def exclusive_totals(self, label_sets, wa: np.ndarray, wb: np.ndarray) -> list[np.ndarray]:
        """`exclusive_many` summed over the windows: (n_labels,) per labelling
        (the C pass adds each window's sums into the totals as it goes,
        without the window x label matrix)."""
        if _windows is not None and 0 < len(label_sets) <= 8:
            got = self._c_sums(label_sets, wa, wb, total=True)
            if got is not None:
                return got
        return [x.sum(axis=0) for x in self.exclusive_many(label_sets, wa, wb)]

    def _c_sums(self, label_sets, wa: np.ndarray, wb: np.ndarray, total: bool) -> list[np.ndarray] | None:
        """The C pass (profanalyzer.analyze._windows), or None where it declines."""
        wa = np.asarray(wa, dtype=np.int64)
        wb = np.asarray(wb, dtype=np.int64)
        lo = np.searchsorted(self.prefix_end, wa, side="right")
        hi = np.maximum(lo, np.searchsorted(self.start, wb, side="left"))
        labels = tuple(np.ascontiguousarray(lab, dtype=np.int64) for lab, _ in label_sets)
        got = _windows.window_sums(
            np.ascontiguousarray(self.start, dtype=np.int64), np.ascontiguousarray(self.end, dtype=np.int64),
            np.ascontiguousarray(self.parent, dtype=np.int64), lo.astype(np.int64), hi.astype(np.int64), wa, wb,
            labels, tuple(int(n) for _, n in label_sets), total)
        if got is None:
            return None
        shape = (lambda n: (n,)) if total else (lambda n: (len(wa), n))
        return [np.frombuffer(g, dtype=np.int64).reshape(shape(n)) for g, (_, n) in zip(got, label_sets, strict=True)]

    def exclusive_many(self, label_sets, wa: np.ndarray, wb: np.ndarray) -> list[np.ndarray]:
        """`exclusive` for several labelings at once (windows clipped once).

        All windows in one pass: the events overlapping each window (an index
        range) are concatenated with their window number, clipped to it, and
        summed per (window, label) by one weighted bincount per labeling."""
        wa = np.asarray(wa, dtype=np.int64)
        wb = np.asarray(wb, dtype=np.int64)
        nw = len(wa)
        if _windows is not None and 0 < len(label_sets) <= 8:
            got = self._c_sums(label_sets, wa, wb, total=False)
            if got is not None:
                return got
        lo = np.searchsorted(self.prefix_end, wa, side="right")
        hi = np.maximum(lo, np.searchsorted(self.start, wb, side="left"))
        cnt = hi - lo
        win = np.repeat(np.arange(nw, dtype=np.int64), cnt)
        idx = np.arange(len(win), dtype=np.int64) + np.repeat(lo - (np.cumsum(cnt) - cnt), cnt)
        d = np.minimum(self.end[idx], wb[win]) - np.maximum(self.start[idx], wa[win])
        np.maximum(d, 0, out=d)
        par = self.parent[idx]
        hp = np.flatnonzero(par >= 0)
        return [self._sum(labels, n, win, idx, d, par, hp, nw) for labels, n in label_sets]

    @staticmethod
    def _sum(labels, n, win, idx, d, par, hp, nw) -> np.ndarray:
        # Weighted bincount sums in float64, exact for integers below 2**53 ps
        # (about 2.5 hours): windows are far shorter.
        acc = np.bincount(win * n + labels[idx], weights=d, minlength=nw * n)
        if len(hp):
            acc -= np.bincount(win[hp] * n + labels[par[hp]], weights=d[hp], minlength=nw * n)
        return np.rint(acc).astype(np.int64).reshape(nw, n)

    def covered(self, weight: np.ndarray):
        """f(t): time before t owned by ops with weight 1 (weights 0/1 per op).

        Piecewise linear: each event contributes w_i - w_parent(i) times its
        overlap with (-inf, t)."""
        w = weight.astype(np.int64)
        wp = np.where(self.parent >= 0, w[np.maximum(self.parent, 0)], 0)
        net = w - wp
        nz = net != 0
        s, e, c = self.start[nz], self.end[nz], net[nz]
        pts = np.concatenate([s, e])
        slope = np.concatenate([c, -c])
        order = np.argsort(pts, kind="mergesort")
        pts, slope = pts[order], slope[order]
        cum_slope = np.cumsum(slope)
        # value at each breakpoint (just after it): integrate slope between points
        seg = np.diff(pts, prepend=pts[0] if len(pts) else 0)
        before = np.concatenate([[0], cum_slope[:-1]]) if len(pts) else cum_slope
        val = np.cumsum(before * seg)

        def f(t):
            t = np.asarray(t, dtype=np.int64)
            if not len(pts):
                return np.zeros_like(t)
            i = np.searchsorted(pts, t, side="right") - 1
            ok = i >= 0
            ic = np.maximum(i, 0)
            return np.where(ok, val[ic] + cum_slope[ic] * (t - pts[ic]), 0)

        return f


def locate(ws: np.ndarray, we: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each time t, the window [ws, we) holding it: (index, inside mask).
    Windows sorted by start and disjoint (step windows); index is only
    meaningful where inside is True."""
    t = np.asarray(t)
    if not len(ws):
        return np.zeros(len(t), dtype=np.int64), np.zeros(len(t), dtype=bool)
    pos = np.searchsorted(ws, t, side="right") - 1
    return pos, (pos >= 0) & (t < we[np.clip(pos, 0, len(we) - 1)])


def exclusive_segments(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Non-overlapping segments of a line's events, each owned by the deepest event.

    For drawing (the report's timeline), on a small slice of a line. `start`/
    `end` are sorted by (start, -end) with children inside parents. Returns
    (seg_start, seg_end, owner) where owner indexes the events.
    """
    n = len(start)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    if bool(np.all(start[1:] >= end[:-1])):
        keep = end > start
        return start[keep], end[keep], np.flatnonzero(keep)
    s_l = start.tolist()
    e_l = end.tolist()
    seg_s: list[int] = []
    seg_e: list[int] = []
    seg_o: list[int] = []
    stack: list[int] = []
    cursor = s_l[0]
    for i in range(n + 1):
        s = s_l[i] if i < n else max(e_l) + 1
        while stack and e_l[stack[-1]] <= s:
            top = stack.pop()
            if e_l[top] > cursor:
                seg_s.append(cursor)
                seg_e.append(e_l[top])
                seg_o.append(top)
            cursor = max(cursor, e_l[top])
        if i == n:
            break
        if stack and s > cursor:
            seg_s.append(cursor)
            seg_e.append(s)
            seg_o.append(stack[-1])
        cursor = max(cursor, s)
        stack.append(i)
    ss = np.asarray(seg_s, dtype=np.int64)
    se = np.asarray(seg_e, dtype=np.int64)
    so = np.asarray(seg_o, dtype=np.int64)
    keep = se > ss
    return ss[keep], se[keep], so[keep]


@dataclass(frozen=True, eq=False)
class CoreAttribution:
    """Per-step bucket totals of one TensorCore (integer ps)."""

    label: str
    step_numbers: np.ndarray  # int64 (n_steps,)
    step_ps: np.ndarray  # int64 (n_steps,)
    buckets: np.ndarray  # int64 (n_steps, len(BUCKETS))
    remat_ps: np.ndarray  # int64 (n_steps,)
    phase_ps: np.ndarray  # int64 (n_steps, 3): forward, backward, optimizer

    def self_check(self) -> None:
        sums = self.buckets.sum(axis=1)
        if np.any(self.buckets < 0):
            raise InvariantError(f"{self.label}: negative bucket time")
        bad = np.abs(sums - self.step_ps) > np.maximum(RECONCILE_TOLERANCE * self.step_ps, 0)
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise InvariantError(
                f"{self.label}: step {int(self.step_numbers[i])}: buckets sum to {int(sums[i])} ps, "
                f"step window is {int(self.step_ps[i])} ps"
            )
        if np.any(self.remat_ps > self.step_ps):
            raise InvariantError(f"{self.label}: remat time exceeds step time")


def attribute_core(
    label: str,
    ops: OpTimeline,
    op_bucket: np.ndarray,
    op_remat: np.ndarray,
    op_phase: np.ndarray,
    step_numbers: np.ndarray,
    step_start: np.ndarray,
    step_end: np.ndarray,
) -> CoreAttribution:
    """Attribute one TensorCore's ops to buckets per step window.

    op_bucket/op_remat/op_phase are per event (bucket index, bool, phase index
    0..2 or -1).
    """
    nb, npb = len(BUCKETS), len(PHASES) + 1
    step_ps = (step_end - step_start).astype(np.int64)
    # One labelling by (bucket, remat, phase), summed out per dimension: the
    # sums are whole picoseconds, so the marginals are those of three
    # separate labellings, for one weighted count instead of three.
    joint_label = (op_bucket.astype(np.int64) * 2 + op_remat.astype(np.int64)) * npb + (op_phase.astype(np.int64) + 1)
    joint = ops.exclusive(joint_label, nb * 2 * npb, step_start, step_end).reshape(len(step_start), nb, 2, npb)
    buckets = joint.sum(axis=(2, 3))
    remat = joint[:, :, 1, :].sum(axis=(1, 2))
    phase = joint.sum(axis=(1, 2))[:, 1:]
    covered = buckets.sum(axis=1)
    buckets[:, IDLE] += np.maximum(step_ps - covered, 0)
    att = CoreAttribution(label, step_numbers.astype(np.int64), step_ps, buckets, remat, phase)
    att.self_check()
    return att


# ---------------------------------------------------------------------------
# Per-core work: classification of a plane's ops, then its attribution
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PlaneClasses:
    """Per metadata row of a plane: classification columns (numpy)."""

    bucket: np.ndarray  # int64 index into BUCKETS
    remat: np.ndarray  # bool
    phase: np.ndarray  # int64 index into PHASES or -1
    role: np.ndarray  # int8 ROLE_CODES (0: not a collective half)
    columns: Mapping[str, np.ndarray]  # classify_columns output (bucket, collective, role, ... reason)
    memo: Memo = field(default_factory=Memo)  # the run's classify memo (see classify_columns)

    def __len__(self) -> int:
        return len(self.bucket)

    def op_class(self, plane: Plane, row: int) -> OpClass:
        """``classify_op`` of one metadata row of `plane` as classified (before
        the done ops inherit their start's kind), from the memo when there."""
        md = plane.meta
        return classify_op(md.name[row], md.display_name[row], md.category[row], md.tf_op[row],
                           md.shape_with_layout[row], memo=self.memo)


def classify_plane(plane: Plane, memo: Memo | None = None) -> PlaneClasses:
    """``memo``: the run's, shared by the planes of one trace (see ``classify_columns``)."""
    if memo is None:
        memo = Memo()
    md = plane.meta
    codes, uniq = classify_codes(
        {
            "hlo_text": md.name,
            "display_name": md.display_name,
            "category": md.category,
            "tf_op": md.tf_op,
            "shape_with_layout": md.shape_with_layout,
        },
        n=len(md),
        memo=memo,
    )
    cols = columns_of(codes, uniq)
    bucket_name, collective, reason = cols["bucket"], cols["collective"], cols["reason"]
    # Async done ops whose kind is not visible in their own text inherit it
    # from their start op (matched by instruction number).
    u_unknown = [i for i, r in enumerate(uniq) if r.role in ("done", "offload_done") and r.collective is None]
    inherited: list[int] = []  # rows whose bucket came from their start op
    if u_unknown:
        u_start = [i for i, r in enumerate(uniq) if r.role in ("start", "offload_start")]
        starts: dict[str, int] = {}
        for row in np.flatnonzero(np.isin(codes, u_start)).tolist():
            key = async_pair_key(md.short_name(row))
            if key is not None:
                starts.setdefault(key[0], row)
        for row in np.flatnonzero(np.isin(codes, u_unknown)).tolist():
            key = async_pair_key(md.short_name(row))
            src = starts.get(key[0]) if key else None
            if src is not None and collective[src] is not None:
                bucket_name[row] = bucket_name[src]
                collective[row] = collective[src]
                inherited.append(row)
                reason[row] = f"{reason[row]}; kind from its start op {md.short_name(src)}"
    phase_idx = {p: i for i, p in enumerate(PHASES)}
    bucket = np.asarray([BUCKET_INDEX[r.bucket] for r in uniq], dtype=np.int64)[codes]
    for row in inherited:
        bucket[row] = BUCKET_INDEX[bucket_name[row]]
    phase = np.asarray([phase_idx.get(r.phase, -1) for r in uniq], dtype=np.int64)[codes]  # type: ignore[arg-type]
    role_code = np.asarray([ROLE_CODES.get(r.role, 0) if isinstance(r.role, str) else 0 for r in uniq],
                           dtype=np.int8)[codes]
    phase = update_phase(phase, bucket, md.tf_op, cols)
    return PlaneClasses(bucket, cols["remat"], phase, role_code, cols, memo)


#: Buckets of the work an update phase can hold (compute; not collectives, host transfers or idle).
_UPDATE_BUCKETS = np.asarray([b in COMPUTE_BUCKETS for b in BUCKETS], dtype=bool)


def update_phase(phase: np.ndarray, bucket: np.ndarray, tf_ops, cols: dict) -> np.ndarray:
    """The optimizer phase from the program's structure: in a training program (one whose name stacks
    hold a backward pass, `transpose(jvp(...))`), the compute ops of the step whose name stack lies
    outside the forward (`jvp`) and the backward are the update of the parameters and optimizer states
    (Adam's or any optimizer's elementwise work, gradient clipping, the step counter), whatever its
    scopes are named. Ops without a name stack stay without a phase. Their reason says so."""
    backward = PHASES.index("backward")
    if not (phase == backward).any():
        return phase
    optimizer = PHASES.index("optimizer")
    named = np.fromiter((bool(t) for t in tf_ops), dtype=bool, count=len(phase))
    move = (phase < 0) & named & _UPDATE_BUCKETS[bucket]
    if not move.any():
        return phase
    out = phase.copy()
    out[move] = optimizer
    reason = cols["reason"] = cols["reason"].copy()
    for row in np.flatnonzero(move).tolist():
        reason[row] = f"{reason[row]}; phase optimizer: outside the forward (jvp) and backward of a training step"
    return out


@dataclass(frozen=True, eq=False)
class CoreWork:
    """One TensorCore's classified and attributed work: what the analysis,
    the overlap analysis and the timeline read (analysis-internal)."""

    plane: Plane
    classes: PlaneClasses
    attribution: CoreAttribution
    ops: OpTimeline  # the XLA Ops line's events (sorted, children inside parents)
    ev_bucket: np.ndarray  # bucket index per event
    compute: Callable[[np.ndarray], np.ndarray]  # f(t): TensorCore compute time before t (matmul, attention, other compute)


def with_rebucketed(classes: PlaneClasses, rows: Mapping[int, tuple]) -> PlaneClasses:
    """`classes` with the metadata rows in `rows` (row -> (bucket, kernel, precision, reason[, attention
    part[, FLOPs]])) moved to that bucket: the explicit re-bucketing step of evidence read after
    classification (hardware counters, the program's KV-cache contractions and kernel FLOPs)."""
    if not rows:
        return classes
    bucket = classes.bucket.copy()
    cols = dict(classes.columns)
    for c in ("bucket", "kernel", "precision", "reason", "attention_part", "shape_flops"):
        if c in cols:
            cols[c] = cols[c].copy()
    for row, (b, kernel, precision, reason, *rest) in sorted(rows.items()):
        if 0 <= row < len(bucket):
            bucket[row] = BUCKET_INDEX[b]
            cols["bucket"][row], cols["kernel"][row], cols["precision"][row], cols["reason"][row] = b, kernel, precision, reason
            if rest and "attention_part" in cols:
                cols["attention_part"][row] = rest[0]
            if len(rest) > 1 and "shape_flops" in cols:
                cols["shape_flops"][row] = rest[1]
    return replace(classes, bucket=bucket, columns=cols)


def attribute_trace(trace: Trace,
                    rebucket: Mapping[str, Mapping[int, tuple]] | None = None,
                    memo: Memo | None = None) -> list[CoreWork]:
    """Classify and attribute every TensorCore of the trace (one CoreWork each).
    Classification runs first, once per distinct metadata table; the per-core
    attribution (array passes) then runs on a few threads (`parallel`).
    `rebucket`: plane label -> {metadata row: (bucket, kernel, precision, reason)}, evidence read after a
    first classification (counters.counter_matmul_rows) applied to the plane's table before attribution.
    `memo`: the run's classify memo (a new one when None)."""
    other = BUCKET_INDEX["other_compute"]
    compute_mask = np.asarray([b in COMPUTE_BUCKETS for b in BUCKETS], dtype=bool)
    if memo is None:
        memo = Memo()  # shared by the cores (same metadata on every core of a host)
    by_table: dict[int, PlaneClasses] = {}  # planes sharing one metadata table (xspace.optable.MetadataCache)
    planes = trace.tensorcores
    for plane in planes:
        if id(plane.meta) not in by_table:
            by_table[id(plane.meta)] = classify_plane(plane, memo)
    for plane in planes if rebucket else ():
        rows = (rebucket or {}).get(plane.label)
        if rows:
            by_table[id(plane.meta)] = with_rebucketed(by_table[id(plane.meta)], rows)

    def core(plane: Plane) -> CoreWork:
        ln = plane.line(LINE_OPS)
        steps = trace.steps[plane.label]
        classes = by_table[id(plane.meta)]
        if ln is None or len(ln.events) == 0:
            z = np.zeros(0, dtype=np.int64)
            ops = OpTimeline.of(z, z, z)
            ev_bucket, ev_remat, ev_phase = z, np.zeros(0, dtype=bool), z
        else:
            ev = ln.events
            rows = ev.meta
            valid = (rows >= 0) & (rows < len(classes.bucket))
            safe = np.where(valid, rows, 0)
            n = len(ev)
            if len(classes.bucket):
                ev_bucket = np.where(valid, classes.bucket[safe], other)
                ev_remat = np.where(valid, classes.remat[safe], False)
                ev_phase = np.where(valid, classes.phase[safe], -1)
            else:
                ev_bucket, ev_remat, ev_phase = np.full(n, other), np.zeros(n, bool), np.full(n, -1)
            ops = OpTimeline.of(ev.start_ps, ev.end_ps, ev.parent)
        att = attribute_core(plane.label, ops, ev_bucket, ev_remat, ev_phase, steps.number, steps.start_ps, steps.end_ps)
        return CoreWork(plane, classes, att, ops, ev_bucket, ops.covered(compute_mask[ev_bucket]))

    return map_ordered(core, planes)
