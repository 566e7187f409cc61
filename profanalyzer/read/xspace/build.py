"""Building the columnar `Trace`: XSpace bytes -> planes -> the trace.

`load_trace(path)` resolves the input (`inputs.resolve_input`), opens every
host file and builds its TPU device planes (TensorCore and SparseCore) on a
pool of threads, then shifts every plane to the common trace origin, picks
the chip and derives the steps (the model and its helpers live in
`profanalyzer.model.trace`).

`build_plane` builds one plane from its wire bytes: its fields scanned, its
header (name, stats, stat names) decoded by the protobuf runtime, its
op-metadata table through `profanalyzer.read.xspace.optable` (shared between
byte-identical maps), each wanted line's events through
`profanalyzer.read.xspace.events`.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from profanalyzer.core.errors import InputError, NoTpuPlanesError
from profanalyzer.core.hardware import (
    TPU7X,
    Chip,
    chip_by_key,
    chip_from_device_type,
    chip_from_peaks,
)
from profanalyzer.model.trace import (
    HostInfo,
    Line,
    OpMetadata,
    Plane,
    Trace,
    derive_steps,
)
from profanalyzer.read.source import Source, capture_source
from profanalyzer.read.xspace import capturefile, reader, wire, xplane_pb2
from profanalyzer.read.xspace.events import (
    MAX_TIME_PS,
    OVERLAPPING_LINES,
    MetaIndex,
    line_events,
    raw_from_message,
)
from profanalyzer.read.xspace.optable import (
    MetadataCache,
    decode_stats,
    map_bytes,
    metadata_from_columns,
    metadata_from_message,
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


def _core_details(raw) -> dict:
    if not isinstance(raw, (bytes, bytearray)):
        return {}
    try:
        cd = xplane_pb2.CoreDetails.FromString(bytes(raw))  # type: ignore[attr-defined]
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


@dataclass(frozen=True)
class _Fields:
    """The top-level fields of one plane's bytes (`wire.scan_fields`): field
    number, wire type, payload [start, end) and where each field's tag is."""

    buf: Any
    start: int
    fld: np.ndarray
    wt: np.ndarray
    p_start: np.ndarray
    p_end: np.ndarray
    tag_at: np.ndarray
    is_line: np.ndarray  # bool: an XLine (field 3)
    is_meta: np.ndarray  # bool: an event-metadata map entry (field 4)

    @classmethod
    def scan(cls, buf, start: int, end: int) -> _Fields:
        try:
            fld, wt, p_start, p_end, tag_at = wire.scan_fields(buf, start, end)
        except ValueError as e:
            raise InputError(f"plane at byte {start} is corrupt ({wire.plain_decode_error(e)})") from None
        return cls(buf, start, fld, wt, p_start, p_end, tag_at, (fld == 3) & (wt == 2), (fld == 4) & (wt == 2))

    def line_spans(self) -> list[tuple[int, int]]:
        is_line = self.is_line
        return list(zip(self.p_start[is_line].tolist(), self.p_end[is_line].tolist(), strict=True))

    def parse(self, which: np.ndarray) -> xplane_pb2.XPlane:  # type: ignore[name-defined]
        """The fields selected by `which`, parsed by the protobuf runtime."""
        buf = self.buf
        data = b"".join(bytes(buf[a:b]) for a, b in zip(self.tag_at[which].tolist(), self.p_end[which].tolist(), strict=True))
        try:
            return xplane_pb2.XPlane.FromString(data)  # type: ignore[attr-defined]
        except DecodeError as e:
            why = wire.explain_decode_error(data, xplane_pb2.XPlane.DESCRIPTOR) or str(e)  # type: ignore[attr-defined]
            raise InputError(f"plane at byte {self.start} is corrupt ({why})") from None

    def metadata(self, names: Mapping[int, str]) -> OpMetadata:
        """The plane's op-metadata table, decoded (not shared)."""
        is_meta = self.is_meta
        cols = wire.decode_metadata(self.buf, np.stack([self.p_start[is_meta], self.p_end[is_meta]], axis=1))
        if cols is not None:
            return metadata_from_columns(self.buf, cols, names)
        # The runtime decodes the map (and reports corruption) with the plane's other fields, as stored.
        return metadata_from_message(self.parse(~self.is_line), names)


def _wanted_stats(names: Mapping[int, str]) -> tuple[dict[int, str], dict[int, str]]:
    """The event stats to decode, by stat id (the first id of a name wins):
    (integer stats, string stats)."""
    names_rev: dict[str, int] = {}
    for k in sorted(names):
        names_rev.setdefault(names[k], k)
    want_int = {names_rev[k]: k for k in EVENT_INT_STATS if k in names_rev}
    want_str = {names_rev[k]: k for k in EVENT_STR_STATS if k in names_rev}
    return want_int, want_str


_Decoded = tuple[int, str, int, wire.RawEvents, dict[str, list[str]]]  # (id, name, timestamp_ns, raw, strs)


def _decode_lines(buf, spans: list[tuple[int, int]], lines: Collection[str] | None, names: Mapping[int, str],
                  want_int: Mapping[int, str], want_str: Mapping[int, str]) -> tuple[list[_Decoded], list[tuple[int, str]]]:
    """The wanted lines' raw events, and (timestamp, name) of the skipped lines
    that have events. Each line by the wire decoder, else the runtime."""
    decoded: list[_Decoded] = []
    skipped: list[tuple[int, str]] = []
    for ps, pe in spans:
        if lines is not None:
            head = wire.peek_line(buf, ps, pe)
            if head is not None and head[0] not in lines:
                if head[2]:
                    skipped.append((head[1], head[0]))
                continue
        fast = wire.decode_line(buf, ps, pe, want=tuple(want_int), dense=True)
        if fast is not None:
            hd, raw = fast
            decoded.append((hd.id, hd.name or hd.display_name, hd.timestamp_ns, raw, {}))
            continue
        try:
            msg = xplane_pb2.XLine.FromString(bytes(buf[ps:pe]))  # type: ignore[attr-defined]
        except DecodeError as e:
            why = wire.explain_decode_error(bytes(buf[ps:pe]), xplane_pb2.XLine.DESCRIPTOR) or str(e)  # type: ignore[attr-defined]
            raise InputError(f"line at byte {ps} is corrupt ({why})") from None
        raw, strs = raw_from_message(msg, names, want_int, want_str)
        decoded.append((msg.id, msg.name or msg.display_name, msg.timestamp_ns, raw, strs))
    return decoded, skipped


def _build_lines(decoded: list[_Decoded], skipped: list[tuple[int, str]], want_int: Mapping[int, str]) -> tuple[list[Line], int]:
    """The lines (times relative to the plane's origin) and that origin in ns:
    the earliest timestamp of a line with events, skipped lines included
    (times do not depend on the selection)."""
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
            built.append(Line(lid, name, line_events(raw, strs, want_int, base_ps, nested=name not in OVERLAPPING_LINES)))
        except InputError as e:
            raise InputError(f"line {name!r}: {e}") from None
    return built, origin


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
    fields = _Fields.scan(buf, start, end)
    plane = fields.parse(~fields.is_line & ~fields.is_meta)
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    want_int, want_str = _wanted_stats(names)
    pstats = decode_stats(plane.stats, names)
    if "core_details" in pstats:
        pstats["core_details"] = _core_details(pstats["core_details"])
    is_meta = fields.is_meta
    shared = map_bytes(buf, fields.tag_at[is_meta], fields.p_end[is_meta], names) if meta_cache is not None else None

    def table() -> OpMetadata:
        if meta_cache is None or shared is None:
            return fields.metadata(names)
        return meta_cache.get(shared.key, shared.region, lambda: fields.metadata(names), shared.kept)

    try:
        # A plane whose table no other thread has (begun to) decode decodes it
        # first, so that planes sharing it wait as little as possible; the
        # others decode their events first and take the table last.
        meta = table() if meta_cache is None or shared is None or meta_cache.unclaimed(shared.key) else None
        built, origin = _build_lines(*_decode_lines(buf, fields.line_spans(), lines, names, want_int, want_str), want_int)
    except BaseException:
        if shared is not None:
            shared.release()
        raise

    def finish(meta: OpMetadata | None) -> tuple[Plane, int]:
        try:
            if meta is None:
                meta = table()
        finally:
            if shared is not None:
                shared.release()
        meta_index = MetaIndex(meta.ids)
        rows = [replace(ln, events=replace(ln.events, meta=meta_index.rows(ln.events.meta))) for ln in built]
        stats = {k: v for k, v in pstats.items() if not isinstance(v, (bytes, bytearray))}
        return Plane(host=host, name=plane.name, id=plane.id, kind=kind, device_id=device_id, sc_index=sc_index,
                     stats=stats, meta=meta, lines=tuple(rows)), origin

    if meta is None and defer and meta_cache is not None and shared is not None and meta_cache.pending(shared.key):
        # Another thread is decoding this plane's table: this thread moves on
        # to other planes, and the caller finishes this one afterwards.
        return Deferred(lambda: finish(None))
    return finish(meta)


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

T = TypeVar("T")


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


def _open_host(cf: capturefile.CaptureFile, include_sparsecore: bool, lines: Collection[str] | None = None,
               meta_cache: MetadataCache | None = None, space: bytes | None = None,
               ) -> tuple[HostInfo, list[Callable[[], tuple[Plane, int] | Deferred]]]:
    """Open one host file: its HostInfo and one decode task per device plane
    (each returns the plane relative to its own origin; they may run on
    threads: the buffer stays alive as long as they do). `meta_cache`: shared
    by the hosts of a run (they run the same programs: one decode of each
    distinct op-metadata map per run). `space`: the serialized XSpace itself,
    built in memory (a replayed program): `f` only names it, and the host has
    no file (`HostInfo.file` is "")."""
    f = cf.path
    kinds_wanted = ("tensorcore", "sparsecore") if include_sparsecore else ("tensorcore",)
    buf: bytes | bytearray | mmap.mmap
    if space is not None:
        buf, index = space, reader.scan_space(space, f)
    else:
        buf, index = reader.open_space(cf, want=lambda r: r.kind in kinds_wanted)
    host = reader.host_name(index)
    kinds: dict[str, int] = {}
    for r in index.planes:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    info = HostInfo(host, str(f) if space is None else "", index.size, len(index.planes), dict(sorted(kinds.items())),
                    index.errors, index.warnings)
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
        if not isinstance(got, Deferred):
            return got
        deferred = got

        def later() -> tuple[Plane, int]:
            return named(r, deferred)

        return Deferred(later)

    return info, [partial(one, r) for r in refs]


def _load_host(f: capturefile.CaptureFile, include_sparsecore: bool, lines: Collection[str] | None = None,
               meta_cache: MetadataCache | None = None, space: bytes | None = None) -> tuple[HostInfo, list[tuple[Plane, int]]]:
    """Decode one host file's device planes (each relative to its own origin)."""
    info, tasks = _open_host(f, include_sparsecore, lines, meta_cache, space)
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


def _load_hosts(files: list[capturefile.CaptureFile], include_sparsecore: bool, lines: Collection[str] | None, jobs: int,
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
            progress(len(results), len(files), f.path.name)

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


def _to_common_origin(built: list[tuple[Plane, int]]) -> tuple[int, list[Plane]]:
    """The common origin (the earliest line timestamp of any decoded plane,
    ns) and the planes shifted to it (in place)."""
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
    return origin_ns, planes


def _device_type(planes: list[Plane]) -> str | None:
    """The first plane's non-empty `device_type_string`."""
    for p in planes:
        dt = p.stats.get("device_type_string")
        if isinstance(dt, str) and dt:
            return dt
    return None


def _peaks(planes: list[Plane]) -> tuple[float, float]:
    """The first device plane's stated (peak_teraflops_per_second, peak_hbm_bw_gigabytes_per_second)."""
    for p in planes:
        tf, bw = p.stats.get("peak_teraflops_per_second"), p.stats.get("peak_hbm_bw_gigabytes_per_second")
        if isinstance(tf, (int, float)) and isinstance(bw, (int, float)) and tf > 0 and bw > 0:
            return float(tf), float(bw)
    return 0.0, 0.0


def _chip(chip: str | None, device_type: str | None, peaks: tuple[float, float] = (0.0, 0.0)) -> tuple[Chip, str]:
    """The chip (`--chip`, else detected from the device type, else from the
    peaks the planes state, else TPU7x) and where it came from."""
    if chip:
        return chip_by_key(chip), "--chip flag"
    detected = chip_from_device_type(device_type)
    if detected is not None:
        return detected, f'device_type_string "{device_type}"'
    by_peaks = chip_from_peaks(*peaks)
    if by_peaks is not None:
        return by_peaks, (f"the device planes' stated peaks ({peaks[0]:g} TFLOP/s, {peaks[1]:g} GB/s per TensorCore)"
                          + (f'; device_type_string "{device_type}" not recognised' if device_type else ""))
    return TPU7X, (
        f'assumed TPU7x (unrecognised device_type_string "{device_type}"; pass --chip)'
        if device_type
        else "assumed TPU7x (no device_type_string in the trace; pass --chip)"
    )


def load_trace(
    path: str | Path | Source,
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

    `path` may be a capture's Source (profanalyzer.read.source: each file
    read once for the run); the Trace keeps it as its `reads`.
    """
    source = path if isinstance(path, Source) else capture_source(path)
    resolved = source.resolved
    assert resolved is not None  # a capture's Source
    files = list(source.files)
    jobs = default_jobs(len(files)) if jobs is None else max(1, jobs)
    results: list[tuple[HostInfo, list[tuple[Plane, int]]]] = []
    if jobs > 1 and len(files) > 1:
        results = _load_hosts(files, include_sparsecore, lines, jobs, progress)
    else:
        meta_cache = MetadataCache()
        for k, f in enumerate(files):
            results.append(_load_host(f, include_sparsecore, lines, meta_cache))
            if progress:
                progress(k + 1, len(files), f.path.name)
    return replace(_assemble(results, source.label, resolved.kind, resolved.run, resolved.note, chip), reads=source)


def _assemble(results: list[tuple[HostInfo, list[tuple[Plane, int]]]], source: str, kind: str, run: str | None,
              note: str | None, chip: str | None) -> Trace:
    """The Trace of decoded hosts: one time origin, the chip, each TensorCore's steps."""
    hosts = [info for info, _ in results]
    built = [pb for _, planes in results for pb in planes]
    del results
    origin_ns, planes = _to_common_origin(built)
    device_type = _device_type(planes)
    chosen, chip_source = _chip(chip, device_type, _peaks(planes))
    steps = {p.label: derive_steps(p) for p in planes if p.kind == "tensorcore"}
    return Trace(
        source=source,
        input_kind=kind,
        run=run,
        note=note,
        hosts=tuple(hosts),
        chip=chosen,
        chip_source=chip_source,
        device_type=device_type,
        origin_ns=origin_ns,
        planes=tuple(planes),
        steps=steps,
    )


def trace_from_bytes(data: bytes, label: str, *, chip: str | None = None,
                     lines: Collection[str] | None = None) -> Trace:
    """The Trace of one serialized XSpace built in memory (a replayed compiled
    program): nothing is written or read from disk; `label` names it in errors."""
    return _assemble([_load_host(capturefile.CaptureFile(label), True, lines, MetadataCache(), data)], label, "file", None, None,
                     chip)
