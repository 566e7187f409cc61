"""The op-metadata table of a device plane: its event-metadata map -> `OpMetadata`.

Two decoders give the same table: `metadata_from_columns` reads the C
decoder's columns (the fast path), `metadata_from_message` a plane decoded by
the protobuf runtime (the reference path, and the fallback). `MetadataCache`
shares one table between the planes of a run whose maps are byte-identical
(`map_bytes` fingerprints them). The stat helpers (`decode_stats`,
`stat_value`, `as_number`) also serve the plane and line decoding in
`profanalyzer.read.xspace.build`.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from profanalyzer.core.arrays import object_array, unique_ids
from profanalyzer.model.trace import OpMetadata
from profanalyzer.read.xspace import wire, xplane_pb2

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


def stat_value(st, names: Mapping[int, str]):
    which = st.WhichOneof("value")
    if which is None:
        return None
    if which == "ref_value":
        return names.get(st.ref_value, "")
    return getattr(st, which)


def decode_stats(stats, names: Mapping[int, str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for st in stats:
        n = names.get(st.metadata_id)
        if n is not None:
            out[n] = stat_value(st, names)
    return out


def as_number(v) -> float:
    if v is None or isinstance(v, (bytes, str)):
        try:
            return float(v) if isinstance(v, str) else float("nan")
        except ValueError:
            return float("nan")
    return float(v)


def metadata_from_message(plane: xplane_pb2.XPlane, names: Mapping[int, str]) -> OpMetadata:  # type: ignore[name-defined]
    """The op-metadata table from a plane decoded by the protobuf runtime
    (the reference path; `metadata_from_columns` is the fast one)."""
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
            st = decode_stats(md.stats, names)
            for k in META_STR_STATS:
                v = st.get(k)
                if isinstance(v, str):
                    strs[k][row] = v
                elif isinstance(v, bytes):
                    strs[k][row] = v.decode("utf-8", errors="replace")
            for k in META_NUM_STATS:
                if k in st:
                    nums[k][row] = as_number(st[k])
    return _finish_metadata(np.asarray(keys, dtype=np.int64), name, disp, strs, nums)


def metadata_from_columns(buf, cols: wire.MetadataColumns, names: Mapping[int, str]) -> OpMetadata:
    """The op-metadata table from the C decoder's columns, equal to what
    `metadata_from_message` makes of the same entries: the last entry of a key
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

    def value(kind: int, v: int, a: int, b: int):  # what stat_value returns
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
        picked = (s_row[m].tolist(), s_kind[m].tolist(), s_val[m].tolist(), s_a[m].tolist(), s_b[m].tolist())
        for r, kind, v, a, b in zip(*picked, strict=True):  # one mask: equal lengths
            x = value(kind, v, a, b)
            col[r] = x.decode("utf-8", errors="replace") if isinstance(x, bytes) else x
    for j, k in enumerate(META_NUM_STATS):
        m = s_k == n_str + j
        if not m.any():
            continue
        num = nums[k]
        r, kind, v = s_row[m], s_kind[m], s_val[m]
        q = kind == 3
        num[r[q]] = v[q].view(np.uint64).astype(np.float64)
        q = kind == 4
        num[r[q]] = v[q].astype(np.float64)
        q = kind == 2
        num[r[q]] = v[q].view(np.float64)
        q = np.flatnonzero((kind >= 5) | (kind == 0))
        for i in q.tolist():
            num[int(r[i])] = as_number(value(int(kind[i]), int(v[i]), int(s_a[m][i]), int(s_b[m][i])))
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


@dataclass(frozen=True)
class MapBytes:
    """A plane's event-metadata map as the cache sees it: `region`, a view of
    the map entries' bytes (released when the plane is built); `kept`, the
    same bytes for the cache to hold (a second, read-only view of the
    never-written input, or a copy); `key`, their fingerprint."""

    region: memoryview
    kept: memoryview | bytes
    key: tuple

    def release(self) -> None:
        self.region.release()


def map_bytes(buf, tag_at: np.ndarray, p_end: np.ndarray, names: Mapping[int, str]) -> MapBytes:
    """The map entries [tag_at[i], p_end[i]) of a plane (`names`: its stat names)."""
    if len(tag_at) and bool(np.all(tag_at[1:] == p_end[:-1])):  # one contiguous run of entries: the usual layout
        region = memoryview(buf)[int(tag_at[0]):int(p_end[-1])]
        # The input buffer is never written: a second view of it serves
        # the cache's later comparisons (it outlives this plane's view).
        kept: memoryview | bytes = memoryview(buf)[int(tag_at[0]):int(p_end[-1])].toreadonly()
    else:
        kept = b"".join(bytes(buf[a:b]) for a, b in zip(tag_at.tolist(), p_end.tolist(), strict=True))
        region = memoryview(kept)
    # Fingerprint: the stat names, the length and a checksum of three
    # 64 KiB samples; a hit is then compared in full (one memcmp).
    n = len(region)
    sample = zlib.crc32(region[n // 2:n // 2 + _SAMPLE], zlib.crc32(region[:_SAMPLE]))
    key = (tuple(sorted(names.items())), n, zlib.crc32(region[max(0, n - _SAMPLE):], sample))
    return MapBytes(region, kept, key)


class MetadataCache:
    """Op-metadata tables shared by the planes of one trace (one cache per
    load: the hosts of a run share it).

    The TensorCores of a run run the same programs, so their planes usually
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
