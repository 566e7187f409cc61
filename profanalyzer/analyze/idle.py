"""Why the TensorCore was idle: the `idle` bucket split into causes.

Idle time is every instant of a step window with no op on the core's `XLA
Ops` line. Each idle gap (between the union of the core's top-level ops,
clipped to the kept step windows) is split into:

* `host_dispatch`: the part outside every program run (`XLA Modules` line):
  the core waits for the host to launch the next program (dispatch overhead,
  Python between steps, `jax.block_until_ready` in the loop, input pipeline);
* `host_wait`: inside a program run, the time before an op talking to the host
  (infeed/outfeed, host send/recv, host callbacks, host-offload copies of
  memory space S(5) buffers): the program waits on the host;
* `peer_wait`: inside a program run, the time before a collective or barrier
  op that the slowest participant gates: per kept step, the idle before
  collectives (only the part of a gap inside the run the op belongs to, from
  the run's start at the earliest) counts up to the core's *lag*: how much
  earlier it finished its compute than the slowest core of the capture in
  that step (compute = step - idle - collectives, as in `per_core`), less
  what it already waited inside collective ops (its collective time beyond
  the slowest core's). The slowest core never waits on a peer; idle before a
  collective beyond the lag is a scheduling bubble and goes to `unexplained`
  (see :func:`peer_cap`);
* `unexplained`: the rest (gaps between compute ops, scheduling bubbles).

Per core and kept step the causes sum to the step's `idle` bucket exactly:
the gaps are integer picoseconds; when the attribution's idle differs from
the gaps' union (overlapping top-level ops), `unexplained` absorbs the
difference and, if it would go negative, the causes are scaled down to fit.
The summary averages like the breakdown (mean over each core's kept steps,
then over cores), so the causes' fractions sum to the idle bucket's.

Without an `XLA Modules` line, program boundaries are unknown: dispatch gaps
are not separated (a note says so).

Imports: model, vocab, trace, attribution, attributed (TableMemo) (the analysis stage).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from profanalyzer.analyze.attributed import TableMemo
from profanalyzer.analyze.attribution import IDLE, CoreWork
from profanalyzer.core.vocab import BUCKETS, COLLECTIVE_BUCKETS, IDLE_CAUSES
from profanalyzer.model.parts import IdleCause
from profanalyzer.model.trace import LINE_MODULES, LINE_OPS

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

__all__ = ["IdleResult", "idle_causes", "core_step_causes", "host_gaps", "union_intervals", "reconcile", "peer_cap",
           "HOST_CALLBACK", "row_kinds"]

#: Host callbacks (custom-call targets and instruction names).
HOST_CALLBACK = re.compile(r"cpu_callback|host_callback|python_callback|io_callback|pure_callback", re.I)
_BARRIER = re.compile(r"barrier", re.I)
HOST_DISPATCH, HOST_WAIT, PEER_WAIT, UNEXPLAINED = range(4)
assert IDLE_CAUSES == ("host_dispatch", "host_wait", "peer_wait", "unexplained")


@dataclass(frozen=True)
class IdleResult:
    causes: dict[str, IdleCause]
    notes: tuple[str, ...]
    by_step: dict[str, dict[str, float]] = field(default_factory=dict)  # step -> cause -> ps (mean over cores)
    by_core: dict[str, dict[str, float]] = field(default_factory=dict)  # core label -> cause -> ps (mean over kept steps)


def _host_callback(text: str) -> bool:
    """HOST_CALLBACK.search(text), with a cheap exact pre-check: every
    alternative contains "callback", and no character outside ASCII folds to
    one of its letters except the Kelvin sign, which str.lower() maps to "k"."""
    return "callback" in text.lower() and HOST_CALLBACK.search(text) is not None


class _Lowered:
    """A column of texts joined and case-folded once, for `containing`
    searches; `low` is None when some text is not ASCII."""

    def __init__(self, texts) -> None:
        self.texts = texts
        joined = "\0".join(texts)
        self.low: bytes | None = None
        self.starts = np.zeros(0, dtype=np.int64)  # where each text begins in `low`
        if joined.isascii():
            # ASCII letters folded to lower case by setting bit 0x20 (what
            # str.lower does to them); other bytes change too, but never into
            # a letter, and the needles are letters only.
            self.low = (np.frombuffer(joined.encode("ascii"), dtype=np.uint8) | 0x20).tobytes()
            self.starts = np.cumsum([0] + [len(t) + 1 for t in texts[:-1]])

    def containing(self, needle: str, pattern: re.Pattern) -> np.ndarray:
        """Per text: may `pattern` (case-insensitive, every match contains
        `needle`, lower case ASCII letters) match it? All ASCII (the usual
        case): whether the text contains `needle` in any case, one search over
        the joined lower-cased texts; else `pattern` itself, text by text
        (non-ASCII letters can match ASCII ones under IGNORECASE)."""
        texts = self.texts
        out = np.zeros(len(texts), dtype=bool)
        if not len(texts):
            return out
        if self.low is None:
            out[:] = [pattern.search(t) is not None for t in texts]
            return out
        low, pat = self.low, needle.encode("ascii")
        hits = []
        at = low.find(pat)
        while at >= 0:
            hits.append(at)
            at = low.find(pat, at + 1)
        if hits:
            out[np.searchsorted(self.starts, np.asarray(hits), side="right") - 1] = True
        return out


def _kinds_of_rows(w: CoreWork) -> np.ndarray:
    """row_kinds without the memo: the text checks run only on the rows whose
    text contains the pattern's letters at all."""
    md = w.plane.meta
    n = len(md)
    out = np.full(n + 1, UNEXPLAINED, dtype=np.int8)
    cols = w.classes.columns
    coll = cols.get("collective")
    host_b = BUCKETS.index("host_offload")
    coll_b = np.asarray([b in COLLECTIVE_BUCKETS for b in BUCKETS], dtype=bool)
    bucket = np.asarray(w.classes.bucket, dtype=np.int64)
    m = min(n, len(bucket))
    if not m:
        return out
    b = bucket[:m]
    host = b == host_b
    if coll is not None:
        k = min(m, len(coll))
        host[:k] |= np.asarray([c == "host_transfer" for c in coll[:k].tolist()], dtype=bool)
    names, shown = md.name[:m], md.display_name[:m]
    cand = _Lowered(names).containing("callback", HOST_CALLBACK) | _Lowered(shown).containing("callback", HOST_CALLBACK)
    for r in np.flatnonzero(cand & ~host).tolist():
        host[r] = _host_callback(names[r]) or _host_callback(shown[r])
    peer = ~host & coll_b[b]
    # Barriers by their short name (the display name, else the instruction
    # name in the HLO text): only a short name holding the letters can match.
    short = md.short_names[:m]
    cand = ~host & ~peer & _Lowered(short).containing("barrier", _BARRIER)
    for r in np.flatnonzero(cand).tolist():
        peer[r] = _BARRIER.search(short[r]) is not None
    out[:m][host] = HOST_WAIT
    out[:m][peer] = PEER_WAIT
    return out


def row_kinds(w: CoreWork, memo: TableMemo | None = None) -> np.ndarray:
    """Per metadata row: HOST_WAIT for ops talking to the host, PEER_WAIT for
    collectives and barriers, UNEXPLAINED otherwise (plus one UNEXPLAINED row
    for events without metadata). `memo`: the trace's, so cores with equal
    tables share the result."""
    if memo is None:
        return _kinds_of_rows(w)
    return memo.get("idle.kinds", w.plane, w.classes, lambda: _kinds_of_rows(w))


def union_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merged intervals of (sorted by start) events: (starts, ends, index of
    the event opening each merged interval)."""
    if not len(start):
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    run_end = np.maximum.accumulate(end)
    new = np.ones(len(start), dtype=bool)
    new[1:] = start[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:] - 1, [len(start) - 1]])
    return start[first], run_end[last], first


def _covered_before(ms: np.ndarray, me: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time covered by disjoint sorted intervals [ms, me) before each t."""
    if not len(ms):
        return np.zeros(len(t), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(me - ms)])
    i = np.searchsorted(ms, t, side="right") - 1
    ic = np.clip(i, 0, len(ms) - 1)
    part = np.where(i >= 0, np.minimum(t, me[ic]) - ms[ic], 0)
    return np.where(i >= 0, cum[ic] + np.maximum(part, 0), 0)


def _gaps(w: CoreWork, memo: TableMemo | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """The idle gaps of a core's XLA Ops line (start, end, kind of the op
    that ends each) and its program runs (merged XLA Modules events)."""
    ln = w.plane.line(LINE_OPS)
    mods = w.plane.line(LINE_MODULES)
    have_mods = mods is not None and len(mods.events) > 0
    if mods is not None and have_mods:
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
        kinds = row_kinds(w, memo)
        rows = ev.meta[top[first]].astype(np.int64)
        rows = np.where((rows >= 0) & (rows < len(kinds) - 1), rows, len(kinds) - 1)
        op_kind = kinds[rows]  # kind of the op opening each merged interval
        # gaps: before the first interval, between intervals, after the last
        gs = np.concatenate([[lo], ue])
        ge = np.concatenate([us, [hi]])
        nxt = np.concatenate([op_kind, [UNEXPLAINED]]).astype(np.int8)
    keep = ge > gs
    return gs[keep], ge[keep], nxt[keep], ms_, mend, have_mods


def _pieces(gs, ge, nxt, ms_, mend, have_mods, a: int, b: int):
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
        inside = _covered_before(ms_, mend, e) - _covered_before(ms_, mend, s)
        # the part inside the program run that the next op starts in
        m = np.clip(np.searchsorted(ms_, g_end, side="left") - 1, 0, max(len(ms_) - 1, 0))
        in_run = ends_here & (ms_[m] < g_end) & (g_end <= mend[m]) if len(ms_) else np.zeros(len(s), dtype=bool)
        before = np.where(in_run, np.maximum(e - np.maximum(s, ms_[m]), 0), 0)
    else:
        inside = d
        before = np.where(ends_here, d, 0)
    return s, e, d, inside, before, nxt[j0:j1]


def _pieces_all(gs, ge, nxt, ms_, mend, have_mods, step_start: np.ndarray, step_end: np.ndarray):
    """_pieces of every step window at once: (step of each piece, duration,
    time inside program runs, time before the next op inside its run, next
    op kind), the pieces of each window in order."""
    a_all = np.asarray(step_start, dtype=np.int64)
    b_all = np.asarray(step_end, dtype=np.int64)
    j0 = np.searchsorted(ge, a_all, side="right")
    j1 = np.searchsorted(gs, b_all, side="left")
    cnt = np.maximum(j1 - j0, 0)
    step = np.repeat(np.arange(len(a_all), dtype=np.int64), cnt)
    j = np.arange(len(step), dtype=np.int64) + np.repeat(j0 - (np.cumsum(cnt) - cnt), cnt)
    a, b = a_all[step], b_all[step]
    s = np.maximum(gs[j], a)
    e = np.minimum(ge[j], b)
    d = np.maximum(e - s, 0)
    g_end = ge[j]
    ends_here = g_end <= b  # the op after the gap starts in this window
    if have_mods:
        inside = _covered_before(ms_, mend, e) - _covered_before(ms_, mend, s)
        # the part inside the program run that the next op starts in
        m = np.clip(np.searchsorted(ms_, g_end, side="left") - 1, 0, max(len(ms_) - 1, 0))
        in_run = ends_here & (ms_[m] < g_end) & (g_end <= mend[m]) if len(ms_) else np.zeros(len(s), dtype=bool)
        before = np.where(in_run, np.maximum(e - np.maximum(s, ms_[m]), 0), 0) if len(ms_) else np.zeros(len(s), dtype=np.int64)
    else:
        inside = d
        before = np.where(ends_here, d, 0)
    return step, d, inside, before, nxt[j]


def core_step_causes(w: CoreWork, step_start: np.ndarray, step_end: np.ndarray,
                     memo: TableMemo | None = None) -> tuple[np.ndarray, bool]:
    """(n_steps, 4) idle picoseconds per cause for the given step windows of
    one core (before reconciling with the idle bucket), and whether program
    boundaries were known. All windows at once: integer sums per window."""
    ns = len(step_start)
    out = np.zeros((ns, len(IDLE_CAUSES)), dtype=np.int64)
    gs, ge, nxt, ms_, mend, have_mods = _gaps(w, memo)
    if not ns:
        return out, have_mods
    step, d, inside, before, k = _pieces_all(gs, ge, nxt, ms_, mend, have_mods, step_start, step_end)
    waits = (k == HOST_WAIT) | (k == PEER_WAIT)
    np.add.at(out[:, HOST_DISPATCH], step, (d - inside).astype(np.int64))
    for c in (HOST_WAIT, PEER_WAIT):
        sel = k == c
        np.add.at(out[:, c], step[sel], before[sel].astype(np.int64))
    np.add.at(out[:, UNEXPLAINED], step, (inside - np.where(waits, before, 0)).astype(np.int64))
    return out, have_mods


def host_gaps(w: CoreWork, step_start: np.ndarray, step_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The host-caused idle of one core in the given step windows as sorted
    disjoint intervals: idle outside program runs, and idle before an op
    talking to the host inside its run."""
    gs, ge, nxt, ms_, mend, have_mods = _gaps(w)
    out_s: list[int] = []
    out_e: list[int] = []
    for i in range(len(step_start)):
        got = _pieces(gs, ge, nxt, ms_, mend, have_mods, int(step_start[i]), int(step_end[i]))
        if got is None:
            continue
        s, e, d, inside, before, k = got
        for j in np.flatnonzero((d - inside > 0) | ((k == HOST_WAIT) & (before > 0))).tolist():
            a, b = int(s[j]), int(e[j])
            if have_mods:  # the parts outside every run
                lo = int(np.searchsorted(mend, a, side="right"))
                cur = a
                for x, y in zip(ms_[lo:].tolist(), mend[lo:].tolist(), strict=True):
                    if x >= b:
                        break
                    if x > cur:
                        out_s.append(cur)
                        out_e.append(x)
                    cur = max(cur, y)
                if cur < b:
                    out_s.append(cur)
                    out_e.append(b)
            if k[j] == HOST_WAIT and before[j] > 0:
                out_s.append(b - int(before[j]))
                out_e.append(b)
    if not out_s:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    order = np.argsort(out_s, kind="mergesort")
    ss, ee = np.asarray(out_s, dtype=np.int64)[order], np.asarray(out_e, dtype=np.int64)[order]
    us, ue, _ = union_intervals(ss, ee)
    return us, ue


def reconcile(raw: np.ndarray, idle: np.ndarray) -> np.ndarray:
    """Make each row sum to the idle bucket exactly (integer ps)."""
    out = raw.copy()
    for i in range(len(out)):
        tot = int(out[i].sum())
        target = int(idle[i])
        if tot <= target:
            out[i, UNEXPLAINED] += target - tot
            continue
        # more gap time than idle (overlapping top-level ops): scale down
        scaled = np.floor(out[i] * (target / tot)).astype(np.int64) if tot else out[i] * 0
        scaled[UNEXPLAINED] += target - int(scaled.sum())
        out[i] = scaled
    return out


def peer_cap(raw: list[np.ndarray], steps: list[np.ndarray], compute: list[np.ndarray],
             coll: list[np.ndarray]) -> list[np.ndarray]:
    """Keep as `peer_wait` only the idle before collectives that the slowest
    core gates; move the rest to `unexplained` (each row's sum is unchanged).

    Per core (list index) and kept step (rows; `steps` their numbers): the lag
    is the slowest core's compute in that step minus this core's, less this
    core's collective time beyond the slowest core's (a wait already spent
    inside collective ops); `peer_wait` = min(idle before collectives, lag).
    A step only one core has keeps no peer wait."""
    by_step: dict[int, list[tuple[int, int]]] = {}
    for ci, nums in enumerate(steps):
        for r, n in enumerate(nums.tolist()):
            by_step.setdefault(int(n), []).append((ci, r))
    out = [r.copy() for r in raw]
    for members in by_step.values():
        comp = np.asarray([int(compute[ci][r]) for ci, r in members], dtype=np.int64)
        slow = int(np.argmax(comp)) if len(comp) else 0
        ref_ci, ref_r = members[slow]
        for j, (ci, r) in enumerate(members):
            lag = int(comp[slow] - comp[j]) - max(0, int(coll[ci][r]) - int(coll[ref_ci][ref_r]))
            lag = max(0, lag) if len(members) > 1 else 0
            cand = int(out[ci][r, PEER_WAIT])
            keep = min(cand, lag)
            out[ci][r, PEER_WAIT] = keep
            out[ci][r, UNEXPLAINED] += cand - keep
    return out


def idle_causes(att: Attributed) -> IdleResult:
    """The idle bucket split into causes, averaged like the breakdown; also
    per kept step (mean over the cores that have it) and per core (mean over
    its kept steps)."""
    trace, work, kept_steps, step_mean = att.trace, att.work, att.kept_steps, att.step_mean
    kept_list = np.asarray(sorted(kept_steps), dtype=np.int64)
    labels: list[str] = []
    raws: list[np.ndarray] = []
    nums: list[np.ndarray] = []
    comps: list[np.ndarray] = []
    colls: list[np.ndarray] = []
    idles: list[np.ndarray] = []
    no_modules = 0
    coll_cols = [BUCKETS.index(b) for b in COLLECTIVE_BUCKETS]
    memo = att.memo
    for w in work:
        core = w.attribution
        if not len(core.step_numbers):
            continue
        kept = np.isin(core.step_numbers, kept_list)
        if not kept.any():
            continue
        steps = trace.steps[w.plane.label]
        # attribution rows are in the order of trace.steps (same arrays)
        raw, have = core_step_causes(w, steps.start_ps[kept], steps.end_ps[kept], memo)
        no_modules += 0 if have else 1
        b = core.buckets[kept]
        c = b[:, coll_cols].sum(axis=1)
        labels.append(w.plane.label)
        raws.append(raw)
        nums.append(core.step_numbers[kept])
        idles.append(b[:, IDLE])
        colls.append(c)
        comps.append(b.sum(axis=1) - b[:, IDLE] - c)
    fixed = [reconcile(r, i) for r, i in zip(peer_cap(raws, nums, comps, colls), idles, strict=True)]
    notes = []
    if no_modules:
        notes.append(f"{no_modules} TensorCore(s) have no XLA Modules line: idle between programs (host dispatch) "
                     "is not separated from idle inside programs")
    if not fixed:
        return IdleResult({c: IdleCause(0.0, 0.0) for c in IDLE_CAUSES}, tuple(notes))
    avg = np.asarray([f.mean(axis=0) for f in fixed], dtype=np.float64).mean(axis=0)
    denom = step_mean if step_mean > 0 else 1.0
    by_core = {lab: dict(zip(IDLE_CAUSES, f.mean(axis=0).tolist(), strict=True)) for lab, f in zip(labels, fixed, strict=True)}
    acc: dict[int, list[np.ndarray]] = {}
    for f, n in zip(fixed, nums, strict=True):
        for r, s in enumerate(n.tolist()):
            acc.setdefault(int(s), []).append(f[r])
    by_step = {str(s): dict(zip(IDLE_CAUSES, np.mean(np.asarray(v, dtype=np.float64), axis=0).tolist(), strict=True))
               for s, v in sorted(acc.items())}
    return IdleResult({c: IdleCause(float(avg[i]), float(avg[i]) / denom) for i, c in enumerate(IDLE_CAUSES)},
                      tuple(notes), by_step, by_core)
