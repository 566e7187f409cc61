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

SparseCore offload (the SparseCore planes' activity and the verdict) is
`profanalyzer.analyze.sparsecore`; this module hands it the windows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from profanalyzer.analyze.attributed import TableMemo
from profanalyzer.analyze.attribution import (
    BUCKET_INDEX,
    CoreWork,
    PlaneClasses,
    locate,
)
from profanalyzer.analyze.critical import critical_path
from profanalyzer.analyze.sparsecore import (
    SparseCoreTotals,
    add_sparsecores,
    sparsecore_summary,
)
from profanalyzer.classify import ROLE_CODES, async_pair_key
from profanalyzer.core.arrays import unique_ids
from profanalyzer.core.parallel import map_ordered
from profanalyzer.core.vocab import (
    BUCKETS,
    COLLECTIVE_BUCKETS,
    COLLECTIVE_KIND_BUCKET,
    COLLECTIVE_TYPES,
    PREDICTED_INPUT_KINDS,
)
from profanalyzer.model.analysis import (
    CollectiveTypeSummary,
    CommunicationSummary,
    SparseCoreSummary,
    WindowRecord,
)
from profanalyzer.model.trace import (
    LINE_ASYNC,
    LINE_OPS,
    OpMetadata,
    Plane,
    Trace,
    instruction_name,
)
from profanalyzer.read.hlo.traffic import Traffic, name_free, traffic_of_text

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

#: Window classes by hidden fraction.
HIDDEN_MIN = 0.9  # >= : hidden
EXPOSED_MAX = 0.1  # <= : exposed; between: partial
TYPES = COLLECTIVE_TYPES
TOP_WINDOWS = 15




@dataclass(frozen=True, eq=False)
class OverlapResult:
    types: Mapping[str, CollectiveTypeSummary]
    communication: CommunicationSummary
    sparsecore: SparseCoreSummary
    windows: tuple[Windows, ...] = ()  # every collective window of each core of `work` (all steps), in work order


def _type_of(collective: str | None) -> str:
    return collective if collective else "unknown"


@dataclass(frozen=True, eq=False)
class Windows:
    """Collective windows of one TensorCore (analysis-internal columns)."""

    start: np.ndarray  # int64 ps
    end: np.ndarray  # int64 ps
    type: np.ndarray  # int8 index into TYPES
    on_sc: np.ndarray  # bool: handed to a SparseCore (engine), else TensorCore
    row: np.ndarray  # int64 metadata row of the (start) op

    def __len__(self) -> int:
        return len(self.start)

    def take(self, idx) -> Windows:
        return Windows(*(getattr(self, f)[idx] for f in _WINDOW_FIELDS))

    def type_names(self) -> list[str]:
        return [TYPES[t] for t in self.type.tolist()]

    def engines(self) -> list[str]:
        return ["SparseCore" if x else "TensorCore" for x in self.on_sc.tolist()]

    @staticmethod
    def concat(parts: list[Windows]) -> Windows:
        if not parts:
            z = np.zeros(0, dtype=np.int64)
            return Windows(z, z, np.zeros(0, dtype=np.int8), np.zeros(0, dtype=bool), z)
        return Windows(*(np.concatenate([getattr(p, f) for p in parts]) for f in _WINDOW_FIELDS))


_WINDOW_FIELDS = ("start", "end", "type", "on_sc", "row")
_TYPE_CODE = {t: i for i, t in enumerate(TYPES)}


def _type_code(collective: str | None) -> int:
    return _TYPE_CODE.get(_type_of(collective), _TYPE_CODE["unknown"])


def window_name(md, row: int) -> str:
    """A window's op name: its display name, else the HLO instruction name."""
    return md.display_name[row] or instruction_name(md.name[row])[:80]


class _AsyncRows:
    """Per metadata row, filled as rows are met: classified yet, is a
    collective, its type code and whether it is offloaded."""

    def __init__(self, n: int) -> None:
        self.done = np.zeros(n, dtype=bool)
        self.is_coll = np.zeros(n, dtype=bool)
        self.typ = np.zeros(n, dtype=np.int8)
        self.sc = np.zeros(n, dtype=bool)


def windows_for_core(plane: Plane, classes: PlaneClasses, unmatched: dict[str, int],
                     memo: TableMemo | None = None) -> tuple[Windows, str]:
    """Collective windows of one TensorCore, sorted by (start, end), and where
    they came from; start/done halves left unpaired are counted in `unmatched`.
    `memo`: the trace's TableMemo (the cores sharing a table classify once)."""
    md = plane.meta
    ops = plane.line(LINE_OPS)
    coll_col = classes.columns["collective"] if len(classes) else np.zeros(0, object)
    role_by_row = classes.role
    parts: list[Windows] = []
    source = "paired start/done ops on XLA Ops"

    def windows(start, end, rows, types, on_sc) -> Windows:
        n = len(rows)
        return Windows(np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64), np.asarray(types, dtype=np.int8),
                       np.broadcast_to(np.asarray(on_sc, dtype=bool), (n,)).copy(), np.asarray(rows, dtype=np.int64))

    # Async XLA Ops windows, when the line has collective windows: every event
    # is a window (windows overlap each other freely). Each distinct op is
    # classified once.
    asy = plane.line(LINE_ASYNC)
    async_used = False
    if asy is not None and len(asy.events):
        ev = asy.events
        rows = ev.meta
        uniq = unique_ids(rows[rows >= 0])
        # (is a collective, type, offloaded) of the rows classified so far,
        # shared by the cores sharing the table when `memo` is given
        known = _AsyncRows(len(md)) if memo is None else memo.get(
            "overlap.async_rows", plane, classes, lambda: _AsyncRows(len(md)))
        is_coll, typ, sc = known.is_coll, known.typ, known.sc
        for r in uniq[~known.done[uniq]].tolist():
            c = classes.op_class(plane, r)
            is_coll[r] = c.bucket in COLLECTIVE_BUCKETS
            typ[r] = _type_code(c.collective) if is_coll[r] else 0
            sc[r] = is_coll[r] and (c.role or "").startswith("offload")
            known.done[r] = True
        m = (rows >= 0) & is_coll[np.maximum(rows, 0)] if len(md) else np.zeros(len(rows), dtype=bool)
        if m.any():
            r = rows[m].astype(np.int64)
            parts.append(windows(ev.start_ps[m], ev.end_ps[m], r, typ[r], sc[r]))
            async_used = True
            source = "Async XLA Ops line"

    if ops is not None and len(ops.events) and len(classes):
        ev = ops.events
        rows = ev.meta.astype(np.int64)
        role = np.where(rows >= 0, role_by_row[np.maximum(rows, 0)], 0)
        sync = np.flatnonzero(role == ROLE_CODES["sync"])
        if len(sync):
            r = rows[sync]
            # the type of each distinct synchronous op's row only
            ur, inv = unique_ids(r, return_inverse=True)
            types_of = np.asarray([_type_code(c if isinstance(c, str) else None) for c in coll_col[ur].tolist()], dtype=np.int8)
            parts.append(windows(ev.start_ps[sync], ev.end_ps[sync], r, types_of[inv.reshape(-1)], False))
        if not async_used:
            parts.append(_pair_windows(md, ev, rows, role, coll_col, unmatched, windows))
    wins = Windows.concat(parts)
    return wins.take(np.lexsort((wins.end, wins.start))), source


def _pair_windows(md, ev, rows, role, coll_col, unmatched, windows) -> Windows:
    """Pair start/done halves on XLA Ops (same pair key, first in first out)."""
    pending: dict[str, deque[int]] = {}
    st, en, rs_, ty, eng = [], [], [], [], []
    halves = np.flatnonzero((role == 1) | (role == 2) | (role == 4) | (role == 5))
    key_cache: dict[int, tuple[str, str] | None] = {}
    for i, r, ro in zip(halves.tolist(), rows[halves].tolist(), role[halves].tolist(), strict=True):
        if r not in key_cache:
            key_cache[r] = async_pair_key(window_name(md, r))
        key = key_cache[r]
        is_start = ro in (1, 4)
        if key is None:
            k = "start" if is_start else "done"
            unmatched[k] = unmatched.get(k, 0) + 1
            continue
        if is_start:
            pending.setdefault(key[0], deque()).append(i)
            continue
        lst = pending.get(key[0])
        if not lst:
            unmatched["done"] = unmatched.get("done", 0) + 1
            continue
        j = lst.popleft()
        rs = int(rows[j])
        c = coll_col[rs] if isinstance(coll_col[rs], str) else (coll_col[r] if isinstance(coll_col[r], str) else None)
        st.append(j)
        en.append(i)
        rs_.append(rs)
        ty.append(_type_code(c))
        eng.append(ro == 5)
    left = sum(len(lst) for lst in pending.values())
    if left:
        unmatched["start"] = unmatched.get("start", 0) + left
    st_i, en_i = np.asarray(st, dtype=np.int64), np.asarray(en, dtype=np.int64)
    return windows(ev.start_ps[st_i], ev.end_ps[en_i], np.asarray(rs_, dtype=np.int64), ty, np.asarray(eng, dtype=bool))


def _from_other_half(md: OpMetadata, row: int, kind: str, cache: dict) -> Traffic | None:
    """A start whose text carries no data (a SparseCore collective's `async-start()`, its operands given to the
    update): the traffic of its update or done, found by instruction name."""
    name = md.short_name(row)
    if "-start" not in name:
        return None
    by_name = cache.get("names")
    if by_name is None:
        by_name = cache["names"] = {n: i for i, n in enumerate(md.short_names)}
    for half in ("-done", "-update"):
        r = by_name.get(name.replace("-start", half))
        got = _traffic(kind, md.name[r], cache) if r is not None else None
        if got is not None:
            return got
    return None


def _traffic(kind: str, text: str, cache: dict) -> Traffic | None:
    """`traffic_of_text`, once per text with its names erased (`name_free`) in the table's cache."""
    by_text = cache.setdefault("texts", {})
    key = (kind, name_free(text))
    if key not in by_text:
        by_text[key] = traffic_of_text(kind, text)
    return by_text[key]


def traffic_cache(memo: TableMemo, w: CoreWork) -> dict:
    """The per-table cache of `window_traffic` (tables with equal op texts share one)."""
    return memo.get("overlap.traffic", w.plane, w.classes, dict)


def window_traffic(md: OpMetadata, rows: np.ndarray, types: np.ndarray,
                   cache: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per window: the bytes its collective moves per device over the links,
    its buffer's bytes (profanalyzer.read.hlo.traffic, from the op's HLO text), its
    group (0: unknown) and the TYPES index of the algorithm its op runs (-1:
    unknown; a windowed einsum's permute moves as a permute, whatever its
    bucket); NaN bytes where the text has no shapes. Each (row, type) of a
    table is read once (`cache`: traffic_cache)."""
    n = len(rows)
    moved, buf, group = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=np.int64)
    if not n or not len(md):
        return moved, buf, group, np.full(n, -1, dtype=np.int64)
    known = cache.setdefault("rows", {})  # (row, type) key -> (moved, buffer, group, TYPES index), or None
    ok = (rows >= 0) & (rows < len(md))
    key = np.where(ok, rows.astype(np.int64) * len(TYPES) + types.astype(np.int64), -1)
    uniq, inv = np.unique(key, return_inverse=True)
    keys = uniq.tolist()
    for k in keys:
        if k >= 0 and k not in known:
            row, kind = k // len(TYPES), TYPES[k % len(TYPES)]
            t = _traffic(kind, md.name[row], cache) or _from_other_half(md, row, kind, cache)
            known[k] = None if t is None else (t.moved_bytes, t.buffer_bytes, t.group or 0,
                                               TYPES.index(t.kind) if t.kind in TYPES else -1)
    unknown = (np.nan,) * 4
    got = np.array([unknown if k < 0 else known[k] or unknown for k in keys], dtype=float).reshape(len(keys), 4)
    inv = inv.reshape(-1)
    moved, buf = got[inv, 0], got[inv, 1]
    group = np.nan_to_num(got[inv, 2]).astype(np.int64)
    return moved, buf, group, np.nan_to_num(got[inv, 3], nan=-1).astype(np.int64)


def _core_overlap(trace: Trace, kept_list: np.ndarray, memo: TableMemo, item: tuple[int, CoreWork]) -> _CoreOverlap:
    """One core's part of `analyze_overlap`, with no shared state written: it
    runs on a thread (`parallel`); the merge adds the parts in core order."""
    ci, w = item
    plane = w.plane
    steps = trace.steps[plane.label]
    kept = np.isin(steps.number, kept_list)
    covered = w.compute
    own_unmatched: dict[str, int] = {}
    wins, src = windows_for_core(plane, w.classes, own_unmatched, memo)
    ks, ke, kn = steps.start_ps[kept], steps.end_ps[kept], steps.number[kept]
    type_time: dict[str, float] = {}
    _add_type_time(type_time, plane, w, ks, ke, memo)
    order = np.argsort(ks)
    ks, ke, kn = ks[order], ke[order], kn[order]
    core_cols: dict[str, np.ndarray] = {}
    scope_rows = np.zeros(0, dtype=np.int64)
    scope_inv = np.zeros(0, dtype=np.int64)
    if len(wins) and len(ks):
        pos, inside = locate(ks, ke, wins.start)
        wins_k = wins.take(inside)
        pos = pos[inside]
        s, e = wins_k.start, wins_k.end
        hidden = covered(e) - covered(s)
        r = wins_k.row
        nbytes, _buf, _group, _kind = window_traffic(plane.meta, r, wins_k.type, traffic_cache(memo, w))
        scope_rows, scope_inv = unique_ids(r, return_inverse=True)
        for k, v in (
            ("start", s), ("end", e), ("type", wins_k.type), ("on_sc", wins_k.on_sc), ("row", r),
        ("scope", np.zeros(0, dtype=np.int64)),  # filled at the merge
            ("step", kn[pos]), ("step_start", ks[pos]), ("step_ps", (ke - ks)[pos]),
            ("window_ps", e - s), ("hidden_ps", hidden), ("exposed_ps", (e - s) - hidden),
            # Before the step's first compute, a window cannot be hidden: the
            # core has computed nothing since the step began.
            ("before_first_compute", (covered(e) - covered(ks[pos])) == 0),
            ("core", np.full(len(s), ci, dtype=np.int64)), ("bytes", nbytes),
            ("critical", critical_path(plane, wins_k, hidden, memo)),
        ):
            core_cols[k] = v
    sc = SparseCoreTotals(record=True)
    add_sparsecores(trace, w, ks, ke, sc)
    return _CoreOverlap(int(kept.sum()), wins, src, own_unmatched, type_time, core_cols, scope_rows,
                        scope_inv.reshape(-1), sc)


def analyze_overlap(att: Attributed) -> OverlapResult:
    """Collective windows, their hidden and exposed time, and the SparseCore
    offload verdict over the kept steps of every core of `work`."""
    trace, work, kept_steps, step_mean_ps = att.trace, att.work, att.kept_steps, att.step_mean
    unmatched: dict[str, int] = {}
    all_windows: list[Windows] = []
    own_time: dict[str, float] = {}  # collective type -> time its own ops occupy the TensorCore (kept steps)
    cols: dict[str, list[np.ndarray]] = {}  # kept windows of every core, column by column
    sources = set()
    coll_buckets = [b for b in BUCKETS if b in COLLECTIVE_BUCKETS]
    coll_idx = [BUCKET_INDEX[b] for b in coll_buckets]
    per_step_sum: dict[int, np.ndarray] = {}  # step -> collective bucket totals over cores
    per_step_n: dict[int, int] = {}
    n_core_steps = 0
    sc = SparseCoreTotals()
    kept_list = np.asarray(sorted(kept_steps), dtype=np.int64)
    scope_ids: dict[str, int] = {}
    memo = att.memo

    per_core = partial(_core_overlap, trace, kept_list, memo)
    for w, part in zip(work, map_ordered(per_core, list(enumerate(work))), strict=True):  # one part per core
        plane = w.plane
        n_core_steps += part.n_kept
        all_windows.append(part.windows)
        sources.add(part.source)
        for half, cnt in part.unmatched.items():
            unmatched[half] = unmatched.get(half, 0) + cnt
        for t, ps in part.type_time.items():
            own_time[t] = own_time.get(t, 0.0) + ps
        a = w.attribution
        for j in np.flatnonzero(np.isin(a.step_numbers, kept_list)).tolist():
            step_n = int(a.step_numbers[j])
            in_step = a.buckets[j, coll_idx]
            per_step_sum[step_n] = per_step_sum[step_n] + in_step if step_n in per_step_sum else in_step.copy()
            per_step_n[step_n] = per_step_n.get(step_n, 0) + 1
        if part.cols:
            # Framework scope of each window as a global id (first seen first).
            sid = np.asarray([scope_ids.setdefault(plane.meta.tf_op[u], len(scope_ids)) for u in part.scope_rows.tolist()],
                             dtype=np.int64)
            for name, col in part.cols.items():
                cols.setdefault(name, []).append(sid[part.scope_inv] if name == "scope" else col)
        sc.replay(part.sparsecore)

    n_core_steps = max(n_core_steps, 1)
    allw = {k: np.concatenate(v) for k, v in cols.items()}
    n_win = len(allw["start"]) if allw else 0
    denom = step_mean_ps if step_mean_ps > 0 else 1.0

    # Exposed per type from the attribution buckets (same numbers as the breakdown).
    total = np.asarray(sum(per_step_sum.values())) if per_step_sum else np.zeros(len(coll_buckets), dtype=np.int64)
    bucket_mean = {b: float(total[i]) / n_core_steps for i, b in enumerate(coll_buckets)} if per_step_sum else {b: 0.0 for b in coll_buckets}
    w_type = allw["type"] if n_win else np.zeros(0, dtype=np.int8)
    tc_types = {TYPES[t] for t in set(w_type.tolist())}
    types = _type_summaries(allw, n_win, own_time, sc.types, list(scope_ids), n_core_steps, denom)
    # a replayed program's TensorCores run one schedule: list one replica's windows, not each twice
    top = _top_windows(allw, n_win, work, one_core=trace.input_kind in PREDICTED_INPUT_KINDS)
    per_step = {
        n: {b: float(per_step_sum[n][i]) / per_step_n[n] for i, b in enumerate(coll_buckets)} for n in sorted(per_step_sum)
    }
    exposed_total = sum(bucket_mean.values())
    a2a_share = bucket_mean.get("all_to_all", 0.0) / exposed_total if exposed_total > 0 else 0.0

    sparsecore = sparsecore_summary(trace, sc, allw["on_sc"] if n_win else np.zeros(0, dtype=bool), w_type, tc_types, n_core_steps)
    comm = CommunicationSummary(
        top_exposed=top,
        per_step_exposed=per_step,
        unmatched=dict(sorted(unmatched.items())),
        window_source="; ".join(sorted(sources)) or "none",
        all_to_all_share=a2a_share,
        exposed_total_ps=exposed_total,
        exposed_total_fraction=exposed_total / denom,
    )
    return OverlapResult(types=types, communication=comm, sparsecore=sparsecore, windows=tuple(all_windows))


def _type_summaries(allw: Mapping[str, np.ndarray], n_win: int, own_time: Mapping[str, float], sc_types: set[str],
                    scope_names: list[str], n_core_steps: int, denom: float) -> dict[str, CollectiveTypeSummary]:
    """Per collective type: windows, hidden and exposed time (exposed: the
    time its own ops occupy the core, the attribution's number), engine,
    bytes, and the framework scopes of its most exposed windows."""
    types: dict[str, CollectiveTypeSummary] = {}
    w_type = allw["type"] if n_win else np.zeros(0, dtype=np.int8)
    win_ps = allw["window_ps"] if n_win else np.zeros(0, np.int64)
    hid_ps = allw["hidden_ps"] if n_win else np.zeros(0, np.int64)
    exp_ps = allw["exposed_ps"] if n_win else np.zeros(0, np.int64)
    for ti, t in enumerate(TYPES):
        bucket = COLLECTIVE_KIND_BUCKET.get(t, "other_collective")
        idx = np.flatnonzero(w_type == ti)
        if not len(idx) and t not in sc_types and own_time.get(t, 0.0) <= 0:
            continue
        window = float(win_ps[idx].sum()) / n_core_steps
        hidden = float(hid_ps[idx].sum()) / n_core_steps
        engines = {"SparseCore" if x else "TensorCore" for x in set(allw["on_sc"][idx].tolist())}
        if t in sc_types:
            engines.add("SparseCore")
        engine = engines.pop() if len(engines) == 1 else ("mixed" if engines else "TensorCore")
        exposed = own_time.get(t, 0.0) / n_core_steps
        nbytes = None
        scopes: tuple[str, ...] = ()
        if len(idx):
            b_ = allw["bytes"][idx]
            if (~np.isnan(b_)).any():
                nbytes = float(np.nansum(b_)) / n_core_steps
            # Scopes by exposed time, ties in order of first appearance.
            sc_ = allw["scope"][idx]
            per_scope = np.bincount(sc_, weights=exp_ps[idx], minlength=len(scope_names))
            first = np.full(len(scope_names), len(idx), dtype=np.int64)
            np.minimum.at(first, sc_, np.arange(len(idx)))
            present_ = np.flatnonzero(first < len(idx))
            ranked = present_[np.lexsort((first[present_], -per_scope[present_]))]
            scopes = tuple(scope_names[i] for i in ranked[:3].tolist() if scope_names[i])
        crit = float(exp_ps[idx][allw["critical"][idx]].sum()) / n_core_steps if len(idx) else 0.0
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
            critical_path_ps=crit,
        )
    return types


def _top_windows(allw: Mapping[str, np.ndarray], n_win: int, work: Sequence[CoreWork],
                 one_core: bool = False) -> tuple[WindowRecord, ...]:
    """The most exposed windows of every core (up to TOP_WINDOWS); `one_core`: of the first core only."""
    top: tuple[WindowRecord, ...] = ()
    exp_ps = allw["exposed_ps"] if n_win else np.zeros(0, np.int64)
    if one_core and n_win:
        exp_ps = np.where(allw["core"] == 0, exp_ps, 0)
    if n_win:
        # The most exposed windows: a partial selection, then a stable sort of
        # the candidates (ties by core, then start).
        k = min(n_win, TOP_WINDOWS * 4)
        part = np.argpartition(-exp_ps, k - 1)[:k] if k < n_win else np.arange(n_win)
        label = [w.plane.label for w in work]
        cand = sorted(part.tolist(), key=lambda i: (-int(exp_ps[i]), label[allw["core"][i]], int(allw["start"][i])))[:TOP_WINDOWS]
        top = tuple(_window_record({c: v[i] for c, v in allw.items()}, work[allw["core"][i]].plane) for i in cand if exp_ps[i] > 0)
    return top


@dataclass(frozen=True, eq=False)
class _CoreOverlap:
    """One TensorCore's part of the overlap analysis (merged in core order)."""

    n_kept: int
    windows: Windows
    source: str
    unmatched: dict[str, int]
    type_time: dict[str, float]
    cols: dict[str, np.ndarray]  # the kept windows' columns ("scope" filled at the merge)
    scope_rows: np.ndarray  # distinct metadata rows of the kept windows
    scope_inv: np.ndarray  # window -> index into scope_rows
    sparsecore: SparseCoreTotals


def _window_record(r: Mapping[str, Any], plane: Plane) -> WindowRecord:
    start, step_start, step_ps = int(r["start"]), int(r["step_start"]), int(r["step_ps"])
    window, hidden = int(r["window_ps"]), int(r["hidden_ps"])
    row = int(r["row"])
    return WindowRecord(
        core=plane.label,
        step=int(r["step"]),
        type=TYPES[int(r["type"])],
        name=window_name(plane.meta, row),
        tf_op=plane.meta.tf_op[row],
        engine="SparseCore" if r["on_sc"] else "TensorCore",
        offset_ps=start - step_start,
        offset_fraction=float((start - step_start) / max(step_ps, 1)),
        window_ps=window,
        hidden_ps=hidden,
        exposed_ps=int(r["exposed_ps"]),
        hidden_fraction=float(hidden / window) if window > 0 else 0.0,
        klass=window_class(hidden, window),
        before_first_compute=bool(r["before_first_compute"]),
    )


def _type_labels(w: CoreWork) -> np.ndarray:
    """Per metadata row: 1 + the TYPES index of a collective op (one with a
    role), 0 for the others."""
    code = {t: i for i, t in enumerate(("none",) + TYPES)}
    coll = w.classes.columns["collective"]
    role = w.classes.columns["role"]
    out = np.zeros(len(role), dtype=np.int64)
    has = [i for i, r in enumerate(role.tolist()) if isinstance(r, str) and r]
    if has:
        out[has] = [code[_type_of(c)] for c in coll[has].tolist()]
    return out


def _add_type_time(acc: dict[str, float], plane: Plane, w: CoreWork, ks: np.ndarray, ke: np.ndarray,
                   memo: TableMemo | None = None) -> None:
    """Add, per collective type, the time its own ops occupy the core inside the
    given step windows (the same exclusive time the attribution buckets hold)."""
    ops = plane.line(LINE_OPS)
    cls = w.classes
    if ops is None or not len(ops.events) or not len(ks) or not len(cls):
        return
    names = ("none",) + TYPES
    row_label = memo.get("overlap.type_labels", plane, cls, lambda: _type_labels(w)) \
        if memo is not None else _type_labels(w)
    rows = ops.events.meta
    labels = np.where(rows >= 0, row_label[np.maximum(rows, 0)], 0)
    tot = w.ops.exclusive_totals([(labels, len(names))], ks, ke)[0]
    for i, t in enumerate(names[1:], 1):
        if tot[i]:
            acc[t] = acc.get(t, 0.0) + float(tot[i])


def window_class(hidden: float, window: float) -> str:
    """hidden | partial | exposed, by the window's hidden fraction."""
    if window <= 0:
        return "exposed"
    f = hidden / window
    return "hidden" if f >= HIDDEN_MIN else ("exposed" if f <= EXPOSED_MAX else "partial")
