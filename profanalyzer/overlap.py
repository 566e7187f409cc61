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
from profanalyzer.frames import frame as objframe
from profanalyzer.classify import BUCKETS, COLLECTIVE_BUCKETS, async_pair_key, classify_op
from profanalyzer.trace import instruction_name, LINE_ASYNC, LINE_OPS, LINE_SC_MODULES, LINE_SC_OPS, Plane, Trace

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


def _type_of(collective: str | None) -> str:
    return collective if collective else "unknown"


ROLE_CODES = {"start": 1, "done": 2, "sync": 3, "offload_start": 4, "offload_done": 5}


def _role_codes(classes: pd.DataFrame) -> np.ndarray:
    if not len(classes):
        return np.zeros(0, dtype=np.int8)
    return np.asarray([ROLE_CODES.get(r, 0) if isinstance(r, str) else 0 for r in classes["role"].tolist()], dtype=np.int8)


def _windows_for_core(plane: Plane, classes: pd.DataFrame, unmatched: dict[str, int]) -> tuple[pd.DataFrame, str]:
    """Collective windows of one TensorCore: columns start, end, type, name, tf_op, engine, row."""
    md = plane.meta
    ops = plane.line(LINE_OPS)
    names = np.asarray([d or instruction_name(n)[:80] for d, n in zip(md.display_name, md.name)], dtype=object)
    tf_ops = np.asarray(md.tf_op, dtype=object)
    coll_col = classes["collective"].to_numpy() if len(classes) else np.zeros(0, object)
    types_by_row = np.asarray([_type_of(c if isinstance(c, str) else None) for c in coll_col], dtype=object)
    role_by_row = _role_codes(classes)
    frames: list[pd.DataFrame] = []
    source = "paired start/done ops on XLA Ops"

    def frame(start, end, rows, types, engine):
        n = len(rows)
        eng = np.full(n, engine, dtype=object) if isinstance(engine, str) else np.asarray(engine, dtype=object)
        return objframe(
            {"start": start, "end": end, "type": np.asarray(types, dtype=object), "name": names[rows], "tf_op": tf_ops[rows], "engine": eng, "row": rows}
        )

    # Async XLA Ops windows, when the line has collective windows: every event
    # is a window (windows overlap each other freely). Each distinct op is
    # classified once.
    asy = plane.line(LINE_ASYNC)
    async_used = False
    if asy is not None and len(asy.events):
        ev = asy.events
        rows = ev.meta
        uniq = np.unique(rows[rows >= 0])
        is_coll = np.zeros(len(md), dtype=bool)
        typ = np.full(len(md), "unknown", dtype=object)
        sc = np.zeros(len(md), dtype=bool)
        for r in uniq.tolist():
            c = classify_op(md.name[r], md.display_name[r], md.category[r], md.tf_op[r], md.shape_with_layout[r])
            if c.bucket in COLLECTIVE_BUCKETS:
                is_coll[r] = True
                typ[r] = _type_of(c.collective)
                sc[r] = (c.role or "").startswith("offload")
        m = (rows >= 0) & is_coll[np.maximum(rows, 0)]
        if m.any():
            r = rows[m].astype(np.int64)
            frames.append(frame(ev.start_ps[m], ev.end_ps[m], r, typ[r], np.where(sc[r], "SparseCore", "TensorCore")))
            async_used = True
            source = "Async XLA Ops line"

    if ops is not None and len(ops.events) and len(classes):
        ev = ops.events
        rows = ev.meta.astype(np.int64)
        role = np.where(rows >= 0, role_by_row[np.maximum(rows, 0)], 0)
        sync = np.flatnonzero(role == ROLE_CODES["sync"])
        if len(sync):
            r = rows[sync]
            frames.append(frame(ev.start_ps[sync], ev.end_ps[sync], r, types_by_row[r], "TensorCore"))
        if not async_used:
            frames.append(_pair_windows(ev, rows, role, names, tf_ops, coll_col, unmatched, frame))
    if not frames:
        df = pd.DataFrame(columns=["start", "end", "type", "name", "tf_op", "engine", "row"])
    else:
        df = pd.concat(frames, ignore_index=True)
    return df.sort_values(["start", "end"], kind="mergesort").reset_index(drop=True), source


def _pair_windows(ev, rows, role, names, tf_ops, coll_col, unmatched, frame) -> pd.DataFrame:
    """Pair start/done halves on XLA Ops (same pair key, first in first out)."""
    pending: dict[str, list[int]] = {}
    st, en, rs_, ty, eng = [], [], [], [], []
    halves = np.flatnonzero((role == 1) | (role == 2) | (role == 4) | (role == 5))
    key_cache: dict[int, tuple[str, str] | None] = {}
    for i in halves.tolist():
        r = int(rows[i])
        if r not in key_cache:
            key_cache[r] = async_pair_key(names[r])
        key = key_cache[r]
        is_start = role[i] in (1, 4)
        if key is None:
            k = "start" if is_start else "done"
            unmatched[k] = unmatched.get(k, 0) + 1
            continue
        if is_start:
            pending.setdefault(key[0], []).append(i)
            continue
        lst = pending.get(key[0])
        if not lst:
            unmatched["done"] = unmatched.get("done", 0) + 1
            continue
        j = lst.pop(0)
        rs = int(rows[j])
        c = coll_col[rs] if isinstance(coll_col[rs], str) else (coll_col[r] if isinstance(coll_col[r], str) else None)
        st.append(int(ev.start_ps[j]))
        en.append(int(ev.end_ps[i]))
        rs_.append(rs)
        ty.append(_type_of(c))
        eng.append("SparseCore" if role[i] == 5 else "TensorCore")
    left = sum(len(lst) for lst in pending.values())
    if left:
        unmatched["start"] = unmatched.get("start", 0) + left
    r = np.asarray(rs_, dtype=np.int64)
    return frame(np.asarray(st, dtype=np.int64), np.asarray(en, dtype=np.int64), r, np.asarray(ty, dtype=object), np.asarray(eng, dtype=object))


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
        covered = w.compute
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
            # Before the step's first compute, a window cannot be hidden: the
            # core has computed nothing since the step began.
            ss_ = wins["step_start"].to_numpy()
            wins["before_first_compute"] = (covered(wins["end"].to_numpy()) - covered(ss_)) == 0
            wins["core"] = plane.label
            ba = plane.meta.bytes_accessed
            r = wins["row"].to_numpy()
            wins["bytes"] = np.where((r >= 0) & (r < len(ba)), ba[np.clip(r, 0, max(len(ba) - 1, 0))], np.nan) if len(ba) else np.nan
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
        columns=["start", "end", "type", "name", "tf_op", "engine", "row", "step", "step_start", "step_ps", "window_ps", "hidden_ps", "exposed_ps", "before_first_compute", "core", "bytes"]
    )
    ps_df = pd.DataFrame(per_step_rows)
    denom = step_mean_ps if step_mean_ps > 0 else 1.0

    # Exposed per type from the attribution buckets (same numbers as the breakdown).
    bucket_mean = {b: (float(ps_df[b].sum()) / n_core_steps if len(ps_df) else 0.0) for b in BUCKETS if b in COLLECTIVE_BUCKETS}
    types: dict[str, CollectiveTypeSummary] = {}
    # Group windows by type once (codes), not by comparing strings per type.
    if len(allw):
        tcode, tnames = pd.factorize(allw["type"], sort=True)
        tnames = [str(x) for x in tnames]
    else:
        tcode, tnames = np.zeros(0, dtype=np.int64), []
    tc_types = set(tnames)
    win_ps = allw["window_ps"].to_numpy(dtype=np.int64) if len(allw) else np.zeros(0, np.int64)
    hid_ps = allw["hidden_ps"].to_numpy(dtype=np.int64) if len(allw) else np.zeros(0, np.int64)
    exp_ps = allw["exposed_ps"].to_numpy(dtype=np.int64) if len(allw) else np.zeros(0, np.int64)
    for t in TYPES:
        bucket = t if t in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all") else "other_collective"
        idx = np.flatnonzero(tcode == tnames.index(t)) if t in tnames else np.zeros(0, dtype=np.int64)
        if not len(idx) and t not in sc_types and own_time.get(t, 0.0) <= 0:
            continue
        sub = allw.iloc[idx] if len(idx) else None
        window = float(win_ps[idx].sum()) / n_core_steps
        hidden = float(hid_ps[idx].sum()) / n_core_steps
        engines = set(sub["engine"].unique().tolist()) if sub is not None else set()
        if t in sc_types:
            engines.add("SparseCore")
        engine = engines.pop() if len(engines) == 1 else ("mixed" if engines else "TensorCore")
        exposed = own_time.get(t, 0.0) / n_core_steps
        nbytes = None
        if sub is not None and sub["bytes"].notna().any():
            nbytes = float(sub["bytes"].sum()) / n_core_steps
        scopes: tuple[str, ...] = ()
        if sub is not None:
            scode, snames = pd.factorize(sub["tf_op"])
            per_scope = np.bincount(scode[scode >= 0], weights=exp_ps[idx][scode >= 0], minlength=len(snames))
            order = np.lexsort((np.arange(len(snames)), -per_scope))
            scopes = tuple(str(snames[i]) for i in order[:3] if str(snames[i]))
        types[t] = CollectiveTypeSummary(
            type=t,
            bucket=bucket,
            count=len(idx) / n_core_steps,
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
        # The most exposed windows: a partial selection, then a stable sort of
        # the candidates (ties by core, then start).
        k = min(len(allw), TOP_WINDOWS * 4)
        part = np.argpartition(-exp_ps, k - 1)[:k] if k < len(allw) else np.arange(len(allw))
        cand = allw.iloc[part].sort_values(["exposed_ps", "core", "start"], ascending=[False, True, True], kind="mergesort").head(TOP_WINDOWS)
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
    given step windows (the same exclusive time the attribution buckets hold)."""
    ops = plane.line(LINE_OPS)
    cls = w.classes.frame
    if ops is None or not len(ops.events) or not len(ks) or not len(cls):
        return
    names = ("none",) + TYPES
    code = {t: i for i, t in enumerate(names)}
    coll = cls["collective"].to_numpy()
    role = cls["role"].to_numpy()
    row_label = np.asarray(
        [code[_type_of(c)] if isinstance(r, str) and r else 0 for c, r in zip(coll, role)], dtype=np.int64
    )
    rows = ops.events.meta
    labels = np.where(rows >= 0, row_label[np.maximum(rows, 0)], 0)
    tot = w.ops.exclusive(labels, len(names), ks, ke).sum(axis=0)
    for i, t in enumerate(names[1:], 1):
        if tot[i]:
            acc[t] = acc.get(t, 0.0) + float(tot[i])


def _klass(hidden: float, window: float) -> str:
    if window <= 0:
        return "exposed"
    f = hidden / window
    return "hidden" if f >= HIDDEN_MIN else ("exposed" if f <= EXPOSED_MAX else "partial")


def _offload_start_times(plane: Plane, classes: pd.DataFrame, link: np.ndarray) -> np.ndarray | None:
    """Start time of the TensorCore offload_start op each SparseCore module links to.

    `tc_offload_start_id` is matched against the TensorCore op's
    `all_reduce_unique_id` event stat, else its metadata id; the k-th module
    with an id links to the k-th start with that id. -1 when unknown.
    """
    ops = plane.line(LINE_OPS)
    if ops is None or not len(classes) or np.all(link < 0):
        return None
    ev = ops.events
    rows = ev.meta.astype(np.int64)
    role = np.where(rows >= 0, _role_codes(classes)[np.maximum(rows, 0)], 0)
    is_start = role == ROLE_CODES["offload_start"]
    if not is_start.any():
        return None
    uid = ev.int_stat("all_reduce_unique_id")
    ids = np.where(uid >= 0, uid, plane.meta.ids[np.maximum(rows, 0)])[is_start]
    times = ev.start_ps[is_start]
    order = np.lexsort((times, ids))
    ids, times = ids[order], times[order]
    keys, first, counts = np.unique(ids, return_index=True, return_counts=True)
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
