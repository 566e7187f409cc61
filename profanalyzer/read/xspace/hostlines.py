"""The host planes' dispatch and input-pipeline lines (HOST_LINES) of one
capture file, read selectively from its bytes (a Source's CaptureFile): every
line's name is peeked before its events (`wire.peek_line`) and only matching
lines are decoded (the vectorised decoder without stats; the protobuf runtime
for a line the fast path refuses). Event names come from the plane's
event-metadata map, decoded field by field. What the host was doing during
idle is profanalyzer.analyze.hostplanes'.

Imports: xspace (reader, wire, the protobuf module), vocab.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from profanalyzer.core.vocab import HOST_LINES
from profanalyzer.read.xspace import capturefile, reader, wire, xplane_pb2

__all__ = ["read_host_events"]

_PLANE_LINES, _PLANE_EVENT_METADATA = 3, 4


def _event_names(buf, start: int, end: int) -> dict[int, str]:
    names: dict[int, str] = {}
    for f, wt, _v, a, b, _ in wire.iter_fields(buf, start, end):
        if f != _PLANE_EVENT_METADATA or wt != 2:
            continue
        key, name = wire.metadata_entry(buf, a, b)
        if key is not None:
            names[key] = name or ""
    return names


def _host_lines_trim(ref: reader.PlaneRef) -> reader.FieldTrim:
    """While a .gz streams: a host plane's lines whose name (peeked before
    their events) is not a HOST_LINES one are dropped, never held."""

    def trim(f: int, raw, start: int):
        if f == _PLANE_LINES and raw[0] & 7 == 2:
            head = wire.peek_line(raw, start, len(raw))
            if head is not None and not HOST_LINES.match(head[0]):
                return None
        return raw

    return trim


def read_host_events(file: capturefile.CaptureFile | str | Path, origin_ns: int = 0) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, int]:
    """(event names, name index, start ps, end ps, lines read) of the
    matching host lines of one file; times in picoseconds from `origin_ns`."""
    buf, index = reader.open_space(file, want=lambda r: r.kind == "host", trim=_host_lines_trim)
    names: list[str] = []
    name_ix: dict[str, int] = {}
    idx, st, en = [], [], []
    read = 0
    for ref in index.planes:
        if ref.kind != "host":
            continue
        a0, b0 = ref.offset, ref.offset + ref.length
        meta = _event_names(buf, a0, b0)
        for f, wt, _v, a, b, _ in wire.iter_fields(buf, a0, b0):
            if f != _PLANE_LINES or wt != 2:
                continue
            head = wire.peek_line(buf, a, b)
            if head is not None and not HOST_LINES.match(head[0]):
                continue
            got = wire.decode_line(buf, a, b, want=())
            if got is not None:
                hdr, ev = got
                if not HOST_LINES.match(hdr.name or hdr.display_name):
                    continue
                base, mids, off, dur = (hdr.timestamp_ns - origin_ns) * 1000, ev.metadata_id, ev.offset_ps, ev.duration_ps
            else:
                line = xplane_pb2.XLine.FromString(bytes(buf[a:b]))  # type: ignore[attr-defined]  # protoc's classes exist only at run time (no stubs)
                if not HOST_LINES.match(line.name or line.display_name):
                    continue
                base = (line.timestamp_ns - origin_ns) * 1000
                mids = np.asarray([e.metadata_id for e in line.events], dtype=np.int64)
                off = np.asarray([e.offset_ps for e in line.events], dtype=np.int64)
                dur = np.asarray([e.duration_ps for e in line.events], dtype=np.int64)
            read += 1
            for m in np.unique(mids).tolist():
                n = meta.get(m, f"#{m}")
                if n not in name_ix:
                    name_ix[n] = len(names)
                    names.append(n)
            lut = {m: name_ix[meta.get(m, f"#{m}")] for m in np.unique(mids).tolist()}
            idx.append(np.asarray([lut[m] for m in mids.tolist()], dtype=np.int64))
            st.append(base + off)
            en.append(base + off + dur)
    if not idx:
        z = np.zeros(0, dtype=np.int64)
        return names, z, z, z, read
    return names, np.concatenate(idx), np.concatenate(st), np.concatenate(en), read
