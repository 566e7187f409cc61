"""Decoding, building and loading: XSpace bytes -> the columnar `Trace`.

`load_trace(path)` reads every host file of the input, decodes only the TPU
device planes (TensorCore and SparseCore) and builds each plane's op-metadata
table and per-line event columns (`build_plane`), then shifts every plane to
the common trace origin and derives the steps (the model and its helpers live
in `profanalyzer.trace`).
"""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import numpy as np
from google.protobuf.message import DecodeError

from profanalyzer.arrays import object_array, unique_ids
from profanalyzer.errors import InputError, NoTpuPlanesError
from profanalyzer.hardware import TPU7X, chip_by_key, chip_from_device_type
from profanalyzer.trace import (
    LINE_ASYNC,
    Events,
    HostInfo,
    Line,
    OpMetadata,
    Plane,
    Trace,
    derive_steps,
    nest_line,
    sequential_overlaps,
)
from profanalyzer.xspace import reader, wire, xplane_pb2

#: Metadata stats kept as strings / numbers in the op-metadata table.
META_STR_STATS = (
    "hlo_category",
    "tf_op",
    "deduplicated_name",
    "source",
    "shape_with_layout",
)
META_NUM_STATS = (
    "program_id",
    "symbol_id",
    "flops",
    "model_flops",
    "bytes_accessed",
    "raw_bytes_accessed",
)
#: Per-event stats decoded into columns (ints); missing -> -1.
EVENT_INT_STATS = (
    "group_id",
    "device_offset_ps",
    "device_duration_ps",
    "all_reduce_unique_id",
    "run_id",
    "offload_core_id",
    "tc_offload_start_id",
)
#: Per-event string stats kept (sparse: only lines that have them).
EVENT_STR_STATS: tuple[str, ...] = ()  # none is used; the fast decoders skip string stats

# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


def _stat_value(st, names: Mapping[int, str]):
    which = st.WhichOneof("value")
    if which is None:
        return None
    if which == "ref_value":
        return names.get(st.ref_value, "")
    return getattr(st, which)


def _decode_stats(stats, names: Mapping[int, str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for st in stats:
        n = names.get(st.metadata_id)
        if n is not None:
            out[n] = _stat_value(st, names)
    return out


def _num(v) -> float:
    if v is None or isinstance(v, (bytes, str)):
        try:
            return float(v) if isinstance(v, str) else float("nan")
        except ValueError:
            return float("nan")
    return float(v)


def _core_details(raw) -> dict:
    if not isinstance(raw, (bytes, bytearray)):
        return {}
    try:
        cd = xplane_pb2.CoreDetails.FromString(bytes(raw))
    except Exception:  # a malformed optional stat must not fail the read
        return {}
    return {
        "hostname": cd.hostname,
        "device_ordinal": cd.device_ordinal,
        "core_num": cd.core_num,
        "local_chip_id": cd.local_chip_id,
        "global_chip_id": cd.global_chip_id,
        "global_core_id": cd.global_core_id,
        "is_sparse_core": cd.is_sparse_core,
    }


def _build_metadata(plane: xplane_pb2.XPlane, names: Mapping[int, str]) -> OpMetadata:
    """The op-metadata table from a plane decoded by the protobuf runtime
    (the reference path; `_metadata_from_columns` is the fast one)."""
    keys = sorted(plane.event_metadata.keys())
    n = len(keys)
    strs = {k: [""] * n for k in META_STR_STATS}
    nums = {k: np.full(n, np.nan) for k in META_NUM_STATS}
    name = [""] * n
    disp = [""] * n
    for row, key in enumerate(keys):
        md = plane.event_metadata[key]
        name[row] = md.name
        disp[row] = md.display_name
        if md.stats:
            st = _decode_stats(md.stats, names)
            for k in META_STR_STATS:
                v = st.get(k)
                if isinstance(v, str):
                    strs[k][row] = v
                elif isinstance(v, bytes):
                    strs[k][row] = v.decode("utf-8", errors="replace")
            for k in META_NUM_STATS:
                if k in st:
                    nums[k][row] = _num(st[k])
    return _finish_metadata(np.asarray(keys, dtype=np.int64), name, disp, strs, nums)


def _metadata_from_columns(buf, cols: wire.MetadataColumns, names: Mapping[int, str]) -> OpMetadata:
    """The op-metadata table from the C decoder's columns, equal to what
    `_build_metadata` makes of the same entries: the last entry of a key
    wins (protobuf map semantics), the last stat of a name wins, and values
    convert the same way (strings, refs to stat names, numbers)."""
    key = cols.key
    n_e = len(key)
    uniq, first_rev = unique_ids(key[::-1], return_index=True)
    ent = (n_e - 1 - first_rev).astype(np.int64)  # entry that defines each (sorted) key
    n = len(uniq)

    name = wire.utf8_strings(buf, cols.name_start[ent], cols.name_end[ent])
    disp = wire.utf8_strings(buf, cols.display_start[ent], cols.display_end[ent])
    strs = {k: [""] * n for k in META_STR_STATS}
    nums = {k: np.full(n, np.nan) for k in META_NUM_STATS}
    wanted = META_STR_STATS + META_NUM_STATS
    sk = np.full(len(cols.stat_id), -1, dtype=np.int64)
    for sid, nm in names.items():
        if nm in wanted:
            sk[cols.stat_id == sid] = wanted.index(nm)
    row_of_ent = np.full(n_e, -1, dtype=np.int64)
    row_of_ent[ent] = np.arange(n, dtype=np.int64)
    srow = row_of_ent[cols.stat_entry] if len(sk) else sk
    kept = np.flatnonzero((sk >= 0) & (srow >= 0))
    code = srow[kept] * len(wanted) + sk[kept]
    if len(code) and int(np.bincount(code).max()) > 1:
        _, last_rev = np.unique(code[::-1], return_index=True)
        sel = kept[len(code) - 1 - last_rev]  # the last stat of each (row, name)
    else:  # each (row, name) once: the usual case
        sel = kept
    s_row, s_k, s_kind, s_val = srow[sel], sk[sel], cols.stat_kind[sel], cols.stat_value[sel]
    s_a, s_b = cols.stat_start[sel], cols.stat_end[sel]

    def value(kind: int, v: int, a: int, b: int):  # what _stat_value returns
        if kind == 5:
            return str(buf[a:b], "utf-8")
        if kind == 6:
            return bytes(buf[a:b])
        if kind == 7:
            return names.get(v if v >= 0 else v + (1 << 64), "")
        if kind == 3:
            return v if v >= 0 else v + (1 << 64)
        if kind == 2:
            return float(np.int64(v).view(np.float64))
        return v if kind == 4 else None

    n_str = len(META_STR_STATS)
    for j, k in enumerate(META_STR_STATS):
        m = (s_k == j) & (s_kind == 5)
        rows, got = s_row[m], wire.utf8_strings(buf, s_a[m], s_b[m], share=True)
        if len(rows) == n and bool(np.all(rows == np.arange(n))):  # every row has one, in order: the usual case
            col = strs[k] = got
        else:
            arr = np.full(n, "", dtype=object)
            arr[rows] = object_array(got)  # rows are distinct (one stat per row and name)
            col = strs[k] = arr.tolist()
        m = (s_k == j) & (s_kind >= 6)
        for r, kind, v, a, b in zip(s_row[m].tolist(), s_kind[m].tolist(), s_val[m].tolist(), s_a[m].tolist(), s_b[m].tolist()):
            x = value(kind, v, a, b)
            col[r] = x.decode("utf-8", errors="replace") if isinstance(x, bytes) else x
    for j, k in enumerate(META_NUM_STATS):
        m = s_k == n_str + j
        if not m.any():
            continue
        col = nums[k]
        r, kind, v = s_row[m], s_kind[m], s_val[m]
        q = kind == 3
        col[r[q]] = v[q].view(np.uint64).astype(np.float64)
        q = kind == 4
        col[r[q]] = v[q].astype(np.float64)
        q = kind == 2
        col[r[q]] = v[q].view(np.float64)
        q = np.flatnonzero((kind >= 5) | (kind == 0))
        for i in q.tolist():
            col[int(r[i])] = _num(value(int(kind[i]), int(v[i]), int(s_a[m][i]), int(s_b[m][i])))
    return _finish_metadata(uniq.astype(np.int64), name, disp, strs, nums)


def _finish_metadata(keys: np.ndarray, name: list[str], disp: list[str], strs: dict[str, list[str]],
                     nums: dict[str, np.ndarray]) -> OpMetadata:
    # Counts (FLOPs, bytes) and ids are integers: 0, or in [1, 2**64) (what an
    # integer stat holds); ids must also fit int64. Anything else (negative,
    # fractional below 1, huge or non-finite doubles) is a corrupt stat and is
    # treated as missing, so ratios such as FLOP/byte stay finite.
    for k in META_NUM_STATS:
        v = nums[k]
        v[~np.isfinite(v) | (v < 0) | ((v > 0) & (v < 1)) | (v >= 2.0**64)] = np.nan
    ids = {}
    for k in ("program_id", "symbol_id"):
        v = nums[k]
        # -1: missing; -2: present but beyond int64 (XLA program ids are uint64 fingerprints)
        ids[k] = np.where(np.isnan(v), -1, np.where(v >= 2.0**63, -2, np.nan_to_num(v))).astype(np.int64)
    return OpMetadata(
        ids=keys,
        name=tuple(name),
        display_name=tuple(disp),
        category=tuple(strs["hlo_category"]),
        tf_op=tuple(strs["tf_op"]),
        deduplicated_name=tuple(strs["deduplicated_name"]),
        source=tuple(strs["source"]),
        shape_with_layout=tuple(strs["shape_with_layout"]),
        program_id=ids["program_id"],
        symbol_id=ids["symbol_id"],
        flops=nums["flops"],
        model_flops=nums["model_flops"],
        bytes_accessed=nums["bytes_accessed"],
        raw_bytes_accessed=nums["raw_bytes_accessed"],
    )


_SAMPLE = 1 << 16

T = TypeVar("T")


class MetadataCache:
    """Op-metadata tables shared by the planes of one host file.

    The TensorCores of a host run the same programs, so their planes usually
    carry byte-identical event-metadata maps (tens of MB of HLO text each on
    unrolled models): each distinct map (with its stat-name table) is decoded
    once. Thread-safe; a plane that finds the same map being decoded by
    another thread waits for it instead of decoding it again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[tuple, tuple[bytes, OpMetadata]] = {}
        self._pending: dict[tuple, threading.Event] = {}

    def unclaimed(self, key: tuple) -> bool:
        """No table of this key is decoded or being decoded (yet)."""
        with self._lock:
            return key not in self._done and key not in self._pending

    def pending(self, key: tuple) -> bool:
        """Another thread is decoding the table of this key right now."""
        with self._lock:
            return key in self._pending and key not in self._done

    def get(self, key: tuple, region, build: Callable[[], OpMetadata], kept) -> OpMetadata:
        """The table of the map bytes `region` (`key`: a fingerprint of them),
        built once: a later plane with the same key gets it when its bytes
        equal the first one's (compared in full), else builds its own.
        `kept`: the same bytes, unchanged as long as the cache lives (a view
        of the never-written input, or a copy), held for that comparison."""
        with self._lock:
            hit = self._done.get(key)
            if hit is None:
                ev = self._pending.get(key)
                mine = ev is None
                if mine:
                    ev = self._pending[key] = threading.Event()
        if hit is None and not mine:
            assert ev is not None
            ev.wait()
            with self._lock:
                hit = self._done.get(key)
            if hit is None:
                return build()  # the other thread failed: fail the same way
        if hit is not None:
            return hit[1] if wire.same_bytes(hit[0], region) else build()
        assert ev is not None
        try:
            md = build()
            with self._lock:
                self._done[key] = (kept, md)
            return md
        finally:
            with self._lock:
                self._pending.pop(key, None)
            ev.set()


class Deferred:
    """A plane whose events are decoded and whose shared op-metadata table
    another thread was still decoding: calling it (later, on any thread)
    takes the table and returns the plane (`build_plane(..., defer=True)`)."""

    def __init__(self, finish: Callable[[], tuple[Plane, int]]) -> None:
        self._finish = finish

    def __call__(self) -> tuple[Plane, int]:
        return self._finish()


def finished(x: tuple[Plane, int] | Deferred) -> tuple[Plane, int]:
    """A build_plane result, finished when it was deferred."""
    return x() if isinstance(x, Deferred) else x


def _raw_from_message(line, names: Mapping[int, str], want_int: Mapping[int, str], want_str: Mapping[int, str]) -> tuple[wire.RawEvents, dict[str, list[str]]]:
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
                v = _stat_value(st, names)
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


def _events(raw: wire.RawEvents, strs: dict[str, list[str]], want_int: Mapping[int, str], base_ps: int, nested: bool = True) -> Events:
    """A line's events as columns, `meta` holding their metadata ids (the
    caller maps them to table rows). Raises InputError on negative durations
    and out-of-range times; |base_ps| must be <= MAX_TIME_PS (build_plane
    checks)."""
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


def build_plane(buf, start: int, end: int, host: str, kind: str, device_id: int, sc_index: int | None,
                lines: Collection[str] | None = None, meta_cache: MetadataCache | None = None,
                defer: bool = False) -> tuple[Plane, int] | Deferred:
    """Build one plane from its wire bytes buf[start:end].

    Returns the plane with times relative to its own origin (its earliest line
    timestamp with events) and that origin in ns. Lines are decoded by the
    vectorised wire decoder when they hold only integer stats, else by the
    protobuf runtime; the event-metadata map by the C decoder when built
    (else the runtime), shared through `meta_cache` by planes whose maps are
    byte-identical; the rest of the plane by the runtime.
    """
    try:
        fld, wt, p_start, p_end, tag_at = wire.scan_fields(buf, start, end)
    except ValueError as e:
        raise InputError(f"plane at byte {start} is corrupt ({e})") from None
    is_line = (fld == 3) & (wt == 2)
    is_meta = (fld == 4) & (wt == 2)
    line_spans = list(zip(p_start[is_line].tolist(), p_end[is_line].tolist()))

    def parse(which: np.ndarray) -> xplane_pb2.XPlane:
        data = b"".join(bytes(buf[a:b]) for a, b in zip(tag_at[which].tolist(), p_end[which].tolist()))
        try:
            return xplane_pb2.XPlane.FromString(data)
        except DecodeError as e:
            why = wire.explain_decode_error(data, xplane_pb2.XPlane.DESCRIPTOR) or str(e)
            raise InputError(f"plane at byte {start} is corrupt ({why})") from None

    plane = parse(~is_line & ~is_meta)
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    names_rev: dict[str, int] = {}
    for k in sorted(names):
        names_rev.setdefault(names[k], k)
    want_int = {names_rev[k]: k for k in EVENT_INT_STATS if k in names_rev}
    want_str = {names_rev[k]: k for k in EVENT_STR_STATS if k in names_rev}
    pstats = _decode_stats(plane.stats, names)
    if "core_details" in pstats:
        pstats["core_details"] = _core_details(pstats["core_details"])

    def metadata() -> OpMetadata:
        cols = wire.decode_metadata(buf, np.stack([p_start[is_meta], p_end[is_meta]], axis=1))
        if cols is not None:
            return _metadata_from_columns(buf, cols, names)
        # The runtime decodes the map (and reports corruption) with the plane's other fields, as stored.
        return _build_metadata(parse(~is_line), names)

    region = kept = None
    if meta_cache is not None:
        mt, me = tag_at[is_meta], p_end[is_meta]
        if len(mt) and bool(np.all(mt[1:] == me[:-1])):  # one contiguous run of entries: the usual layout
            region = memoryview(buf)[int(mt[0]):int(me[-1])]
            # The input buffer is never written: a second view of it serves
            # the cache's later comparisons (it outlives this plane's view).
            kept = memoryview(buf)[int(mt[0]):int(me[-1])].toreadonly()
        else:
            kept = b"".join(bytes(buf[a:b]) for a, b in zip(mt.tolist(), me.tolist()))
            region = memoryview(kept)
        # Fingerprint: the stat names, the length and a checksum of three
        # 64 KiB samples; a hit is then compared in full (one memcmp).
        n = len(region)
        sample = zlib.crc32(region[n // 2:n // 2 + _SAMPLE], zlib.crc32(region[:_SAMPLE]))
        key = (tuple(sorted(names.items())), n, zlib.crc32(region[max(0, n - _SAMPLE):], sample))

    def table() -> OpMetadata:
        if meta_cache is None or region is None:
            return metadata()
        return meta_cache.get(key, region, metadata, kept)

    try:
        # A plane whose table no other thread has (begun to) decode decodes it
        # first, so that planes sharing it wait as little as possible; the
        # others decode their events first and take the table last.
        meta = table() if meta_cache is None or meta_cache.unclaimed(key) else None
        decoded = []
        skipped: list[tuple[int, str]] = []  # (timestamp, name) of skipped lines with events
        for ps, pe in line_spans:
            if lines is not None:
                head = wire.peek_line(buf, ps, pe)
                if head is not None and head[0] not in lines:
                    if head[2]:
                        skipped.append((head[1], head[0]))
                    continue
            fast = wire.decode_line(buf, ps, pe, want=tuple(want_int), dense=True)
            if fast is not None:
                head, raw = fast
                decoded.append((head.id, head.name or head.display_name, head.timestamp_ns, raw, {}))
                continue
            try:
                msg = xplane_pb2.XLine.FromString(bytes(buf[ps:pe]))
            except DecodeError as e:
                why = wire.explain_decode_error(bytes(buf[ps:pe]), xplane_pb2.XLine.DESCRIPTOR) or str(e)
                raise InputError(f"line at byte {ps} is corrupt ({why})") from None
            raw, strs = _raw_from_message(msg, names, want_int, want_str)
            decoded.append((msg.id, msg.name or msg.display_name, msg.timestamp_ns, raw, strs))
        # Skipped lines count for the origin: times do not depend on the selection.
        with_events = [(ts, name) for _, name, ts, raw, _ in decoded if len(raw)] + skipped
        origin, origin_line = min(with_events, default=(0, ""))
        built: list[Line] = []
        for lid, name, ts, raw, strs in decoded:
            # Lines without events keep no times: their timestamp is irrelevant.
            base_ps = (ts - origin) * 1000 if len(raw) else 0
            if base_ps > MAX_TIME_PS:
                raise InputError(
                    f"line {name!r}: timestamp_ns {ts} is {(ts - origin) / 1e9:.6g} s after line {origin_line!r}'s "
                    f"({origin}): corrupt or mixed-clock line timestamps"
                )
            try:
                built.append(Line(lid, name, _events(raw, strs, want_int, base_ps, nested=name not in OVERLAPPING_LINES)))
            except InputError as e:
                raise InputError(f"line {name!r}: {e}") from None
    except BaseException:
        if region is not None:
            region.release()
        raise

    def finish(meta: OpMetadata | None) -> tuple[Plane, int]:
        try:
            if meta is None:
                meta = table()
        finally:
            if region is not None:
                region.release()
        meta_index = MetaIndex(meta.ids)
        rows = [replace(ln, events=replace(ln.events, meta=meta_index.rows(ln.events.meta))) for ln in built]
        return (
            Plane(
                host=host,
                name=plane.name,
                id=plane.id,
                kind=kind,
                device_id=device_id,
                sc_index=sc_index,
                stats={k: v for k, v in pstats.items() if not isinstance(v, (bytes, bytearray))},
                meta=meta,
                lines=tuple(rows),
            ),
            origin,
        )

    if meta is None and defer and meta_cache is not None and meta_cache.pending(key):
        # Another thread is decoding this plane's table: this thread moves on
        # to other planes, and the caller finishes this one afterwards.
        return Deferred(lambda: finish(None))
    return finish(meta)


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def _device_refs(index: reader.SpaceIndex, include_sparsecore: bool = True):
    kinds = ("tensorcore", "sparsecore") if include_sparsecore else ("tensorcore",)
    refs = [r for r in index.planes if r.kind in kinds]
    # TensorCores first, by device id; then SparseCores by (device, index).
    refs.sort(key=lambda r: (r.kind != "tensorcore", r.device_id or 0, r.sc_index or 0, r.index))
    return refs


def _no_tpu_message(path: Path, index: reader.SpaceIndex) -> str:
    kinds: dict[str, int] = {}
    for r in index.planes:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    names = sorted({r.name for r in index.planes})
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    if kinds.get("gpu"):
        return (
            f"{path}: GPU capture ({kinds['gpu']} /device:GPU:N plane(s)): not supported; profanalyzer "
            "analyses TPU captures only (TensorCore /device:TPU:N and SparseCore planes); for GPU "
            "profiles use XProf / TensorBoard's profile plugin"
        )
    if set(kinds) <= {"host", "metadata", "task_env", "chip"}:
        return (
            f"{path}: CPU-only capture: no TPU device planes (/device:TPU:N), only host planes ({shown}); "
            "capture the profile on the TPU VM while the TPU program runs"
        )
    return f"{path}: no TPU device planes (/device:TPU:N) in this profile; planes found: {shown}"


def _open_host(f: Path, include_sparsecore: bool, lines: Collection[str] | None = None,
               meta_cache: MetadataCache | None = None) -> tuple[HostInfo, list[Callable[[], tuple[Plane, int] | Deferred]]]:
    """Open one host file: its HostInfo and one decode task per device plane
    (each returns the plane relative to its own origin; they may run on
    threads: the buffer stays alive as long as they do). `meta_cache`: shared
    by the hosts of a run (they run the same programs: one decode of each
    distinct op-metadata map per run)."""
    kinds_wanted = ("tensorcore", "sparsecore") if include_sparsecore else ("tensorcore",)
    buf, index = reader.open_space(f, want=lambda r: r.kind in kinds_wanted)
    host = reader.host_name(index)
    kinds: dict[str, int] = {}
    for r in index.planes:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    info = HostInfo(host, str(f), index.size, len(index.planes), dict(sorted(kinds.items())), index.errors, index.warnings)
    refs = _device_refs(index, include_sparsecore)
    if not any(r.kind == "tensorcore" for r in refs):
        raise NoTpuPlanesError(_no_tpu_message(f, index))
    cache = meta_cache if meta_cache is not None else MetadataCache()

    def named(r: reader.PlaneRef, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except InputError as e:
            raise InputError(f"{f}: plane {r.name!r}: {e}") from None

    def one(r: reader.PlaneRef) -> tuple[Plane, int] | Deferred:
        got = named(r, lambda: build_plane(buf, r.offset, r.offset + r.length, host, r.kind, r.device_id or 0,
                                           r.sc_index, lines, cache, defer=True))
        return Deferred(lambda: named(r, got)) if isinstance(got, Deferred) else got

    return info, [lambda r=r: one(r) for r in refs]


def _load_host(f: Path, include_sparsecore: bool, lines: Collection[str] | None = None,
               meta_cache: MetadataCache | None = None) -> tuple[HostInfo, list[tuple[Plane, int]]]:
    """Decode one host file's device planes (each relative to its own origin)."""
    info, tasks = _open_host(f, include_sparsecore, lines, meta_cache)
    # Planes are independent; their event decoding (C decoder, numpy) runs
    # without the GIL, so a few threads overlap it. Bounded: at most
    # PLANE_THREADS planes' decoded bytes are alive at a time.
    threads = min(PLANE_THREADS, os.cpu_count() or 1, len(tasks))
    if threads > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=threads) as pool:
            built = [finished(fut.result()) for fut in [pool.submit(t) for t in tasks]]
    else:
        built = [finished(t()) for t in tasks]
    return info, built


#: Threads decoding the planes of one host file.
PLANE_THREADS = 4


def default_jobs(n_files: int) -> int:
    return max(1, min(n_files, os.cpu_count() or 1))


def _load_hosts(files: list[Path], include_sparsecore: bool, lines: Collection[str] | None, jobs: int,
                progress: Callable[[int, int, str], None] | None) -> list[tuple[HostInfo, list[tuple[Plane, int]]]]:
    """Decode several host files in this process: one pool of threads decodes
    the planes of up to `jobs` files at a time while the next file is opened
    (mapped, or streamed out of its gzip). Results and errors come in file
    order. Threads, not processes: the decoding runs without the GIL, and
    sending planes back from worker processes (pickling ~200 MB of arrays per
    GB of capture, through a pipe) cost more than it saved."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    threads = max(2, min(PLANE_THREADS, os.cpu_count() or 1))
    meta_cache = MetadataCache()
    results: list[tuple[HostInfo, list[tuple[Plane, int]]]] = []
    inflight: deque = deque()
    pool = ThreadPoolExecutor(max_workers=threads)

    def collect() -> None:
        f, info, futures = inflight.popleft()
        results.append((info, [finished(fut.result()) for fut in futures]))
        if progress:
            progress(len(results), len(files), f.name)

    try:
        for f in files:
            while len(inflight) >= jobs:
                collect()
            try:
                info, tasks = _open_host(f, include_sparsecore, lines, meta_cache)
            except Exception:
                while inflight:  # an earlier file's error first, as the files come in order
                    collect()
                raise
            inflight.append((f, info, [pool.submit(t) for t in tasks]))
        while inflight:
            collect()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


def load_trace(
    path: str | Path,
    *,
    chip: str | None = None,
    include_sparsecore: bool = True,
    jobs: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    lines: Collection[str] | None = None,
) -> Trace:
    """Read an input path into a Trace (only TPU device planes are decoded).

    `lines`: the line names to decode (default: every line); the analysis
    asks for ANALYSIS_LINES only, so e.g. `Sparse Core Syncs` costs nothing.

    Host files of a run folder are decoded in parallel (`jobs` files at a
    time, default: one per core, at most one per file; their planes on a
    shared pool of threads). `progress(done, total, label)` is called after
    each host file.
    """
    resolved = reader.resolve_input(path)
    files = list(resolved.files)
    jobs = default_jobs(len(files)) if jobs is None else max(1, jobs)
    results: list[tuple[HostInfo, list[tuple[Plane, int]]]] = []
    if jobs > 1 and len(files) > 1:
        results = _load_hosts(files, include_sparsecore, lines, jobs, progress)
    else:
        meta_cache = MetadataCache()
        for k, f in enumerate(files):
            results.append(_load_host(f, include_sparsecore, lines, meta_cache))
            if progress:
                progress(k + 1, len(files), f.name)
    hosts = [info for info, _ in results]
    built = [pb for _, planes in results for pb in planes]
    del results
    # Common origin: the earliest line timestamp of any decoded plane.
    origin_ns = min((o for p, o in built if p.n_events), default=0)
    planes: list[Plane] = []
    for p, own in built:
        if not p.n_events:  # nothing to shift; an event-less plane's origin is meaningless
            planes.append(p)
            continue
        shift_ps = (own - origin_ns) * 1000
        if shift_ps >= 1 << 62:
            raise InputError(
                f"{p.host}: plane {p.name!r} line timestamps are {shift_ps / 1e12:.0f} s away from "
                "the other planes' (mixed epoch-based and zero timestamps across files?)"
            )
        shift = np.int64(shift_ps)
        if shift:
            for ln in p.lines:
                np.add(ln.events.start_ps, shift, out=ln.events.start_ps)
                np.add(ln.events.end_ps, shift, out=ln.events.end_ps)
        planes.append(p)
    device_type = None
    for p in planes:
        dt = p.stats.get("device_type_string")
        if isinstance(dt, str) and dt:
            device_type = dt
            break
    if chip:
        chosen = chip_by_key(chip)
        chip_source = "--chip flag"
    else:
        detected = chip_from_device_type(device_type)
        if detected is not None:
            chosen, chip_source = detected, f'device_type_string "{device_type}"'
        else:
            chosen = TPU7X
            chip_source = (
                f'assumed TPU7x (unrecognised device_type_string "{device_type}"; pass --chip)'
                if device_type
                else "assumed TPU7x (no device_type_string in the trace; pass --chip)"
            )
    steps = {p.label: derive_steps(p) for p in planes if p.kind == "tensorcore"}
    return Trace(
        source=str(path),
        input_kind=resolved.kind,
        run=resolved.run,
        note=resolved.note,
        hosts=tuple(hosts),
        chip=chosen,
        chip_source=chip_source,
        device_type=device_type,
        origin_ns=origin_ns,
        planes=tuple(planes),
        steps=steps,
    )
