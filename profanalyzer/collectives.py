"""Per-collective diagnosis: for each collective type, how many instances,
how many bytes at what achieved bandwidth against the chip's ICI figure,
how much of it is exposed, how far apart the TensorCores arrive at it, which
core arrives last most often (the core the others wait for) and how much the
instances vary.

An *instance* is one collective occurrence seen on several TensorCores: the
k-th window of a type in a kept step on each core (windows from
profanalyzer.overlap, in start order). A core's *arrival* is its window's
start. The last arrival of an instance counts (`distinct_last`) only when it
is later than the median of the other cores' arrivals by more than the
tolerance (`TOLERANCE_MIN_PS`, or `TOLERANCE_STEP_FRACTION` of the step when
larger): cores that arrive together name no one. Arrival times of cores on different hosts compare only as well as
their clocks agree (the definitions say so).

Reads the trace, the per-core work and the overlap windows; writes
`model.CollectiveDiagnostics` (None when fewer than two TensorCores have
collective windows).
"""

from __future__ import annotations


import numpy as np

from profanalyzer.attributed import Attributed
from profanalyzer.attribution import CoreWork, locate
from profanalyzer.model import CollectiveDiagnosis, CollectiveDiagnostics, CollectiveTypeSummary
from profanalyzer.overlap import TYPES, OverlapResult
from profanalyzer.stats import median
from profanalyzer.trace import Trace

__all__ = ["diagnose_collectives", "TOLERANCE_MIN_PS", "TOLERANCE_STEP_FRACTION"]

#: Arrivals closer than this (or TOLERANCE_STEP_FRACTION of the step) are together.
TOLERANCE_MIN_PS = 1_000_000  # 1 us
TOLERANCE_STEP_FRACTION = 0.001

RULE = ("instances: the k-th window of a collective type in a kept step on each TensorCore; arrival: the window's "
        "start; an instance's last core: the latest arrival, when later than the median of the others by more than "
        "the tolerance; "
        "arrival times across hosts compare as well as the hosts' clocks agree")


def _core_windows(trace: Trace, w: CoreWork, wins, kept: np.ndarray) -> dict[str, np.ndarray] | None:
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
    ba = w.plane.meta.bytes_accessed
    if len(ba):
        ok = (r >= 0) & (r < len(ba))
        nbytes = np.where(ok, ba[np.clip(r, 0, len(ba) - 1)], np.nan).astype(np.float64)
    else:
        nbytes = np.full(len(r), np.nan)
    return {"start": s, "end": e, "type": wins.type[inside], "step": kn[pos[inside]], "bytes": nbytes,
            "hidden": w.compute(e) - w.compute(s)}


def diagnose_collectives(att: Attributed, overlap: OverlapResult) -> CollectiveDiagnostics | None:
    trace, work, kept_steps, step_mean_ps = att.trace, att.work, att.kept_steps, att.step_mean
    kept = np.asarray(sorted(kept_steps), dtype=np.int64)
    per_core: list[tuple[str, dict[str, np.ndarray]]] = []
    n_core_steps = 0
    for ci, w in enumerate(work):
        st = trace.steps.get(w.plane.label)
        n_core_steps += int(np.isin(st.number, kept).sum()) if st is not None else 0
        if ci >= len(overlap.windows):
            continue
        cw = _core_windows(trace, w, overlap.windows[ci], kept)
        if cw is not None:
            per_core.append((w.plane.label, cw))
    if len(per_core) < 2:
        return None
    tol = max(float(TOLERANCE_MIN_PS), TOLERANCE_STEP_FRACTION * step_mean_ps)
    labels = [lab for lab, _ in per_core]
    # instance key (type, step, k) -> per core (start, end)
    inst: dict[tuple[int, int, int], dict[int, tuple[int, int]]] = {}
    for c, (_, cw) in enumerate(per_core):
        order = np.lexsort((cw["start"], cw["step"], cw["type"]))
        seen: dict[tuple[int, int], int] = {}
        for i in order.tolist():
            t, sn = int(cw["type"][i]), int(cw["step"][i])
            k = seen.get((t, sn), 0)
            seen[(t, sn)] = k + 1
            inst.setdefault((t, sn, k), {})[c] = (int(cw["start"][i]), int(cw["end"][i]))
    last_counts = np.zeros(len(per_core), dtype=np.int64)
    lateness: list[list[float]] = [[] for _ in per_core]
    by_type: dict[int, dict] = {}
    n_inst = 0
    for (t, _sn, _k), cores in sorted(inst.items()):
        if len(cores) < 2:
            continue
        n_inst += 1
        d = by_type.setdefault(t, {"n": 0, "spread": [], "last": np.zeros(len(per_core), dtype=np.int64), "distinct": 0})
        d["n"] += 1
        cs = sorted(cores)
        starts = np.asarray([cores[c][0] for c in cs], dtype=np.int64)
        d["spread"].append(float(starts.max() - starts.min()))
        j = int(np.argmax(starts))
        others = np.delete(starts, j)
        late = float(starts[j]) - median(others)
        if late <= tol:
            continue
        c_last = cs[j]
        last_counts[c_last] += 1
        d["last"][c_last] += 1
        d["distinct"] += 1
        lateness[c_last].append(late)
    if not n_inst:
        return None
    denom_steps = max(1, n_core_steps)
    types = {}
    for ti, d in sorted(by_type.items()):
        t = TYPES[ti]
        rows = [cw for _, cw in per_core]
        dur = np.concatenate([(cw["end"] - cw["start"])[cw["type"] == ti] for cw in rows]).astype(np.float64)
        byt = np.concatenate([cw["bytes"][cw["type"] == ti] for cw in rows])
        hid = np.concatenate([cw["hidden"][cw["type"] == ti] for cw in rows]).astype(np.float64)
        has_b = ~np.isnan(byt)
        bpi = float(median(byt[has_b])) if has_b.any() else None
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
            achieved_gbps=achieved,
            link_gbps=link,
            link_fraction=(achieved / link) if achieved is not None and link > 0 else None,
            exposed_ps=exposed,
            exposed_fraction=exposed / step_mean_ps if step_mean_ps > 0 else 0.0,
            exposed_window_fraction=(1.0 - float(hid.sum()) / wsum) if wsum > 0 else None,
            arrival_spread_ps=median(d["spread"]),
            last_core=labels[lc] if lc is not None else None,
            last_core_share=(float(d["last"][lc]) / d["distinct"]) if lc is not None else None,
            window_p50_ps=float(np.percentile(dur, 50)),
            window_p90_ps=float(np.percentile(dur, 90)),
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
        last_core_lateness_ps=median(lateness[top]) if top is not None else 0.0,
        last_counts={labels[c]: int(n) for c, n in enumerate(last_counts.tolist()) if n},
        types=types,
        rule=RULE,
    )
