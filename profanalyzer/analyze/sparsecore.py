"""SparseCore collective offload: what the SparseCores of each TensorCore
did in the kept steps, and the offload verdict (analysis stage).

SparseCore planes (`/device:TPU:N SparseCore K`) hold the collectives their
`Sparse Core Ops` ran; the TensorCore `call-start` / `call-done` wrappers
hand collectives to them (the overlap windows' `on_sc`). Per TensorCore
(`add_sparsecores`): busy fraction per kept step, the share of busy time
with the TensorCore computing, and the time offloaded work queued behind a
busy SparseCore (modules linked to their TensorCore start op by
`tc_offload_start_id`). `sparsecore_summary` gives the verdict:
  on           every all-gather / reduce-scatter / all-reduce type present is offloaded
  partial      some are, some run on the TensorCore
  off          collectives present, none offloaded
  not_visible  TensorCore offload wrappers present but no SparseCore activity was captured
  none         no collectives at all
Called by `profanalyzer.analyze.overlap`, which owns the windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from profanalyzer.analyze.attribution import CoreWork, PlaneClasses, locate
from profanalyzer.classify import ROLE_CODES, classify_op
from profanalyzer.core.vocab import (
    COLLECTIVE_TYPES,
    OFFLOADABLE,
    SPARSECORE_CAPTURE_HINT,
)
from profanalyzer.model.analysis import SparseCoreSummary
from profanalyzer.model.trace import (
    LINE_OPS,
    LINE_SC_MODULES,
    LINE_SC_OPS,
    Plane,
    Trace,
)

#: The TensorCore's offload_start ops by link id: (ids, first index, count, start times).
StartIndex = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(eq=False)
class SparseCoreTotals:
    """SparseCore activity summed over the TensorCores (analysis-internal).

    With `record`, the float sums also keep their terms in order, so that
    one core's totals (computed on a thread) `replay` into the trace's
    totals exactly as if added there one by one."""

    busy: list[float] = field(default_factory=list)  # busy fraction per (SparseCore, kept step)
    conc_num: float = 0.0  # busy time with the TensorCore computing
    conc_den: float = 0.0  # busy time
    queue: float = 0.0  # offloaded work waiting for a busy SparseCore
    types: set[str] = field(default_factory=set)  # collective types seen on SparseCore ops
    active: int = 0  # SparseCore planes with ops
    record: bool = False
    terms: list[tuple[str, float]] = field(default_factory=list)  # (field, term) in order, with record

    def add(self, name: str, term: float) -> None:
        setattr(self, name, getattr(self, name) + term)
        if self.record:
            self.terms.append((name, term))

    def replay(self, part: SparseCoreTotals) -> None:
        self.busy.extend(part.busy)
        self.types |= part.types
        self.active += part.active
        for name, term in part.terms:
            self.add(name, term)


def add_sparsecores(trace: Trace, w: CoreWork, ks: np.ndarray, ke: np.ndarray, acc: SparseCoreTotals) -> None:
    """Add the SparseCores of one TensorCore (kept step windows ks, ke sorted) to `acc`."""
    plane, covered = w.plane, w.compute
    start_index: StartIndex | None = None
    index_built = False  # built on first use
    for sc in trace.sparsecores_of(plane):
        ln = sc.line(LINE_SC_OPS)
        if ln is None or len(ln.events) == 0:
            continue
        acc.active += 1
        ev = ln.events
        top = ev.depth == 0
        for r in sorted(set(ev.meta[top].tolist())):
            if r >= 0:
                c = classify_op(sc.meta.name[r], sc.meta.display_name[r], sc.meta.category[r], sc.meta.tf_op[r],
                                memo=w.classes.memo)
                if c.collective:
                    acc.types.add(c.collective)
        busy, conc = _sc_busy(ev.start_ps[top], ev.end_ps[top], ks, ke, covered)
        acc.busy.extend((busy / np.maximum(ke - ks, 1)).tolist())
        acc.add("conc_num", conc)
        acc.add("conc_den", float(busy.sum()))
        # Queueing: offloaded work linked to its TensorCore op that starts
        # only after the SparseCore finished earlier work (back to back).
        mods = sc.line(LINE_SC_MODULES)
        if mods is not None and len(mods.events) > 1:
            ms, me = mods.events.start_ps, mods.events.end_ps
            link = mods.events.int_stat("tc_offload_start_id")
            # Time each module waited after its previous one ended while
            # its TensorCore start op had already issued it.
            if not index_built:
                start_index, index_built = _offload_start_index(plane, w.classes), True
            starts_tc = _offload_start_times(start_index, link)
            if starts_tc is not None:
                prev_end = np.concatenate([[np.iinfo(np.int64).min], me[:-1]])
                wait = np.where((starts_tc >= 0) & (prev_end > starts_tc), np.minimum(ms, prev_end) - starts_tc, 0)
                in_kept = locate(ks, ke, ms)[1]
                acc.add("queue", float(np.clip(wait[in_kept], 0, None).sum()))


def sparsecore_summary(trace: Trace, acc: SparseCoreTotals, on_sc: np.ndarray, w_type: np.ndarray, tc_types: set[str],
                        n_core_steps: int) -> SparseCoreSummary:
    """The SparseCore offload verdict: which offloadable types present run on
    SparseCores (windows handed over, or seen on SparseCore ops)."""
    offload_types = {COLLECTIVE_TYPES[t] for t in set(w_type[on_sc].tolist())}
    offload_types |= {t for t in acc.types if t in OFFLOADABLE}
    present = {t for t in (tc_types | acc.types) if t in OFFLOADABLE}
    offloaded = {t: (t in offload_types) for t in sorted(present)}
    detected = acc.active > 0
    wrappers = bool(on_sc.any())
    if not present and not tc_types:
        verdict, reason = "none", "no collectives in the kept steps"
    elif wrappers and not detected:
        verdict = "not_visible"
        reason = (
            f"TensorCores hand {', '.join(sorted(offload_types & present)) or 'collectives'} to SparseCores "
            f"(call-start/call-done wrappers) but {'no SparseCore planes are' if not trace.sparsecores else 'the SparseCore planes hold no ops'} "
            f"in this capture. {SPARSECORE_CAPTURE_HINT}"
        )
    elif not offload_types & present:
        verdict = "off"
        on_tc = ", ".join(sorted(present)) or ", ".join(sorted(tc_types))
        reason = f"{on_tc} run on the TensorCores; no SparseCore offload seen"
    elif present <= offload_types:
        verdict = "on"
        reason = f"{', '.join(sorted(present))} run on SparseCores"
    else:
        verdict = "partial"
        reason = (
            f"offloaded: {', '.join(sorted(present & offload_types))}; on the TensorCore: "
            f"{', '.join(sorted(present - offload_types))}"
        )
    return SparseCoreSummary(
        detected=detected,
        planes=len(trace.sparsecores),
        planes_with_activity=acc.active,
        offloaded=offloaded,
        sc_types=tuple(sorted(acc.types)),
        busy_fraction=float(np.mean(acc.busy)) if acc.busy else None,
        concurrency=(acc.conc_num / acc.conc_den) if acc.conc_den > 0 else None,
        queueing_ps=(acc.queue / n_core_steps) if detected else None,
        verdict=verdict,
        reason=reason,
    )


def _sc_busy(s: np.ndarray, e: np.ndarray, ks: np.ndarray, ke: np.ndarray, covered) -> tuple[np.ndarray, float]:
    """SparseCore busy time inside each step window (ks, ke sorted, disjoint)
    from its top-level ops (s, e: sorted, non-overlapping), and the part of it
    with the TensorCore computing. Returns (busy per step, concurrent total)."""
    if not len(ks):
        return np.zeros(0, dtype=np.int64), 0.0
    # First op ending after the step starts (running max: robust to partly
    # overlapping top-level ops, which then add zero after clipping).
    lo = np.searchsorted(np.maximum.accumulate(e), ks, side="right")
    hi = np.searchsorted(s, ke, side="left")  # ops starting before the step ends
    n = np.maximum(hi - lo, 0)
    step_of = np.repeat(np.arange(len(ks)), n)
    idx = np.repeat(lo - np.concatenate([[0], np.cumsum(n)[:-1]]), n) + np.arange(int(n.sum()))
    ss = np.clip(s[idx], ks[step_of], ke[step_of])
    ee = np.clip(e[idx], ks[step_of], ke[step_of])
    busy = np.bincount(step_of, weights=ee - ss, minlength=len(ks)).astype(np.int64)
    conc = float((covered(ee) - covered(ss)).sum()) if len(ss) else 0.0
    return busy, conc


def _offload_start_index(plane: Plane, classes: PlaneClasses) -> StartIndex | None:
    """The TensorCore's offload_start ops by link id: (ids, first index, count,
    start times sorted by id then time), or None when it has none. The link id
    is the op's `all_reduce_unique_id` event stat, else its metadata id."""
    ops = plane.line(LINE_OPS)
    if ops is None or not len(classes):
        return None
    ev = ops.events
    rows = ev.meta.astype(np.int64)
    role = np.where(rows >= 0, classes.role[np.maximum(rows, 0)], 0)
    is_start = role == ROLE_CODES["offload_start"]
    if not is_start.any():
        return None
    uid = ev.int_stat("all_reduce_unique_id")
    ids = np.where(uid >= 0, uid, plane.meta.ids[np.maximum(rows, 0)])[is_start]
    times = ev.start_ps[is_start]
    order = np.lexsort((times, ids))
    ids, times = ids[order], times[order]
    keys, first, counts = np.unique(ids, return_index=True, return_counts=True)
    return keys, first, counts, times


def _offload_start_times(index: StartIndex | None, link: np.ndarray) -> np.ndarray | None:
    """Start time of the TensorCore offload_start op each SparseCore module
    links to (`tc_offload_start_id`; the k-th module with an id links to the
    k-th start with that id), -1 when unknown. `index`: _offload_start_index."""
    if index is None or np.all(link < 0):
        return None
    keys, first, counts, times = index
    # occurrence number of each link value, in module order
    lo = np.argsort(link, kind="stable")
    sl = link[lo]
    grp_start = np.flatnonzero(np.r_[True, sl[1:] != sl[:-1]])
    occ_sorted = np.arange(len(sl)) - np.repeat(grp_start, np.diff(np.r_[grp_start, len(sl)]))
    occ = np.empty_like(occ_sorted)
    occ[lo] = occ_sorted
    k = np.searchsorted(keys, link)
    kc = np.clip(k, 0, max(len(keys) - 1, 0))
    ok = (k < len(keys)) & (keys[kc] == link) & (occ < counts[kc]) & (link >= 0)
    out = np.full(len(link), -1, dtype=np.int64)
    out[ok] = times[first[kc[ok]] + occ[ok]]
    return out
