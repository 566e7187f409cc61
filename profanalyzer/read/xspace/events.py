"""One XLine's events as the columns of the trace model (`Events`).

The wire decoder (`wire.decode_line`) or the protobuf runtime
(`raw_from_message`, for lines with string or double stats) gives a line's
raw events; `line_events` checks their times, applies the device timespans,
orders and nests them. `MetaIndex` maps their metadata ids to rows of the
plane's op-metadata table.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from profanalyzer.core.errors import InputError
from profanalyzer.model.trace import LINE_ASYNC, Events, nest_line, sequential_overlaps
from profanalyzer.read.xspace import wire
from profanalyzer.read.xspace.optable import stat_value


def raw_from_message(line, names: Mapping[int, str], want_int: Mapping[int, str], want_str: Mapping[int, str]) -> tuple[wire.RawEvents, dict[str, list[str]]]:
    """Slow path: one line decoded by the protobuf runtime (lines with string or
    double stats, e.g. Async XLA Ops). Only the wanted stats are looked at."""
    evs = line.events
    n = len(evs)
    mid = np.fromiter((e.metadata_id for e in evs), dtype=np.int64, count=n)
    off = np.fromiter((e.offset_ps for e in evs), dtype=np.int64, count=n)
    dur = np.fromiter((e.duration_ps for e in evs), dtype=np.int64, count=n)
    s_ev: list[int] = []
    s_id: list[int] = []
    s_val: list[int] = []
    strs: dict[str, list[str]] = {}
    for i, ev in enumerate(evs):
        for st in ev.stats:
            sid = st.metadata_id
            if sid in want_int:
                which = st.WhichOneof("value")
                if which in ("int64_value", "uint64_value"):
                    v = getattr(st, which)
                elif which == "double_value" and -9.2e18 < st.double_value < 9.2e18:  # finite, fits int64
                    v = int(st.double_value)
                else:
                    continue
                s_ev.append(i)
                s_id.append(sid)
                s_val.append(v - (1 << 64) if v >= 1 << 63 else v)
            elif sid in want_str:
                k = want_str[sid]
                col = strs.get(k)
                if col is None:
                    col = strs[k] = [""] * n
                v = stat_value(st, names)
                col[i] = v if isinstance(v, str) else ""
    raw = wire.RawEvents(
        mid,
        off,
        dur,
        np.asarray(s_ev, dtype=np.int64),
        np.asarray(s_id, dtype=np.int64),
        np.asarray(s_val, dtype=np.int64),
        np.zeros(len(s_ev), dtype=bool),
    )
    return raw, strs


#: Lines whose events overlap each other freely (no nesting semantics).
OVERLAPPING_LINES = frozenset({LINE_ASYNC})


#: Bound on event times relative to their plane's origin (2**60 ps, about 13
#: days; real captures last minutes). A time beyond it is corrupt, and keeping
#: every start and end inside +-2**60 leaves int64 headroom for the shift to
#: the trace origin, sums and differences (nothing downstream can overflow).
MAX_TIME_PS = 1 << 60


def _check_times(off: np.ndarray, dur: np.ndarray, base_ps: int) -> None:
    """Reject negative durations and times outside +-MAX_TIME_PS (InputError)."""
    bad = np.flatnonzero(dur < 0)
    if len(bad):
        i = int(bad[0])
        raise InputError(f"event {i} has a negative duration ({int(dur[i])} ps): corrupt trace")
    lim = MAX_TIME_PS
    # Each term is checked first so that the sums below cannot overflow.
    bad = np.flatnonzero((off > lim) | (off < -lim) | (dur > lim))
    if not len(bad):
        start = off + np.int64(base_ps)
        bad = np.flatnonzero((start < -lim) | (start > lim - dur))
    if len(bad):
        i = int(bad[0])
        raise InputError(
            f"event {i} lies out of range (offset {int(off[i])} ps, duration {int(dur[i])} ps, "
            f"{base_ps / 1e12:.6g} s after the plane's first line): corrupt trace "
            f"(times must lie within {lim / 1e12 / 86400:.0f} days of the capture start)"
        )


class MetaIndex:
    """Event metadata id -> row of the plane's OpMetadata (-1: unknown id).

    Ids are usually dense small integers (1..N): a table lookup then, which is
    ~25x faster than a binary search over 10^6 events; sparse or huge ids fall
    back to the binary search over the sorted ids."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids  # sorted, unique
        self.table = None
        if len(ids) and ids[0] >= 0 and ids[-1] < 4 * len(ids) + 4096:
            self.table = np.full(int(ids[-1]) + 1, -1, dtype=np.int32)
            self.table[ids] = np.arange(len(ids), dtype=np.int32)

    def rows(self, mid: np.ndarray) -> np.ndarray:
        if not len(self.ids) or not len(mid):
            return np.full(len(mid), -1, dtype=np.int32)
        t = self.table
        if t is not None:
            if int(mid.min()) >= 0 and int(mid.max()) < len(t):
                return t[mid]
            ok = (mid >= 0) & (mid < len(t))
            return np.where(ok, t[np.where(ok, mid, 0)], -1).astype(np.int32)
        pos = np.clip(np.searchsorted(self.ids, mid), 0, len(self.ids) - 1)
        return np.where(self.ids[pos] == mid, pos, -1).astype(np.int32)


def line_events(raw: wire.RawEvents, strs: dict[str, list[str]], want_int: Mapping[int, str], base_ps: int, nested: bool = True) -> Events:
    """A line's events as columns, `meta` holding their metadata ids (the
    caller maps them to table rows). Raises InputError on negative durations
    and out-of-range times; |base_ps| must be <= MAX_TIME_PS (the plane
    build checks)."""
    n = len(raw)
    ints: dict[str, np.ndarray] = {}
    if raw.dense is not None:  # decoded as columns already
        for sid, k in want_int.items():
            col = raw.dense.get(sid)
            if col is not None:
                ints[k] = col
    elif len(raw.stat_id):
        for sid, k in want_int.items():
            m = (raw.stat_id == sid) & ~raw.stat_is_ref
            if m.any():
                col = np.full(n, -1, dtype=np.int64)
                col[raw.stat_event[m]] = raw.stat_value[m]
                ints[k] = col
    off, dur = raw.offset_ps, raw.duration_ps
    # Device timespan overrides.
    dof = ints.get("device_offset_ps")
    ddu = ints.get("device_duration_ps")
    if dof is not None and ddu is not None:
        has = (dof >= 0) & (ddu >= 0)
        off = np.where(has, dof, off)
        dur = np.where(has, ddu, dur)
    _check_times(off, dur, base_ps)
    start = off + np.int64(base_ps)
    end = start + dur
    mid = raw.metadata_id
    # Order: by start, longer first on ties (parents before children).
    # Captures are almost always in that order already: check in O(n) first.
    ds = np.diff(start)
    in_order = bool(np.all(ds >= 0)) and bool(np.all(np.diff(end)[ds == 0] <= 0))
    if not in_order:
        order = np.lexsort((-end, start))
        start, end, dur, mid = start[order], end[order], dur[order], mid[order]
        ints = {k: v[order] for k, v in ints.items()}
        strs = {k: [v[j] for j in order.tolist()] for k, v in strs.items()}
    # Nest only on real containment: an event that starts inside an earlier
    # one and ends after it (device timestamp rounding leaves 1 ps overlaps
    # between consecutive ops) is sequential; it starts where the earlier one
    # ends, so it loses the overlap and nothing more. What still overlaps after
    # that (hostile input) is clipped to its parent by `nesting`.
    if nested:
        moved, start, order = sequential_overlaps(start, end)
        if moved:
            end, mid = end[order], mid[order]
            ints = {k: v[order] for k, v in ints.items()}
            strs = {k: [v[j] for j in order.tolist()] for k, v in strs.items()}
        parent, depth, end, selft = nest_line(start, end)
        dur = end - start
    else:
        parent, depth = np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int16)
        dur = end - start
        selft = dur
    meta = mid
    return Events(
        start_ps=start,
        end_ps=end,
        dur_ps=dur,
        self_ps=selft,
        depth=depth,
        parent=parent,
        meta=meta,
        ints=ints,
        strs={k: tuple(v) for k, v in strs.items()},
    )
