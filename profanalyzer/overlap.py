"""Communication overlap and SparseCore collective offload (guide lever L3).

Collective windows, one per collective occurrence on a TensorCore:
  * from the `Async XLA Ops` line when it holds collective windows (each event
    spans start -> done; its metadata is the start op);
  * else by pairing start/done ops on `XLA Ops` (same pair key, in time order;
    unmatched halves are counted and reported, never dropped silently);
  * a synchronous collective is its own window.

For each window: hidden time = TensorCore compute (matmul, attention, other
compute) inside the window; exposed = the rest of the window; hidden fraction
= hidden / window. The per-type `exposed_ps` of the summary is the attribution
bucket of that collective (time its own ops occupy the core), so the overlap
section and the breakdown always agree.

SparseCore offload: SparseCore planes (`/device:TPU:N SparseCore K`), the
collectives their `Sparse Core Ops` ran, and the TensorCore `call-start` /
`call-done` wrappers that hand collectives to them. Verdict:
  on           every all-gather / reduce-scatter / all-reduce type present is offloaded
  partial      some are, some run on the TensorCore
  off          collectives present, none offloaded
  not_visible  TensorCore offload wrappers present but no SparseCore activity was captured
  none         no collectives at all
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from profanalyzer.attribution import BUCKET_INDEX
from profanalyzer.classify import BUCKETS, COLLECTIVE_BUCKETS, async_pair_key, classify_op
from profanalyzer.trace import LINE_ASYNC, LINE_OPS, LINE_SC_MODULES, LINE_SC_OPS, Plane, Trace

#: Window classes by hidden fraction.
HIDDEN_MIN = 0.9  # >= : hidden
EXPOSED_MAX = 0.1  # <= : exposed; between: partial
#: Collective types SparseCore offload handles on TPU7x (guide L3 flags).
OFFLOADABLE = ("all_gather", "reduce_scatter", "all_reduce")
TYPES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "collective_permute", "send_recv", "host_transfer", "unknown")
TOP_WINDOWS = 15

CAPTURE_HINT = (
    "SparseCore activity is not in this capture: enable SparseCore offload tracing "
    "(LIBTPU_INIT_ARGS: --xla_tpu_enable_all_gather_offload_tracing=true "
    "--xla_tpu_enable_reduce_scatter_offload_tracing=true --xla_tpu_enable_all_reduce_offload_tracing=true) "
    "and capture device traces of all planes"
)

_COMPUTE = np.asarray(
    [b not in COLLECTIVE_BUCKETS and b != "idle" for b in BUCKETS], dtype=bool
)


@dataclass(frozen=True)
class CollectiveTypeSummary:
    type: str
    bucket: str
    count: float  # windows per step per TensorCore
    window_ps: float  # per step per TensorCore
    exposed_ps: float  # attribution bucket share of this type (per step per core)
    hidden_ps: float  # compute inside its windows
    hidden_fraction: float | None
    engine: str  # TensorCore | SparseCore | mixed
    bytes: float | None  # per step per core, when known
    fraction_of_step: float  # exposed / step
    tf_ops: tuple[str, ...] = ()  # framework scopes of its most exposed windows (up to 3)


@dataclass(frozen=True)
class WindowRecord:
    core: str
    step: int
    type: str
    name: str
    tf_op: str
    engine: str
    offset_ps: int  # from step start
    offset_fraction: float  # of the step
    window_ps: int
    hidden_ps: int
    exposed_ps: int
    hidden_fraction: float
    klass: str  # hidden | partial | exposed
    before_first_compute: bool


@dataclass(frozen=True)
class SparseCoreSummary:
    detected: bool  # SparseCore planes with events in this capture
    planes: int
    planes_with_activity: int
    offloaded: Mapping[str, bool]  # per offloadable type present
    sc_types: tuple[str, ...]  # collective types seen on SparseCore ops
    busy_fraction: float | None  # mean SparseCore busy time / step
    concurrency: float | None  # share of SparseCore busy time with the TensorCore computing
    queueing_ps: float | None  # per step per TensorCore: offloaded work waiting for a busy SparseCore
    verdict: str
    reason: str


@dataclass(frozen=True)
class CommunicationSummary:
    top_exposed: tuple[WindowRecord, ...]
    per_step_exposed: Mapping[int, Mapping[str, float]]  # step -> type -> ps (mean over cores)
    unmatched: Mapping[str, int]  # 'start'/'done' halves without a partner (all cores)
    window_source: str
    all_to_all_share: float  # all-to-all exposed / all exposed collective time
    exposed_total_ps: float
    exposed_total_fraction: float


@dataclass(frozen=True)
class OverlapResult:
    types: Mapping[str, CollectiveTypeSummary]
    communication: CommunicationSummary
    sparsecore: SparseCoreSummary


def _covered_fn(seg_s: np.ndarray, seg_e: np.ndarray, mask: np.ndarray):
    """Return f(t) = covered time of masked segments in [-inf, t) (vectorised)."""
    s = seg_s[mask]
    e = seg_e[mask]
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def f(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.int64)
        i = np.searchsorted(s, t, side="right")  # segments starting before/at t
        base = cum[np.maximum(i - 1, 0)]
        last_s = s[np.maximum(i - 1, 0)] if len(s) else np.zeros_like(t)
        last_e = e[np.maximum(i - 1, 0)] if len(e) else np.zeros_like(t)
        partial = np.clip(np.minimum(t, last_e) - last_s, 0, None)
        return np.where(i > 0, base + partial, 0)

    return f


def _type_of(collective: str | None) -> str:
    return collective if collective else "unknown"


def _windows_for_core(plane: Plane, classes: pd.DataFrame, unmatched: dict[str, int]) -> tuple[pd.DataFrame, str]:
    """Collective windows of one TensorCore: columns start, end, type, name, tf_op, engine, row."""
    md = plane.meta
    ops = plane.line(LINE_OPS)
    coll_col = classes["collective"].to_numpy() if len(classes) else np.zeros(0, object)
    role_col = classes["role"].to_numpy() if len(classes) else np.zeros(0, object)
    recs: list[tuple] = []
    source = "paired start/done ops on XLA Ops"

    # Async XLA Ops windows, when the line has collective windows.
    asy = plane.line(LINE_ASYNC)
    async_used = False
    if asy is not None and len(asy.events):
        ev = asy.events
        # Async windows overlap each other freely: every event is a window.
        for i in range(len(ev)):
            r = int(ev.meta[i])
            if r < 0:
                continue
            c = classify_op(md.name[r], md.display_name[r], md.category[r], md.tf_op[r], md.shape_with_layout[r])
            if c.bucket not in COLLECTIVE_BUCKETS:
                continue
            if c.collective is None and len(classes):
                c_coll = None
            else:
                c_coll = c.collective
            engine = "SparseCore" if (c.role or "").startswith("offload") else "TensorCore"
            recs.append((int(ev.start_ps[i]), int(ev.end_ps[i]), _type_of(c_coll), md.display_name[r] or md.name[r][:80], md.tf_op[r], engine, r))
        async_used = bool(recs)
        if async_used:
            source = "Async XLA Ops line"

    if ops is not None and len(ops.events) and len(classes):
        ev = ops.events
        rows = ev.meta
        ok = rows >= 0
        roles = np.where(ok, role_col[np.where(ok, rows, 0)], None)
        has_role = np.fromiter((isinstance(x, str) and bool(x) for x in roles), dtype=bool, count=len(roles))
        pending: dict[str, list[int]] = {}
        for i in np.flatnonzero(has_role).tolist():
            r = int(rows[i])
            role = roles[i]
            name = md.display_name[r] or md.name[r].split("=", 1)[0].strip().lstrip("%")
            if role == "sync":
                recs.append((int(ev.start_ps[i]), int(ev.end_ps[i]), _type_of(coll_col[r]), name, md.tf_op[r], "TensorCore", r))
                continue
            if async_used:
                continue
            key = async_pair_key(name)
            if key is None:
                unmatched[role] = unmatched.get(role, 0) + 1
                continue
            if role in ("start", "offload_start"):
                pending.setdefault(key[0], []).append(i)
            else:
                lst = pending.get(key[0])
                if not lst:
                    unmatched["done"] = unmatched.get("done", 0) + 1
                    continue
                j = lst.pop(0)
                rs = int(rows[j])
                coll = coll_col[rs] or coll_col[r]
                engine = "SparseCore" if role == "offload_done" else "TensorCore"
                sname = md.display_name[rs] or name
                recs.append((int(ev.start_ps[j]), int(ev.end_ps[i]), _type_of(coll), sname, md.tf_op[rs] or md.tf_op[r], engine, rs))
        left = sum(len(lst) for lst in pending.values())
        if left:
            unmatched["start"] = unmatched.get("start", 0) + left
    df = pd.DataFrame(recs, columns=["start", "end", "type", "name", "tf_op", "engine", "row"])
    return df.sort_values(["start", "end"], kind="mergesort").reset_index(drop=True), source


def analyze_overlap(trace: Trace, work, kept_steps: set[int], step_mean_ps: float) -> OverlapResult:
    """`work` is analysis.attribute_trace()'s list (plane, classes, attribution, segments)."""
    unmatched: dict[str, int] = {}
    own_time: dict[str, float] = {}  # collective type -> time its own ops occupy the TensorCore (kept steps)
    win_frames = []
    sources = set()
    per_step_rows = []
    n_core_steps = 0
    sc_busy, sc_conc_num, sc_conc_den, sc_queue = [], 0.0, 0.0, 0.0
    sc_types: set[str] = set()
    sc_planes = trace.sparsecores
    sc_active = 0
    for w in work:
        plane = w.plane
        steps = trace.steps[plane.label]
        kept = np.isin(steps.number, list(kept_steps))
        n_core_steps += int(kept.sum())
        covered = _covered_fn(w.seg_start, w.seg_end, _COMPUTE[w.seg_bucket] if len(w.seg_bucket) else np.zeros(0, bool))
        wins, src = _windows_for_core(plane, w.classes.frame, unmatched)
        sources.add(src)
        ks, ke, kn = steps.start_ps[kept], steps.end_ps[kept], steps.number[kept]
        _add_type_time(own_time, plane, w, ks, ke)
        a = w.attribution
        for k in range(len(a.step_numbers)):
            if int(a.step_numbers[k]) in kept_steps:
                per_step_rows.append(
                    {"step": int(a.step_numbers[k]), **{b: int(a.buckets[k, BUCKET_INDEX[b]]) for b in BUCKETS if b in COLLECTIVE_BUCKETS}}
                )
        if len(wins) and len(ks):
            order = np.argsort(ks)
            ks, ke, kn = ks[order], ke[order], kn[order]
            pos = np.searchsorted(ks, wins["start"].to_numpy(), side="right") - 1
            inside = (pos >= 0) & (wins["start"].to_numpy() < ke[np.clip(pos, 0, len(ke) - 1)])
            wins = wins[inside].copy()
            pos = pos[inside]
            wins["step"] = kn[pos]
            wins["step_start"] = ks[pos]
            wins["step_ps"] = (ke - ks)[pos]
            s = wins["start"].to_numpy()
            e = wins["end"].to_numpy()
            hidden = covered(e) - covered(s)
            wins["window_ps"] = e - s
            wins["hidden_ps"] = hidden
            wins["exposed_ps"] = (e - s) - hidden
            # First compute of each step: before it, a window cannot be hidden.
            cs = w.seg_start[_COMPUTE[w.seg_bucket]] if len(w.seg_bucket) else np.zeros(0, np.int64)
            j = np.searchsorted(cs, wins["step_start"].to_numpy(), side="left")
            first_compute = np.where(j < len(cs), cs[np.minimum(j, max(len(cs) - 1, 0))] if len(cs) else 0, np.iinfo(np.int64).max)
            wins["before_first_compute"] = wins["end"].to_numpy() <= first_compute
            wins["core"] = plane.label
            win_frames.append(wins)
        # SparseCores of this TensorCore.
        for sc in trace.sparsecores_of(plane):
            ln = sc.line(LINE_SC_OPS)
            if ln is None or len(ln.events) == 0:
                continue
            sc_active += 1
            ev = ln.events
            top = ev.depth == 0
            for r in np.unique(ev.meta[top]).tolist():
                if r >= 0:
                    c = classify_op(sc.meta.name[r], sc.meta.display_name[r], sc.meta.category[r], sc.meta.tf_op[r])
                    if c.collective:
                        sc_types.add(c.collective)
            s_all, e_all = ev.start_ps[top], ev.end_ps[top]
            for a_, b_ in zip(ks.tolist(), ke.tolist()):
                m = (s_all < b_) & (e_all > a_)
                ss = np.clip(s_all[m], a_, b_)
                ee = np.clip(e_all[m], a_, b_)
                busy = int((ee - ss).sum())
                sc_busy.append(busy / max(b_ - a_, 1))
                if busy:
                    sc_conc_num += float((covered(ee) - covered(ss)).sum())
                    sc_conc_den += busy
            # Queueing: offloaded work linked to its TensorCore op that starts
            # only after the SparseCore finished earlier work (back to back).
            mods = sc.line(LINE_SC_MODULES)
            if mods is not None and len(mods.events) > 1:
                ms, me = mods.events.start_ps, mods.events.end_ps
                link = mods.events.int_stat("tc_offload_start_id")
                # Time each module waited after its previous one ended while
                # its TensorCore start op had already issued it.
                starts_tc = _offload_start_times(plane, w.classes.frame, link)
                if starts_tc is not None:
                    prev_end = np.concatenate([[np.iinfo(np.int64).min], me[:-1]])
                    wait = np.where((starts_tc >= 0) & (prev_end > starts_tc), np.minimum(ms, prev_end) - starts_tc, 0)
                    in_kept = np.zeros(len(ms), bool)
                    for a_, b_ in zip(ks.tolist(), ke.tolist()):
                        in_kept |= (ms >= a_) & (ms < b_)
                    sc_queue += float(np.clip(wait[in_kept], 0, None).sum())

    n_core_steps = max(n_core_steps, 1)
    allw = pd.concat(win_frames, ignore_index=True) if win_frames else pd.DataFrame(
        columns=["start", "end", "type", "name", "tf_op", "engine", "row", "step", "step_start", "step_ps", "window_ps", "hidden_ps", "exposed_ps", "before_first_compute", "core"]
    )
    ps_df = pd.DataFrame(per_step_rows)
    denom = step_mean_ps if step_mean_ps > 0 else 1.0

    # Exposed per type from the attribution buckets (same numbers as the breakdown).
    bucket_mean = {b: (float(ps_df[b].sum()) / n_core_steps if len(ps_df) else 0.0) for b in BUCKETS if b in COLLECTIVE_BUCKETS}
    types: dict[str, CollectiveTypeSummary] = {}
    tc_types = set(allw["type"].unique().tolist()) if len(allw) else set()
    for t in TYPES:
        bucket = t if t in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all") else "other_collective"
        sub = allw[allw["type"] == t] if len(allw) else allw
        if not len(sub) and t not in sc_types and own_time.get(t, 0.0) <= 0:
            continue
        window = float(sub["window_ps"].sum()) / n_core_steps if len(sub) else 0.0
        hidden = float(sub["hidden_ps"].sum()) / n_core_steps if len(sub) else 0.0
        engines = set(sub["engine"].unique().tolist()) if len(sub) else set()
        if t in sc_types:
            engines.add("SparseCore")
        engine = engines.pop() if len(engines) == 1 else ("mixed" if engines else "TensorCore")
        exposed = own_time.get(t, 0.0) / n_core_steps
        nbytes = None
        if len(sub):
            b = np.asarray([_bytes_of(trace, c, r) for c, r in zip(sub["core"].tolist(), sub["row"].tolist())], dtype=float)
            if np.isfinite(b).any():
                nbytes = float(np.nansum(b)) / n_core_steps
        scopes: tuple[str, ...] = ()
        if len(sub):
            by_scope = sub.groupby("tf_op", sort=False)["exposed_ps"].sum().sort_values(ascending=False, kind="mergesort")
            scopes = tuple(str(x) for x in by_scope.index[:3] if str(x))
        types[t] = CollectiveTypeSummary(
            type=t,
            bucket=bucket,
            count=len(sub) / n_core_steps,
            window_ps=window,
            exposed_ps=exposed,
            hidden_ps=hidden,
            hidden_fraction=(hidden / window) if window > 0 else None,
            engine=engine,
            bytes=nbytes,
            fraction_of_step=exposed / denom,
            tf_ops=scopes,
        )

    top = ()
    if len(allw):
        cand = allw.sort_values(["exposed_ps", "core", "start"], ascending=[False, True, True], kind="mergesort").head(TOP_WINDOWS)
        top = tuple(
            WindowRecord(
                core=r.core,
                step=int(r.step),
                type=r.type,
                name=r.name,
                tf_op=r.tf_op,
                engine=r.engine,
                offset_ps=int(r.start - r.step_start),
                offset_fraction=float((r.start - r.step_start) / max(r.step_ps, 1)),
                window_ps=int(r.window_ps),
                hidden_ps=int(r.hidden_ps),
                exposed_ps=int(r.exposed_ps),
                hidden_fraction=float(r.hidden_ps / r.window_ps) if r.window_ps > 0 else 0.0,
                klass=_klass(r.hidden_ps, r.window_ps),
                before_first_compute=bool(r.before_first_compute),
            )
            for r in cand.itertuples(index=False)
            if r.exposed_ps > 0
        )
    per_step: dict[int, dict[str, float]] = {}
    if len(ps_df):
        g = ps_df.groupby("step").mean()
        for step, row in g.iterrows():
            per_step[int(step)] = {b: float(row[b]) for b in g.columns}
    exposed_total = sum(bucket_mean.values())
    a2a_share = bucket_mean.get("all_to_all", 0.0) / exposed_total if exposed_total > 0 else 0.0

    # --- SparseCore verdict -----------------------------------------------
    offload_types = set(allw.loc[allw["engine"] == "SparseCore", "type"].unique().tolist()) if len(allw) else set()
    offload_types |= {t for t in sc_types if t in OFFLOADABLE}
    present = {t for t in (tc_types | sc_types) if t in OFFLOADABLE}
    offloaded = {t: (t in offload_types) for t in sorted(present)}
    detected = sc_active > 0
    wrappers = bool(len(allw)) and bool((allw["engine"] == "SparseCore").any())
    if not present and not tc_types:
        verdict, reason = "none", "no collectives in the kept steps"
    elif wrappers and not detected:
        verdict = "not_visible"
        reason = (
            f"TensorCores hand {', '.join(sorted(offload_types & present)) or 'collectives'} to SparseCores "
            f"(call-start/call-done wrappers) but {'no SparseCore planes are' if not sc_planes else 'the SparseCore planes hold no ops'} "
            f"in this capture. {CAPTURE_HINT}"
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
    sc = SparseCoreSummary(
        detected=detected,
        planes=len(sc_planes),
        planes_with_activity=sc_active,
        offloaded=offloaded,
        sc_types=tuple(sorted(sc_types)),
        busy_fraction=float(np.mean(sc_busy)) if sc_busy else None,
        concurrency=(sc_conc_num / sc_conc_den) if sc_conc_den > 0 else None,
        queueing_ps=(sc_queue / n_core_steps) if detected else None,
        verdict=verdict,
        reason=reason,
    )
    comm = CommunicationSummary(
        top_exposed=top,
        per_step_exposed=per_step,
        unmatched=dict(sorted(unmatched.items())),
        window_source="; ".join(sorted(sources)) or "none",
        all_to_all_share=a2a_share,
        exposed_total_ps=exposed_total,
        exposed_total_fraction=exposed_total / denom,
    )
    return OverlapResult(types=types, communication=comm, sparsecore=sc)


def _add_type_time(acc: dict[str, float], plane: Plane, w, ks: np.ndarray, ke: np.ndarray) -> None:
    """Add, per collective type, the time its own ops occupy the core inside the
    given step windows (the exclusive segments: the same time the attribution
    buckets hold)."""
    ops = plane.line(LINE_OPS)
    if ops is None or not len(w.seg_event) or not len(ks):
        return
    cls = w.classes.frame
    if not len(cls):
        return
    coll_mask = np.isin(w.seg_bucket, [BUCKET_INDEX[b] for b in COLLECTIVE_BUCKETS])
    if not coll_mask.any():
        return
    ss, se = w.seg_start[coll_mask], w.seg_end[coll_mask]
    rows = ops.events.meta[w.seg_event[coll_mask]]
    coll = cls["collective"].to_numpy()
    types = np.asarray([_type_of(coll[r]) if r >= 0 else "unknown" for r in rows.tolist()], dtype=object)
    for a_, b_ in zip(ks.tolist(), ke.tolist()):
        d = np.clip(np.minimum(se, b_) - np.maximum(ss, a_), 0, None)
        if not d.any():
            continue
        for t in np.unique(types[d > 0]).tolist():
            acc[t] = acc.get(t, 0.0) + float(d[types == t].sum())


def _klass(hidden: float, window: float) -> str:
    if window <= 0:
        return "exposed"
    f = hidden / window
    return "hidden" if f >= HIDDEN_MIN else ("exposed" if f <= EXPOSED_MAX else "partial")


_BYTES_CACHE: dict = {}


def _bytes_of(trace: Trace, core: str, row: int) -> float:
    for p in trace.tensorcores:
        if p.label == core:
            v = p.meta.bytes_accessed[row] if 0 <= row < len(p.meta) else np.nan
            return float(v)
    return float("nan")


def _offload_start_times(plane: Plane, classes: pd.DataFrame, link: np.ndarray) -> np.ndarray | None:
    """Start time of the TensorCore offload_start op each SparseCore module links to.

    `tc_offload_start_id` is matched against the TensorCore op's
    `all_reduce_unique_id` event stat, else its metadata id. -1 when unknown.
    """
    ops = plane.line(LINE_OPS)
    if ops is None or not len(classes) or np.all(link < 0):
        return None
    ev = ops.events
    rows = ev.meta
    roles = classes["role"].to_numpy()
    is_start = np.zeros(len(ev), bool)
    ok = rows >= 0
    is_start[ok] = roles[rows[ok]] == "offload_start"
    if not is_start.any():
        return None
    uid = ev.int_stat("all_reduce_unique_id")
    ids = np.where(uid >= 0, uid, plane.meta.ids[np.where(ok, rows, 0)])
    lookup: dict[int, list[int]] = {}
    for i in np.flatnonzero(is_start).tolist():
        lookup.setdefault(int(ids[i]), []).append(int(ev.start_ps[i]))
    out = np.full(len(link), -1, dtype=np.int64)
    used: dict[int, int] = {}
    for k, l in enumerate(link.tolist()):
        lst = lookup.get(int(l))
        if lst:
            n = used.get(l, 0)
            if n < len(lst):
                out[k] = lst[n]
                used[l] = n + 1
    return out
