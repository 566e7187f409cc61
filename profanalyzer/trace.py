"""The columnar trace model: per-core op tables, steps, modules, async windows.

`load_trace(path)` reads every host file of the input, decodes only the TPU
device planes (TensorCore and SparseCore), and builds for each plane

  * an op-metadata table (one row per XEventMetadata: HLO text, display name,
    category, tf_op, program id, flops, bytes, ...), and
  * per line, an event table in numpy columns (start, end, duration, self time,
    metadata row, step group, nesting depth, plus the line's per-event extras).

Times are int64 picoseconds relative to the trace origin (`Trace.origin_ns`,
the earliest line timestamp of any decoded plane), so epoch-based and zero
line timestamps both work and nothing overflows. When an event carries
`device_offset_ps` and `device_duration_ps`, those give its device timespan.

Steps come from the `Steps` line when a core has one, else from the runs of
the dominant program on `XLA Modules` (the program with the most total time);
`Steps.source` says which.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from profanalyzer.errors import InputError, NoTpuPlanesError
from profanalyzer.hardware import TPU7X, Chip, chip_by_key, chip_from_device_type
from profanalyzer.xspace import reader, xplane_pb2

# Line names (exact, as the TPU runtime writes them).
LINE_STEPS = "Steps"
LINE_MODULES = "XLA Modules"
LINE_OPS = "XLA Ops"
LINE_ASYNC = "Async XLA Ops"
LINE_TRACEME = "XLA TraceMe"
LINE_SC_STEPS = "Sparse Core Steps"
LINE_SC_MODULES = "Sparse Core Modules"
LINE_SC_OPS = "Sparse Core Ops"
LINE_SC_SYNCS = "Sparse Core Syncs"

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
EVENT_STR_STATS = ("hlo_op",)


# ---------------------------------------------------------------------------
# Frozen model types
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class OpMetadata:
    """One row per event-metadata entry of a plane (columnar)."""

    ids: np.ndarray  # int64 metadata ids
    name: tuple[str, ...]  # HLO text (XLA Ops) or event name
    display_name: tuple[str, ...]
    category: tuple[str, ...]
    tf_op: tuple[str, ...]
    deduplicated_name: tuple[str, ...]
    source: tuple[str, ...]
    shape_with_layout: tuple[str, ...]
    program_id: np.ndarray  # int64, -1 if missing
    symbol_id: np.ndarray  # int64, -1 if missing
    flops: np.ndarray  # float64, nan if missing
    model_flops: np.ndarray
    bytes_accessed: np.ndarray
    raw_bytes_accessed: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def short_name(self, row: int) -> str:
        return self.display_name[row] or self.name[row]


@dataclass(frozen=True, eq=False)
class Events:
    """Columnar events of one line, sorted by (start, -end)."""

    start_ps: np.ndarray  # int64
    end_ps: np.ndarray  # int64
    dur_ps: np.ndarray  # int64
    self_ps: np.ndarray  # int64: duration minus directly nested children
    depth: np.ndarray  # int16: nesting depth on the line (0 = top)
    meta: np.ndarray  # int32 row into the plane's OpMetadata
    ints: Mapping[str, np.ndarray]  # EVENT_INT_STATS present on the line (-1 = missing)
    strs: Mapping[str, tuple[str, ...]]  # EVENT_STR_STATS present on the line

    def __len__(self) -> int:
        return len(self.start_ps)

    def int_stat(self, name: str) -> np.ndarray:
        col = self.ints.get(name)
        if col is None:
            return np.full(len(self), -1, dtype=np.int64)
        return col


@dataclass(frozen=True, eq=False)
class Line:
    id: int
    name: str
    events: Events


@dataclass(frozen=True, eq=False)
class Plane:
    host: str
    name: str
    id: int
    kind: str  # 'tensorcore' | 'sparsecore'
    device_id: int
    sc_index: int | None
    stats: Mapping[str, object]  # plane stats (core_details decoded to a dict)
    meta: OpMetadata
    lines: tuple[Line, ...]

    def line(self, name: str) -> Line | None:
        for ln in self.lines:
            if ln.name == name:
                return ln
        return None

    @property
    def label(self) -> str:
        """Unique core label across hosts."""
        return f"{self.host}:{self.name}"

    @property
    def n_events(self) -> int:
        return sum(len(ln.events) for ln in self.lines)


@dataclass(frozen=True, eq=False)
class Steps:
    """Step windows of one TensorCore."""

    source: str  # 'Steps line' | 'XLA Modules: <program>' | 'whole capture'
    number: np.ndarray  # int64 step numbers
    start_ps: np.ndarray
    end_ps: np.ndarray

    def __len__(self) -> int:
        return len(self.number)

    @property
    def dur_ps(self) -> np.ndarray:
        return self.end_ps - self.start_ps


@dataclass(frozen=True)
class HostInfo:
    name: str
    file: str
    size_bytes: int
    planes_total: int
    plane_kinds: Mapping[str, int]  # kind -> count over all planes of the file
    errors: tuple[str, ...]
    warnings: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Trace:
    source: str  # what the user passed
    input_kind: str  # 'file' | 'run' | 'logdir'
    run: str | None
    note: str | None
    hosts: tuple[HostInfo, ...]
    chip: Chip
    chip_source: str  # 'device_type_string "..."' | '--chip flag' | 'default (no device_type_string)'
    device_type: str | None
    origin_ns: int
    planes: tuple[Plane, ...]  # TensorCore then SparseCore, host order
    steps: Mapping[str, Steps]  # TensorCore plane label -> steps

    @property
    def tensorcores(self) -> tuple[Plane, ...]:
        return tuple(p for p in self.planes if p.kind == "tensorcore")

    @property
    def sparsecores(self) -> tuple[Plane, ...]:
        return tuple(p for p in self.planes if p.kind == "sparsecore")

    def sparsecores_of(self, tc: Plane) -> tuple[Plane, ...]:
        return tuple(
            p for p in self.sparsecores if p.host == tc.host and p.device_id == tc.device_id
        )


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


def _int(v) -> int:
    if v is None:
        return -1
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


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


def _build_metadata(plane: xplane_pb2.XPlane, names: Mapping[int, str]) -> tuple[OpMetadata, dict[int, int]]:
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
    row_of = {key: row for row, key in enumerate(keys)}
    md = OpMetadata(
        ids=np.asarray(keys, dtype=np.int64),
        name=tuple(name),
        display_name=tuple(disp),
        category=tuple(strs["hlo_category"]),
        tf_op=tuple(strs["tf_op"]),
        deduplicated_name=tuple(strs["deduplicated_name"]),
        source=tuple(strs["source"]),
        shape_with_layout=tuple(strs["shape_with_layout"]),
        program_id=np.where(np.isnan(nums["program_id"]), -1, nums["program_id"]).astype(np.int64),
        symbol_id=np.where(np.isnan(nums["symbol_id"]), -1, nums["symbol_id"]).astype(np.int64),
        flops=nums["flops"],
        model_flops=nums["model_flops"],
        bytes_accessed=nums["bytes_accessed"],
        raw_bytes_accessed=nums["raw_bytes_accessed"],
    )
    return md, row_of


def self_times(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Self time and depth of events sorted by (start, -end) on one line.

    Events on a line never partially overlap but may nest; a child's time is
    subtracted from its direct parent only. A partial overlap (bad input) is
    treated as ending the earlier event where the later starts.
    """
    n = len(start)
    dur = end - start
    if n == 0 or bool(np.all(start[1:] >= end[:-1])):
        return dur.copy(), np.zeros(n, dtype=np.int16)
    selft = dur.copy()
    depth = np.zeros(n, dtype=np.int16)
    stack: list[int] = []
    s_l = start.tolist()
    e_l = end.tolist()
    for i in range(n):
        s, e = s_l[i], e_l[i]
        while stack and e_l[stack[-1]] <= s:
            stack.pop()
        if stack:
            p = stack[-1]
            # Clip a partially overlapping child to its parent.
            child = min(e, e_l[p]) - s
            selft[p] -= child
            depth[i] = len(stack)
        stack.append(i)
    np.maximum(selft, 0, out=selft)
    return selft, depth


def _decode_line(line, names_rev: Mapping[str, int], names: Mapping[int, str], row_of: Mapping[int, int], base_ps: int) -> Events:
    want_int = {names_rev[k]: k for k in EVENT_INT_STATS if k in names_rev}
    want_str = {names_rev[k]: k for k in EVENT_STR_STATS if k in names_rev}
    evs = line.events
    n = len(evs)
    mid = np.empty(n, dtype=np.int64)
    off = np.empty(n, dtype=np.int64)
    dur = np.empty(n, dtype=np.int64)
    ints: dict[str, np.ndarray] = {}
    strs: dict[str, list[str]] = {}
    for i, ev in enumerate(evs):
        mid[i] = ev.metadata_id
        off[i] = ev.offset_ps
        dur[i] = ev.duration_ps
        if ev.stats:
            for st in ev.stats:
                k = want_int.get(st.metadata_id)
                if k is not None:
                    col = ints.get(k)
                    if col is None:
                        col = ints[k] = np.full(n, -1, dtype=np.int64)
                    which = st.WhichOneof("value")
                    if which in ("int64_value", "uint64_value"):
                        v = getattr(st, which)
                        col[i] = v if v < (1 << 63) else -1
                    elif which == "double_value":
                        col[i] = int(st.double_value)
                    continue
                k = want_str.get(st.metadata_id)
                if k is not None:
                    col_s = strs.get(k)
                    if col_s is None:
                        col_s = strs[k] = [""] * n
                    v = _stat_value(st, names)
                    col_s[i] = v if isinstance(v, str) else ""
    # Device timespan overrides.
    dof = ints.get("device_offset_ps")
    ddu = ints.get("device_duration_ps")
    if dof is not None and ddu is not None:
        has = (dof >= 0) & (ddu >= 0)
        off = np.where(has, dof, off)
        dur = np.where(has, ddu, dur)
    np.maximum(dur, 0, out=dur)
    start = off + np.int64(base_ps)
    end = start + dur
    order = np.lexsort((-end, start))
    if not np.array_equal(order, np.arange(n)):
        start, end, dur, mid = start[order], end[order], dur[order], mid[order]
        ints = {k: v[order] for k, v in ints.items()}
        strs = {k: [v[j] for j in order.tolist()] for k, v in strs.items()}
    selft, depth = self_times(start, end)
    meta = np.fromiter((row_of.get(m, -1) for m in mid.tolist()), dtype=np.int32, count=n)
    return Events(
        start_ps=start,
        end_ps=end,
        dur_ps=dur,
        self_ps=selft,
        depth=depth,
        meta=meta,
        ints=ints,
        strs={k: tuple(v) for k, v in strs.items()},
    )


def _line_origin(plane: xplane_pb2.XPlane) -> int | None:
    ts = [ln.timestamp_ns for ln in plane.lines if len(ln.events)]
    return min(ts) if ts else None


def build_plane(plane: xplane_pb2.XPlane, host: str, kind: str, device_id: int, sc_index: int | None, origin_ns: int) -> Plane:
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    names_rev: dict[str, int] = {}
    for k in sorted(names):
        names_rev.setdefault(names[k], k)
    pstats = _decode_stats(plane.stats, names)
    if "core_details" in pstats:
        pstats["core_details"] = _core_details(pstats["core_details"])
    meta, row_of = _build_metadata(plane, names)
    lines = []
    for ln in plane.lines:
        base_ps = (ln.timestamp_ns - origin_ns) * 1000
        lines.append(Line(ln.id, ln.name or ln.display_name, _decode_line(ln, names_rev, names, row_of, base_ps)))
    return Plane(
        host=host,
        name=plane.name,
        id=plane.id,
        kind=kind,
        device_id=device_id,
        sc_index=sc_index,
        stats={k: v for k, v in pstats.items() if not isinstance(v, (bytes, bytearray))},
        meta=meta,
        lines=tuple(lines),
    )


# ---------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------

_PROGRAM_RE = re.compile(r"^(.*)\((\d+)\)$")


def derive_steps(plane: Plane) -> Steps:
    ln = plane.line(LINE_STEPS)
    if ln is not None and len(ln.events):
        ev = ln.events
        top = ev.depth == 0
        numbers = ev.int_stat("group_id")[top]
        if np.any(numbers < 0):
            # No group_id: the event name is the step number when numeric.
            rows = ev.meta[top]
            fallback = []
            for i, r in enumerate(rows.tolist()):
                nm = plane.meta.name[r] if r >= 0 else ""
                fallback.append(int(nm) if nm.strip().isdigit() else i)
            numbers = np.where(numbers < 0, np.asarray(fallback, dtype=np.int64), numbers)
        return Steps("Steps line", numbers.astype(np.int64), ev.start_ps[top], ev.end_ps[top])
    ln = plane.line(LINE_MODULES)
    if ln is not None and len(ln.events):
        ev = ln.events
        top = np.flatnonzero(ev.depth == 0)
        # Group runs by program (the metadata name without the "(id)" suffix is
        # kept whole: "jit_train_step(123)" names one compiled program).
        totals: dict[str, int] = {}
        prog_of = []
        for i in top.tolist():
            r = ev.meta[i]
            nm = plane.meta.name[r] if r >= 0 else "?"
            prog_of.append(nm)
            totals[nm] = totals.get(nm, 0) + int(ev.dur_ps[i])
        dominant = max(sorted(totals), key=lambda k: totals[k])
        sel = top[np.asarray([p == dominant for p in prog_of], dtype=bool)]
        return Steps(
            f"XLA Modules: {dominant}",
            np.arange(len(sel), dtype=np.int64),
            ev.start_ps[sel],
            ev.end_ps[sel],
        )
    ln = plane.line(LINE_OPS)
    if ln is not None and len(ln.events):
        ev = ln.events
        return Steps(
            "whole capture",
            np.zeros(1, dtype=np.int64),
            ev.start_ps[:1].copy() if len(ev) else np.zeros(1, np.int64),
            np.asarray([ev.end_ps.max()], dtype=np.int64),
        )
    return Steps("none", np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))


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
    if kinds.get("gpu"):
        return (
            f"{path}: GPU capture ({kinds['gpu']} /device:GPU planes): profanalyzer analyses TPU "
            "profiles (/device:TPU:N planes); `profanalyze info` still lists its planes"
        )
    shown = ", ".join(sorted({r.name for r in index.planes})[:5])
    return f"{path}: no TPU device planes (/device:TPU:N) in this profile; planes found: {shown}"


def load_trace(
    path: str | Path,
    *,
    chip: str | None = None,
    include_sparsecore: bool = True,
) -> Trace:
    """Read an input path into a Trace (only TPU device planes are decoded)."""
    resolved = reader.resolve_input(path)
    hosts: list[HostInfo] = []
    built: list[tuple[Plane, int]] = []  # (plane relative to its own origin, that origin)
    for f in resolved.files:
        buf = reader.read_bytes(f)
        index = reader.scan_space(buf, f)
        host = reader.host_name(index)
        kinds: dict[str, int] = {}
        for r in index.planes:
            kinds[r.kind] = kinds.get(r.kind, 0) + 1
        hosts.append(HostInfo(host, str(f), index.size, len(index.planes), dict(sorted(kinds.items())), index.errors, index.warnings))
        refs = _device_refs(index, include_sparsecore)
        if not any(r.kind == "tensorcore" for r in refs):
            raise NoTpuPlanesError(_no_tpu_message(f, index))
        # Stream plane by plane: only one decoded plane message is alive at a time.
        for r in refs:
            msg = reader.decode_plane(buf, r, f)
            own = _line_origin(msg) or 0
            built.append((build_plane(msg, host, r.kind, r.device_id or 0, r.sc_index, own), own))
            del msg
        del buf
    # Common origin: the earliest line timestamp of any decoded plane.
    origin_ns = min((o for p, o in built if p.n_events), default=0)
    planes: list[Plane] = []
    for p, own in built:
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
                f'default TPU7x (unrecognised device_type_string "{device_type}")'
                if device_type
                else "default TPU7x (no device_type_string in the trace)"
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
