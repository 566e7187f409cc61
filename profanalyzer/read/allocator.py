"""What the memory section reads from a capture file (a Source's CaptureFile,
its bytes read once per run): the dominant program's buffer assignment (its
`HloProto` in `/host:metadata`, decoded by profanalyzer.read.hlo.memory) and the
runtime's allocator activity on the host planes (`MemoryAllocation` /
`MemoryDeallocation` TraceMe events: per device the stack + heap in use and
the capacity; the peak is the largest stack + heap over the events and
devices). The section itself is profanalyzer.analyze.memory's.

A .gz streams: `/host:metadata` is held as `program_hlo_proto` reads it, host planes
without their lines (each line's metadata ids noted), and only the lines that
hold an allocator event are kept, read in a second pass over the same bytes.

Imports: xspace (reader, wire, metadata, the protobuf module), hlo.memory, vocab.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]  # no stubs installed

from profanalyzer.core.arrays import unique_ids
from profanalyzer.core.vocab import HLO_PROTO_STAT, MEMORY_EVENTS
from profanalyzer.model.trace import AllocatorPeak, MemorySources
from profanalyzer.read.hlo.memory import read_assignment
from profanalyzer.read.xspace import capturefile, reader, wire, xplane_pb2
from profanalyzer.read.xspace.metadata import (
    PL_EVENT_METADATA,
    PL_LINES,
    length_field,
    program_plane,
    program_trim,
    stripped_entry,
    wire_type,
)

__all__ = ["allocator_peak", "allocator_plane", "program_hlo_proto", "read_sources"]


def allocator_peak(host_planes: list[xplane_pb2.XPlane]) -> AllocatorPeak | None:  # type: ignore[name-defined]  # protoc's classes exist only at run time (no stubs)
    """The largest stack + heap in use over the allocator events of every device."""
    best: AllocatorPeak | None = None
    devices: set[int] = set()
    for plane in host_planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        ids = {k for k, v in plane.event_metadata.items() if v.name in MEMORY_EVENTS}
        if not ids:
            continue
        for line in plane.lines:
            for ev in line.events:
                if ev.metadata_id not in ids:
                    continue
                st = {}
                for s in ev.stats:
                    key = names.get(s.metadata_id)
                    if key in ("index_on_host", "bytes_reserved", "bytes_allocated", "bytes_available"):
                        kind = s.WhichOneof("value")
                        if kind in ("int64_value", "uint64_value"):
                            st[key] = int(getattr(s, kind))
                if "bytes_allocated" not in st:
                    continue
                dev = st.get("index_on_host", 0)
                devices.add(dev)
                stack, heap = st.get("bytes_reserved", 0), st["bytes_allocated"]
                if best is None or stack + heap > best.in_use:
                    best = AllocatorPeak(dev, stack + heap, stack, heap, stack + heap + st.get("bytes_available", 0), 0)
    if best is None:
        return None
    return AllocatorPeak(best.device, best.in_use, best.stack, best.heap, best.capacity, len(devices))


def program_hlo_proto(meta: xplane_pb2.XPlane, program: str) -> bytes | None:  # type: ignore[name-defined]  # protoc's classes exist only at run time (no stubs)
    sid = next((k for k, v in meta.stat_metadata.items() if v.name == HLO_PROTO_STAT), None)
    if sid is None:
        return None
    # the exact name ("jit_f(1219...)"), else the name without its "(fingerprint)"
    entries = sorted(meta.event_metadata.values(), key=lambda em: em.name != program)
    base = program.split("(", 1)[0]
    for em in entries:
        if em.name == program or em.name.split("(", 1)[0] == base:
            for s in em.stats:
                if s.metadata_id == sid and s.WhichOneof("value") == "bytes_value":
                    return s.bytes_value
    return None


def _host_trim(seen: list, keep_lines: Collection[int]) -> reader.FieldTrim:
    """Per field of a host plane: event metadata without their stats (names
    kept), the lines numbered in `keep_lines` and those the vectorised decoder
    refuses kept whole; of every other line only its metadata ids, appended
    to `seen` as (line number, unique ids)."""
    count = [0]

    def trim(f: int, raw, start: int):
        if f == PL_LINES and wire_type(raw, start) == 2:
            k = count[0]
            count[0] += 1
            if k in keep_lines:
                return raw
            got = wire.decode_line(raw, start, len(raw), want=())
            if got is None:
                return raw
            seen.append((k, unique_ids(got[1].metadata_id)))
            return None
        if f == PL_EVENT_METADATA and wire_type(raw, start) == 2:
            return length_field(PL_EVENT_METADATA, stripped_entry(raw, start, len(raw)))
        return raw

    return trim


def _memory_ids(buf, start: int, end: int) -> np.ndarray:
    """The event metadata ids of a plane named in MEMORY_EVENTS."""
    ids = set()
    for f, wt, _v, a, b, _ in wire.iter_fields(buf, start, end):
        if f == PL_EVENT_METADATA and wt == 2:
            key, name = wire.metadata_entry(buf, a, b)
            if name in MEMORY_EVENTS and key is not None:
                ids.add(key - (1 << 64) if key >= 1 << 63 else key)
    return np.asarray(sorted(ids), dtype=np.int64)


def allocator_plane(buf, start: int, end: int) -> xplane_pb2.XPlane:  # type: ignore[name-defined]  # protoc's classes exist only at run time (no stubs)
    """A host plane as `allocator_peak` reads it: only the lines that hold an
    allocator event (MEMORY_EVENTS; every other line contributes nothing),
    found from the lines' metadata ids (the vectorised decoder) before any
    line is parsed."""
    try:
        want = _memory_ids(buf, start, end)
        out = bytearray()
        for f, wt, _v, a, b, tag in wire.iter_fields(buf, start, end):
            if f == PL_LINES and wt == 2:
                if not len(want):
                    continue
                got = wire.decode_line(buf, a, b, want=())
                if got is not None and not np.isin(got[1].metadata_id, want).any():
                    continue
            out += buf[tag:b]
    except ValueError:  # malformed: the runtime parses it whole and says where
        return xplane_pb2.XPlane.FromString(bytes(buf[start:end]))  # type: ignore[attr-defined]  # protoc's classes exist only at run time (no stubs)
    return xplane_pb2.XPlane.FromString(bytes(out))  # type: ignore[attr-defined]  # protoc's classes exist only at run time (no stubs)


def read_sources(file: capturefile.CaptureFile | str | Path, program: str) -> MemorySources:
    """Decode `/host:metadata` and the host planes of one host file (only
    these); corrupt planes become a note, never an exception."""
    try:
        return _read_sources(file, program)
    except (ValueError, DecodeError) as e:
        return MemorySources(program=program, notes=[f"memory not read: a metadata or host plane is corrupt ({e})"])


def _read_sources(file: capturefile.CaptureFile | str | Path, program: str) -> MemorySources:
    # A .gz streams: /host:metadata held as `program_hlo_proto` reads it, host planes
    # without their lines (each line's metadata ids noted in `seen`). A plain
    # file is mapped whole and the same trimming happens below.
    seen: dict[int, list] = {}

    def trim(r: reader.PlaneRef) -> reader.FieldTrim | None:
        if r.kind == "metadata":
            return program_trim((program,))
        return _host_trim(seen.setdefault(r.index, []), ())

    buf, index = reader.open_space(file, want=lambda r: r.kind == "host" or (r.kind == "metadata" and bool(program)), trim=trim)
    out = MemorySources(program=program)
    metas = [p for p in index.planes if p.kind == "metadata"]
    hosts = [p for p in index.planes if p.kind == "host"]
    if metas and program:
        meta = program_plane(buf, metas[0].offset, metas[0].offset + metas[0].length, (program,))
        data = program_hlo_proto(meta, program)
        if data is None:
            out.notes.append(f"/host:metadata holds no HLO proto for {program}")
        else:
            try:
                ba = read_assignment(data)
                if ba is None:
                    out.notes.append(f"the HLO proto of {program} has no buffer assignment")
            except ValueError as e:
                ba = None
                out.notes.append(f"the HLO proto of {program} is not readable ({e})")
            out = MemorySources(program, ba, None, out.notes)
    elif not metas:
        out.notes.append("no /host:metadata plane: no HLO protos, no buffer assignment")
    if hosts:
        need = {}
        for p in hosts:
            ids = _memory_ids(buf, p.offset, p.offset + p.length) if seen.get(p.index) else ()
            lines = {k for k, mids in seen.get(p.index, ()) if len(ids) and np.isin(mids, ids).any()}
            if lines:
                need[p.index] = lines
        if need:  # streamed, and lines left behind hold allocator events: read again, keeping just those
            buf2, index2 = reader.open_space(file, want=lambda r: r.index in need, trim=lambda r: _host_trim([], need[r.index]))
            at = {r.index: r for r in index2.planes}
            planes = [allocator_plane(buf2, at[p.index].offset, at[p.index].offset + at[p.index].length) if p.index in need
                      else allocator_plane(buf, p.offset, p.offset + p.length) for p in hosts]
        else:
            planes = [allocator_plane(buf, p.offset, p.offset + p.length) for p in hosts]
        alloc = allocator_peak(planes)
        if alloc is None:
            out.notes.append("the host planes hold no allocator activity (MemoryAllocation events)")
        out = MemorySources(out.program, out.assignment, alloc, out.notes)
    else:
        out.notes.append("no host planes: no allocator activity")
    return out
