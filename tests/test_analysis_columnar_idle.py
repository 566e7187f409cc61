"""The vectorised scopes, idle causes, overlap and critical path against
straightforward reference implementations: per-row Python loops over every
core's metadata rows, as the analysis ran before it grouped with numpy and
shared per-row features between the cores sharing a table (TableMemo); each
is checked with the memo's tables computed anew and reused.

Each changed function's result must equal the reference's exactly, on every
case of test_analysis_columnar.py: every sample trace and, when present, the
real captures in ../shared/real-traces/."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from test_analysis_columnar import CASES, canon, fresh, loaded

from profanalyzer.analyze.attribution import CoreWork
from profanalyzer.analyze.critical import ADJACENT_PS, MAX_ADJACENT_OPS, critical_path
from profanalyzer.analyze.idle import (
    HOST_CALLBACK,
    HOST_DISPATCH,
    HOST_WAIT,
    PEER_WAIT,
    UNEXPLAINED,
    core_step_causes,
    idle_causes,
    row_kinds,
    union_intervals,
)
from profanalyzer.analyze.overlap import (
    TYPES,
    Windows,
    analyze_overlap,
    windows_for_core,
)
from profanalyzer.analyze.scopes import (
    MAX_DEPTH,
    MAX_ROWS,
    NO_SCOPE,
    collapse,
    fold_scope,
    scope_rollup,
)
from profanalyzer.classify import ROLE_CODES
from profanalyzer.core.vocab import (
    BUCKETS,
    COLLECTIVE_BUCKETS,
    IDLE_CAUSES,
)
from profanalyzer.model.parts import ScopeRow
from profanalyzer.model.trace import LINE_MODULES, LINE_OPS, Plane, Trace

BARRIER = re.compile(r"barrier", re.I)


def host_callback(text: str) -> bool:
    return HOST_CALLBACK.search(text) is not None


# ---------------------------------------------------------------------------
# Reference implementations: per-row loops, core by core
# ---------------------------------------------------------------------------

def ref_scope_rollup(trace: Trace, work: list[CoreWork], kept_steps: set[int], step_mean: float) -> tuple[ScopeRow, ...]:
    """Self time per folded name scope over the kept steps of every TensorCore,
    per kept step per TensorCore (the divisor of the top ops: kept core-steps)."""
    nb = len(BUCKETS)
    coll = np.asarray([b in COLLECTIVE_BUCKETS for b in BUCKETS], dtype=bool)
    kept_list = np.asarray(sorted(kept_steps), dtype=np.int64)
    ids: dict[str, int] = {}
    bucket_ps: dict[int, np.ndarray] = {}
    remat_ps: dict[int, float] = {}
    ops: dict[int, set[str]] = {}
    runs: dict[int, float] = {}  # max runs per kept step of one op
    layers: dict[int, set[int]] = {}
    n_core_steps = 0
    folded: dict[str, tuple[str, tuple[int, ...]]] = {}  # tf_op -> fold_scope(tf_op), shared by the cores
    for w in work:
        steps = trace.steps[w.plane.label]
        kept = np.isin(steps.number, kept_list)
        nk = int(kept.sum())
        n_core_steps += nk
        ln = w.plane.line(LINE_OPS)
        if ln is None or len(ln.events) == 0 or nk == 0:
            continue
        md = w.plane.meta
        fold = [folded[t] if t in folded else folded.setdefault(t, fold_scope(t)) for t in md.tf_op]
        row_scope = np.asarray([ids.setdefault(s, len(ids)) for s, _ in fold] + [ids.setdefault(NO_SCOPE, len(ids))], dtype=np.int64)
        ev = ln.events
        rows = np.where((ev.meta >= 0) & (ev.meta < len(md)), ev.meta, len(md)).astype(np.int64)
        ev_scope = row_scope[rows]
        remat_rows = np.concatenate([np.asarray(w.classes.remat, dtype=bool)[: len(md)], [False]]) if len(w.classes.remat) >= len(md) \
            else np.zeros(len(md) + 1, dtype=bool)
        ev_remat = remat_rows[rows].astype(np.int64)
        ns = len(ids)
        ks, ke = steps.start_ps[kept], steps.end_ps[kept]
        order = np.argsort(ks)
        ks, ke = ks[order], ke[order]
        by_bucket, by_remat = w.ops.exclusive_many([(ev_scope * nb + w.ev_bucket, ns * nb), (ev_scope * 2 + ev_remat, ns * 2)], ks, ke)
        tot_b = by_bucket.sum(axis=0).reshape(ns, nb)
        tot_r = by_remat.sum(axis=0).reshape(ns, 2)[:, 1]
        # runs of each metadata row inside the kept steps
        lo = np.searchsorted(ks, ev.start_ps, side="right") - 1
        inside = (lo >= 0) & (ev.start_ps < ke[np.clip(lo, 0, len(ke) - 1)])
        counts = np.bincount(rows[inside], minlength=len(md) + 1)
        for r in np.flatnonzero(counts).tolist():
            sid = int(row_scope[r])
            ops.setdefault(sid, set()).add(md.name[r] if r < len(md) else "")
            runs[sid] = max(runs.get(sid, 0.0), counts[r] / nk)
            if r < len(fold) and fold[r][1]:
                layers.setdefault(sid, set()).update(fold[r][1])
        for sid in np.flatnonzero(tot_b.sum(axis=1)).tolist():
            acc = bucket_ps.get(sid)
            bucket_ps[sid] = tot_b[sid].astype(np.float64) + (acc if acc is not None else 0.0)
            remat_ps[sid] = remat_ps.get(sid, 0.0) + float(tot_r[sid])
    if not bucket_ps or n_core_steps == 0:
        return ()
    names = {v: k for k, v in ids.items()}
    denom = step_mean if step_mean > 0 else 1.0
    out = []
    for sid, b in bucket_ps.items():
        per = np.rint(b / n_core_steps)  # whole picoseconds: sums of rows are exact after the JSON round trip
        ps = float(per.sum())
        count = max(len(layers.get(sid, ())), int(round(runs.get(sid, 0.0))), 1)
        out.append(ScopeRow(
            scope=names[sid],
            ps=ps,
            fraction=ps / denom,
            buckets={BUCKETS[i]: float(per[i]) for i in np.flatnonzero(per).tolist()},
            exposed_comm_ps=float(per[coll].sum()),
            remat_ps=float(round(remat_ps.get(sid, 0.0) / n_core_steps)),
            ops=len(ops.get(sid, ())),
            count=count,
        ))
    out.sort(key=lambda r: (-r.ps, r.scope))
    if len(out) > MAX_ROWS:
        out = list(out[:MAX_ROWS]) + list(collapse(out[MAX_ROWS:], 2))
        out = list(collapse(out, MAX_DEPTH))
    return tuple(out)


def ref_row_kinds(w: CoreWork) -> np.ndarray:
    """Per metadata row: HOST_WAIT for ops talking to the host, PEER_WAIT for
    collectives and barriers, UNEXPLAINED otherwise."""
    md = w.plane.meta
    n = len(md)
    out = np.full(n + 1, UNEXPLAINED, dtype=np.int8)
    cols = w.classes.columns
    coll = cols.get("collective")
    host_b = BUCKETS.index("host_offload")
    coll_b = {BUCKETS.index(b) for b in COLLECTIVE_BUCKETS}
    bucket = w.classes.bucket
    for r in range(min(n, len(bucket))):
        kind = coll[r] if coll is not None and r < len(coll) else None
        text = md.name[r]
        if int(bucket[r]) == host_b or kind == "host_transfer" or host_callback(text) or host_callback(md.display_name[r]):
            out[r] = HOST_WAIT
        elif int(bucket[r]) in coll_b or BARRIER.search(md.short_name(r)):
            out[r] = PEER_WAIT
    return out



def ref_covered_before(ms: np.ndarray, me: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time covered by disjoint sorted intervals [ms, me) before each t."""
    if not len(ms):
        return np.zeros(len(t), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(me - ms)])
    i = np.searchsorted(ms, t, side="right") - 1
    ic = np.clip(i, 0, len(ms) - 1)
    part = np.where(i >= 0, np.minimum(t, me[ic]) - ms[ic], 0)
    return np.where(i >= 0, cum[ic] + np.maximum(part, 0), 0)


def ref_gaps(w: CoreWork) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """The idle gaps of a core's XLA Ops line (start, end, kind of the op
    that ends each) and its program runs (merged XLA Modules events)."""
    ln = w.plane.line(LINE_OPS)
    mods = w.plane.line(LINE_MODULES)
    have_mods = mods is not None and len(mods.events) > 0
    if have_mods:
        ms_, mend, _ = union_intervals(mods.events.start_ps, mods.events.end_ps)
    else:
        ms_ = mend = np.zeros(0, dtype=np.int64)
    lo = np.iinfo(np.int64).min // 4
    hi = np.iinfo(np.int64).max // 4
    if ln is None or len(ln.events) == 0:
        gs, ge, nxt = np.asarray([lo]), np.asarray([hi]), np.asarray([UNEXPLAINED], dtype=np.int8)
    else:
        ev = ln.events
        top = np.flatnonzero(ev.parent < 0)
        us, ue, first = union_intervals(ev.start_ps[top], ev.end_ps[top])
        kinds = ref_row_kinds(w)
        rows = ev.meta[top[first]].astype(np.int64)
        rows = np.where((rows >= 0) & (rows < len(kinds) - 1), rows, len(kinds) - 1)
        op_kind = kinds[rows]  # kind of the op opening each merged interval
        # gaps: before the first interval, between intervals, after the last
        gs = np.concatenate([[lo], ue])
        ge = np.concatenate([us, [hi]])
        nxt = np.concatenate([op_kind, [UNEXPLAINED]]).astype(np.int8)
    keep = ge > gs
    return gs[keep], ge[keep], nxt[keep], ms_, mend, have_mods


def ref_pieces(gs, ge, nxt, ms_, mend, have_mods, a: int, b: int):
    """The gaps inside one step window [a, b): (start, end, duration, time
    inside program runs, time before the next op inside its run, next op kind)."""
    j0 = int(np.searchsorted(ge, a, side="right"))
    j1 = int(np.searchsorted(gs, b, side="left"))
    if j1 <= j0:
        return None
    s = np.maximum(gs[j0:j1], a)
    e = np.minimum(ge[j0:j1], b)
    d = np.maximum(e - s, 0)
    g_end = ge[j0:j1]
    ends_here = g_end <= b  # the op after the gap starts in this window
    if have_mods:
        inside = ref_covered_before(ms_, mend, e) - ref_covered_before(ms_, mend, s)
        # the part inside the program run that the next op starts in
        m = np.clip(np.searchsorted(ms_, g_end, side="left") - 1, 0, max(len(ms_) - 1, 0))
        in_run = ends_here & (ms_[m] < g_end) & (g_end <= mend[m]) if len(ms_) else np.zeros(len(s), dtype=bool)
        before = np.where(in_run, np.maximum(e - np.maximum(s, ms_[m]), 0), 0)
    else:
        inside = d
        before = np.where(ends_here, d, 0)
    return s, e, d, inside, before, nxt[j0:j1]


def ref_core_step_causes(w: CoreWork, step_start: np.ndarray, step_end: np.ndarray) -> tuple[np.ndarray, bool]:
    """(n_steps, 4) idle picoseconds per cause for the given step windows of
    one core (before reconciling with the idle bucket), and whether program
    boundaries were known."""
    ns = len(step_start)
    out = np.zeros((ns, len(IDLE_CAUSES)), dtype=np.int64)
    gs, ge, nxt, ms_, mend, have_mods = ref_gaps(w)
    for i in range(ns):
        got = ref_pieces(gs, ge, nxt, ms_, mend, have_mods, int(step_start[i]), int(step_end[i]))
        if got is None:
            continue
        s, e, d, inside, before, k = got
        out[i, HOST_DISPATCH] += int((d - inside).sum())
        for c in (HOST_WAIT, PEER_WAIT):
            out[i, c] += int(before[k == c].sum())
        out[i, UNEXPLAINED] += int((inside - np.where((k == HOST_WAIT) | (k == PEER_WAIT), before, 0)).sum())
    return out, have_mods


def ref_names_operand(operands: str, name: str) -> bool:
    """`%name` appears in the operand text as a whole instruction name."""
    if not name:
        return False
    at = operands.find(f"%{name}")
    while at >= 0:
        end = at + len(name) + 1
        if end >= len(operands) or not (operands[end].isalnum() or operands[end] in "._-"):
            return True
        at = operands.find(f"%{name}", end)
    return False


def ref_critical_path(plane: Plane, wins: Windows, hidden: np.ndarray) -> np.ndarray:
    """Per window: on the critical path, i.e. nothing was hidden in it and its
    (start) op consumes the output of the op that ran just before it on the
    TensorCore (the HLO text names that op among its operands), so no compute
    independent of the collective was ready to overlap it."""
    out = np.zeros(len(wins), dtype=bool)
    ln = plane.line(LINE_OPS)
    if ln is None or not len(ln.events) or not len(wins):
        return out
    ev = ln.events
    md = plane.meta
    cand = np.flatnonzero(hidden <= 0)
    before = np.searchsorted(ev.start_ps, wins.start[cand], side="left") - 1
    for k, i in zip(cand.tolist(), before.tolist(), strict=True):
        r = int(wins.row[k])
        if r < 0 or r >= len(md):
            continue
        text = md.name[r]
        operands = text[text.find("(") + 1:]
        j, looked = i, 0
        # the ops that ended within ADJACENT_PS before the window (async issue
        # ops such as slice-start can sit between a producer and its collective)
        while j >= 0 and looked < MAX_ADJACENT_OPS and ev.end_ps[j] >= wins.start[k] - ADJACENT_PS:
            if ev.end_ps[j] <= wins.start[k] + ADJACENT_PS and ev.meta[j] >= 0:  # not an op enclosing the window
                looked += 1
                if ref_names_operand(operands, md.short_name(int(ev.meta[j]))):
                    out[k] = True
                    break
            j -= 1
    return out




# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind,name", CASES)
def test_scope_rollup_matches_reference(kind, name):
    c = loaded(kind, name)
    ref = ref_scope_rollup(c.trace, c.work, c.kept, c.mean)
    fresh(c)
    assert canon(scope_rollup(c.att)) == canon(ref)
    assert canon(scope_rollup(c.att)) == canon(ref)  # tables reused


@pytest.mark.parametrize("kind,name", CASES)
def test_row_kinds_match_reference(kind, name):
    c = loaded(kind, name)
    fresh(c)
    memo = c.att.memo
    for w in c.work:
        ref = ref_row_kinds(w)
        assert row_kinds(w).tolist() == ref.tolist()
        assert row_kinds(w, memo).tolist() == ref.tolist()


def test_row_kinds_text_checks():
    """Host callbacks and barriers found in any case, in ASCII and non-ASCII
    tables (IGNORECASE matches some non-ASCII letters: dotted capital I)."""
    texts = ["%a = f32[] custom-call(), custom_call_target=\"xla_python_CPU_Callback\"", "%barrier.1 = () barrier()",
             "%x = f32[] add()", "%y = f32[] custom-call(), custom_call_target=\"callbackish\"", "%BarrIer.2 = () foo()"]
    for extra in ("", "%barr\u0130er.3 = () foo()"):
        t = texts + ([extra] if extra else [])
        n = len(t)
        plane = SimpleNamespace(meta=_Meta(t))
        cls = SimpleNamespace(bucket=np.full(n, BUCKETS.index("other_compute")), columns={"collective": np.full(n, None, dtype=object)})
        w = SimpleNamespace(plane=plane, classes=cls)
        assert row_kinds(w).tolist() == ref_row_kinds(w).tolist()
        assert row_kinds(w).tolist()[:5] == [HOST_WAIT, PEER_WAIT, UNEXPLAINED, UNEXPLAINED, PEER_WAIT]
        if extra:
            assert row_kinds(w).tolist()[5] == PEER_WAIT


class _Meta:
    def __init__(self, texts):
        self.name = tuple(texts)
        self.display_name = ("",) * len(texts)

    def __len__(self):
        return len(self.name)

    def short_name(self, r):
        return self.name[r].split("=", 1)[0].strip().lstrip("%").strip()

    @property
    def short_names(self):
        return tuple(self.short_name(r) for r in range(len(self)))


@pytest.mark.parametrize("kind,name", CASES)
def test_idle_causes_reuse_tables(kind, name):
    c = loaded(kind, name)
    fresh(c)
    cold = idle_causes(c.att)
    assert canon(idle_causes(c.att)) == canon(cold)
    assert canon(cold.causes) == canon(c.analysis.idle_causes)


def _type_code(c):
    return TYPES.index(c) if isinstance(c, str) and c in TYPES else TYPES.index("unknown")


@pytest.mark.parametrize("kind,name", CASES)
def test_overlap_matches_reference(kind, name):
    """Window types (per row, from the classification) and the per-type time
    of the collective ops against per-row loops; with and without the memo."""
    c = loaded(kind, name)
    fresh(c)
    memo = c.att.memo
    kept_list = np.asarray(sorted(c.kept), dtype=np.int64)
    own: dict[str, float] = {}
    n_core_steps = 0
    for w in c.work:
        a, b = windows_for_core(w.plane, w.classes, {}, memo), windows_for_core(w.plane, w.classes, {})
        assert canon((a[0].start, a[0].end, a[0].type, a[0].on_sc, a[0].row, a[1])) == \
            canon((b[0].start, b[0].end, b[0].type, b[0].on_sc, b[0].row, b[1]))
        coll = w.classes.columns["collective"] if len(w.classes) else []
        for t, r in zip(a[0].type.tolist(), a[0].row.tolist(), strict=True):
            expect = {_type_code(coll[r])} if w.classes.role[r] == ROLE_CODES["sync"] else set()
            if a[1] == "Async XLA Ops line":
                expect.add(_type_code(w.classes.op_class(w.plane, r).collective))
            assert not expect or t in expect
        # reference per-type time: a per-row label loop
        steps = c.trace.steps[w.plane.label]
        kept = np.isin(steps.number, kept_list)
        n_core_steps += int(kept.sum())
        ops = w.plane.line(LINE_OPS)
        if ops is None or not len(ops.events) or not kept.any() or not len(w.classes):
            continue
        names = ("none",) + TYPES
        code = {t: i for i, t in enumerate(names)}
        label = np.asarray([code[c_ if c_ else "unknown"] if isinstance(r_, str) and r_ else 0
                            for c_, r_ in zip(w.classes.columns["collective"], w.classes.columns["role"], strict=True)], dtype=np.int64)
        rows = ops.events.meta
        tot = w.ops.exclusive(np.where(rows >= 0, label[np.maximum(rows, 0)], 0), len(names),
                              steps.start_ps[kept], steps.end_ps[kept]).sum(axis=0)
        for i, t in enumerate(names[1:], 1):
            if tot[i]:
                own[t] = own.get(t, 0.0) + float(tot[i])
    got = analyze_overlap(c.att)
    n = max(n_core_steps, 1)
    # whole picoseconds (issue 23: records round every ps field when built)
    assert {t: s.exposed_ps for t, s in got.types.items() if s.exposed_ps} == {t: int(round(v / n)) for t, v in own.items() if round(v / n)}
    assert canon((got.types, got.communication, got.sparsecore)) == canon(
        (lambda r: (r.types, r.communication, r.sparsecore))(analyze_overlap(c.att)))


@pytest.mark.parametrize("kind,name", CASES)
def test_core_step_causes_match_reference(kind, name):
    c = loaded(kind, name)
    fresh(c)
    memo = c.att.memo
    for w in c.work:
        steps = c.trace.steps[w.plane.label]
        for sel in (slice(None), slice(None, None, 2), slice(0, 0)):
            a, b = steps.start_ps[sel], steps.end_ps[sel]
            got, have = core_step_causes(w, a, b, memo)
            ref, ref_have = ref_core_step_causes(w, a, b)
            assert have == ref_have
            assert got.tolist() == ref.tolist()


@pytest.mark.parametrize("kind,name", CASES)
def test_critical_path_matches_reference(kind, name):
    c = loaded(kind, name)
    fresh(c)
    memo = c.att.memo
    for w in c.work:
        wins, _ = windows_for_core(w.plane, w.classes, {})
        hidden = w.compute(wins.end) - w.compute(wins.start)
        ref = ref_critical_path(w.plane, wins, hidden)
        assert critical_path(w.plane, wins, hidden, memo).tolist() == ref.tolist()
        assert critical_path(w.plane, wins, np.zeros(len(wins), dtype=np.int64)).tolist() == \
            ref_critical_path(w.plane, wins, np.zeros(len(wins), dtype=np.int64)).tolist()
