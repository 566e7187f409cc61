"""Per-collective diagnosis: for each collective type, how many instances,
how many bytes at what achieved bandwidth against the chip's ICI figure,
how much of it is exposed, how far apart the TensorCores arrive at it, which
core arrives last most often (the core the others wait for) and how much the
instances vary.

An *instance* is one collective occurrence seen on several TensorCores: the
k-th window of a type in a kept step on each core (windows from
profanalyzer.analyze.overlap, in start order). A core's *arrival* is its window's
start. The last arrival of an instance counts (`distinct_last`) only when it
is later than the median of the other cores' arrivals by more than the
tolerance (`TOLERANCE_MIN_PS`, or `TOLERANCE_STEP_FRACTION` of the step when
larger): cores that arrive together name no one. Arrival times of cores on different hosts compare only as well as
their clocks agree (the definitions say so).

Bytes: what each collective moves per device over the links, from its HLO
shapes and group (profanalyzer.read.hlo.traffic); GB/s is that over its window
(the bus bandwidth), flagged `above_link` when the link could not carry it.
With one TensorCore there are no arrivals to compare: the instances are its
windows, no core is late.

Reads the trace, the per-core work and the overlap windows; writes
`model.CollectiveDiagnostics` (None when no TensorCore has collective
windows in a kept step).
"""

from __future__ import annotations

import numpy as np

from profanalyzer.analyze.attributed import Attributed
from profanalyzer.analyze.attribution import CoreWork, locate
from profanalyzer.analyze.overlap import (
    TYPES,
    OverlapResult,
    traffic_cache,
    window_traffic,
)
from profanalyzer.core.arrays import unique_ids
from profanalyzer.core.stats import median, nanmedian_rows, percentile
from profanalyzer.core.vocab import PREDICTED_INPUT_KINDS
from profanalyzer.model.analysis import (
    CollectiveDiagnosis,
    CollectiveDiagnostics,
    CollectiveTypeSummary,
)
from profanalyzer.model.trace import Trace
from profanalyzer.read.hlo.traffic import ALGORITHM

__all__ = ["diagnose_collectives", "TOLERANCE_MIN_PS", "TOLERANCE_STEP_FRACTION"]

#: Arrivals closer than this (or TOLERANCE_STEP_FRACTION of the step) are together.
TOLERANCE_MIN_PS = 1_000_000  # 1 us
TOLERANCE_STEP_FRACTION = 0.001

RULE = ("instances: the k-th window of a collective type in a kept step on each TensorCore; arrival: the window's "
        "start; an instance's last core: the latest arrival, when later than the median of the others by more than "
        "the tolerance; "
        "arrival times across hosts compare as well as the hosts' clocks agree")


def _core_windows(trace: Trace, w: CoreWork, wins, kept: np.ndarray, cache: dict) -> dict[str, np.ndarray] | None:
    steps = trace.steps.get(w.plane.label)
    if steps is None or not len(wins):
        return None
    sel = np.isin(steps.number, kept)
    ks, ke, kn = steps.start_ps[sel], steps.end_ps[sel], steps.number[sel]
    order = np.argsort(ks)
    ks, ke, kn = ks[order], ke[order], kn[order]
    pos, inside = locate(ks, ke, wins.start)
    if not inside.any():
        return None
    s, e = wins.start[inside], wins.end[inside]
    r = wins.row[inside]
    moved, buf, group, kind = window_traffic(w.plane.meta, r, wins.type[inside], cache)
    return {"start": s, "end": e, "type": wins.type[inside], "step": kn[pos[inside]], "bytes": moved, "buffer": buf,
            "group": group, "kind": kind, "hidden": w.compute(e) - w.compute(s)}



def _instances(cores: list[dict[str, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The collective instances across cores: an instance is the k-th window
    (by start) of one type in one step, matched across cores by (type, step,
    k). Returns its type per instance, and per instance x core the window's
    start and whether that core has it."""
    keys, cols, vals = [], [], []
    for c, cw in enumerate(cores):
        t, sn, st = (np.asarray(cw[k], dtype=np.int64) for k in ("type", "step", "start"))
        if not len(t):
            continue
        order = np.lexsort((st, sn, t))
        t, sn, st = t[order], sn[order], st[order]
        first = np.ones(len(t), dtype=bool)
        first[1:] = (t[1:] != t[:-1]) | (sn[1:] != sn[:-1])
        group = np.cumsum(first) - 1
        k = np.arange(len(t)) - np.flatnonzero(first)[group]
        keys.append(np.stack([t, sn, k], axis=1))
        cols.append(np.full(len(t), c, dtype=np.int64))
        vals.append(st)
    if not keys:
        empty = np.zeros((0, len(cores)), dtype=np.int64)
        return np.zeros(0, dtype=np.int64), empty, empty.astype(bool)
    key = np.concatenate(keys)
    # (type, step, k) as one integer: types and k are small, steps a range
    n_types, n_k = int(key[:, 0].max()) + 1, int(key[:, 2].max()) + 1
    step0 = int(key[:, 1].min())
    flat = ((key[:, 1] - step0) * n_k + key[:, 2]) * n_types + key[:, 0]
    uniq, inv = np.unique(flat, return_inverse=True)
    starts = np.zeros((len(uniq), len(cores)), dtype=np.int64)
    present = np.zeros((len(uniq), len(cores)), dtype=bool)
    col = np.concatenate(cols)
    starts[inv, col] = np.concatenate(vals)
    present[inv, col] = True
    return uniq % n_types, starts, present

def diagnose_collectives(att: Attributed, overlap: OverlapResult) -> CollectiveDiagnostics | None:
    trace, work, kept_steps, step_mean_ps = att.trace, att.work, att.kept_steps, att.step_mean
    kept = np.asarray(sorted(kept_steps), dtype=np.int64)
    per_core: list[tuple[str, dict[str, np.ndarray]]] = []
    n_core_steps = 0
    if trace.input_kind in PREDICTED_INPUT_KINDS:  # a replayed program's planes are replicas of one schedule
        work = work[:1]
    for ci, w in enumerate(work):
        st = trace.steps.get(w.plane.label)
        n_core_steps += int(np.isin(st.number, kept).sum()) if st is not None else 0
        if ci >= len(overlap.windows):
            continue
        cw = _core_windows(trace, w, overlap.windows[ci], kept, traffic_cache(att.memo, w))
        if cw is not None:
            per_core.append((w.plane.label, cw))
    if not per_core:
        return None
    tol = max(float(TOLERANCE_MIN_PS), TOLERANCE_STEP_FRACTION * step_mean_ps)
    labels = [lab for lab, _ in per_core]
    inst_type, starts, present = _instances([cw for _, cw in per_core])
    # an instance counts when two or more cores ran it; the last core is the
    # first of the latest starts, late by its start minus the others' median
    shared = present.sum(axis=1) >= min(2, len(per_core))
    inst_type, starts, present = inst_type[shared], starts[shared], present[shared]
    n_inst = len(inst_type)
    rows = np.arange(n_inst)
    sf = np.where(present, starts.astype(np.float64), np.nan)
    spread = np.nanmax(sf, axis=1) - np.nanmin(sf, axis=1) if n_inst else np.zeros(0)
    last = np.nanargmax(sf, axis=1) if n_inst else np.zeros(0, dtype=np.int64)
    others = sf.copy()
    others[rows, last] = np.nan
    late_by = sf[rows, last] - nanmedian_rows(others) if n_inst and len(per_core) > 1 else np.zeros(n_inst)
    is_late = late_by > tol
    last_counts = np.bincount(last[is_late], minlength=len(per_core)).astype(np.int64)
    by_type: dict[int, dict] = {}
    for t in unique_ids(inst_type).tolist():
        of = inst_type == t
        late_t = of & is_late
        by_type[int(t)] = {"n": int(of.sum()), "spread": spread[of],
                           "last": np.bincount(last[late_t], minlength=len(per_core)).astype(np.int64),
                           "distinct": int(late_t.sum())}
    if not n_inst:
        return None
    denom_steps = max(1, n_core_steps)
    types = {}
    for ti, d in sorted(by_type.items()):
        t = TYPES[ti]
        cores = [cw for _, cw in per_core]
        dur = np.concatenate([(cw["end"] - cw["start"])[cw["type"] == ti] for cw in cores]).astype(np.float64)
        byt = np.concatenate([cw["bytes"][cw["type"] == ti] for cw in cores])
        buf = np.concatenate([cw["buffer"][cw["type"] == ti] for cw in cores])
        grp = np.concatenate([cw["group"][cw["type"] == ti] for cw in cores])
        hid = np.concatenate([cw["hidden"][cw["type"] == ti] for cw in cores]).astype(np.float64)
        has_b = ~np.isnan(byt)
        bpi = float(median(buf[has_b])) if has_b.any() else None
        mpi = float(median(byt[has_b])) if has_b.any() else None
        kinds = np.concatenate([cw["kind"][cw["type"] == ti] for cw in cores])
        known_k = kinds[has_b & (kinds >= 0)]
        runs = TYPES[int(np.bincount(known_k).argmax())] if len(known_k) else t
        algorithm = ALGORITHM.get(runs, "") + (f" (its windows run {runs.replace('_', '-')}s)" if runs != t else "")
        known_g = grp[has_b & (grp > 0)]
        group = int(np.bincount(known_g).argmax()) if len(known_g) else None
        bw_time = float(dur[has_b].sum())
        achieved = float(byt[has_b].sum()) / bw_time * 1e12 / 1e9 if has_b.any() and bw_time > 0 else None
        link = trace.chip.core_ici_bytes_per_s / 1e9
        summ: CollectiveTypeSummary | None = overlap.types.get(t)
        exposed = summ.exposed_ps if summ else 0.0
        wsum = float(dur.sum())
        cv = float(dur.std() / dur.mean()) if len(dur) > 1 and dur.mean() > 0 else None
        lc = int(np.argmax(d["last"])) if d["distinct"] else None
        types[t] = CollectiveDiagnosis(
            type=t,
            instances=int(d["n"]),
            per_step=len(dur) / denom_steps,
            bytes_per_instance=bpi,
            moved_per_instance=mpi,
            group=group,
            algorithm=algorithm,
            achieved_gbps=achieved,
            link_gbps=link,
            link_fraction=(achieved / link) if achieved is not None and link > 0 else None,
            above_link=achieved is not None and link > 0 and achieved > link,
            exposed_ps=exposed,
            exposed_fraction=exposed / step_mean_ps if step_mean_ps > 0 else 0.0,
            exposed_window_fraction=(1.0 - float(hid.sum()) / wsum) if wsum > 0 else None,
            arrival_spread_ps=median(d["spread"]),
            last_core=labels[lc] if lc is not None else None,
            last_core_share=(float(d["last"][lc]) / d["distinct"]) if lc is not None else None,
            window_p50_ps=percentile(dur, 50),
            window_p90_ps=percentile(dur, 90),
            window_cv=cv,
        )
    distinct = int(last_counts.sum())
    top = int(np.argmax(last_counts)) if distinct else None
    return CollectiveDiagnostics(
        cores=len(per_core),
        instances=n_inst,
        distinct_last=distinct,
        tolerance_ps=tol,
        last_core=labels[top] if top is not None else None,
        last_core_share=(float(last_counts[top]) / distinct) if top is not None else None,
        last_core_lateness_ps=median(late_by[is_late & (last == top)]) if top is not None else 0.0,
        last_counts={labels[c]: int(n) for c, n in enumerate(last_counts.tolist()) if n},
        types=types,
        rule=RULE,
    )
